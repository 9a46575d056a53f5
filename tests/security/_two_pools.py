"""The two-pool helpers of tests/htcondor_c (`_pools`), for HTCondor-C jobs of a non-root
owner.

`tests` is no package (pytest's importlib mode names modules from the first directory
with an `__init__.py`), so `tests/htcondor_c` is loaded here under the name pytest gives
it, `htcondor_c`; a run collecting both directories then shares one copy of each module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

_DIR = Path(__file__).resolve().parents[1] / "htcondor_c"

if "htcondor_c" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "htcondor_c", _DIR / "__init__.py", submodule_search_locations=[str(_DIR)]
    )
    assert _spec is not None and _spec.loader is not None
    sys.modules["htcondor_c"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["htcondor_c"])
_pools = importlib.import_module("htcondor_c._pools")

B_NAME: str = _pools.B_NAME
b_jobs = _pools.b_jobs
two_pools = _pools.two_pools

__all__ = ["B_NAME", "b_jobs", "two_pools"]
