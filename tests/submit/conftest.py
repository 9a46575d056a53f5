"""Test setup for htgrid.submit.

Until `htgrid.classad` is importable, the submit tests run against the official
`classad2` module (whose API htgrid.classad mirrors), loaded in HTCondor mode.
The shipped code always imports `htgrid.classad`.
"""

from __future__ import annotations

import importlib
import sys


def _install_classad_shim() -> None:
    try:
        module = importlib.import_module("htgrid.classad")
        if hasattr(module, "ClassAd") and hasattr(module, "ExprTree"):
            return
    except ImportError:
        pass
    import classad2
    import htcondor2  # noqa: F401  (switches classad2 to HTCondor's evaluation mode)

    sys.modules["htgrid.classad"] = classad2


_install_classad_shim()
