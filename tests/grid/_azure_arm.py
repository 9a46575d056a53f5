"""The fake ARM and its fixtures from tests/backends/azure, for the grid manager's tests.

`tests` is no package (pytest's importlib mode names modules from the first directory
with an `__init__.py`), so `tests/backends` is loaded here under the name pytest gives
it, `backends`; a run collecting both directories then shares one copy of each module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_TESTS = Path(__file__).resolve().parents[1]


def _package(name: str, path: Path) -> ModuleType:
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(
        name, path / "__init__.py", submodule_search_locations=[str(path)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_package("backends", _TESTS / "backends")
_package("backends.azure", _TESTS / "backends" / "azure")
_server = importlib.import_module("backends.azure.arm_server")
_conftest = importlib.import_module("backends.azure.conftest")

ArmServer = _server.ArmServer
Logged = _server.Logged
SUBSCRIPTION: str = _server.SUBSCRIPTION
#: Fixtures: the fake ARM (per module), an auth file for it, an SSH public key file.
arm = _conftest.arm
auth_file = _conftest.auth_file
ssh_key_file = _conftest.ssh_key_file
gahp_env = _conftest.gahp_env
gahp_argv = _conftest.gahp_argv
write_auth_file = _conftest.write_auth_file

__all__ = [
    "SUBSCRIPTION",
    "ArmServer",
    "Logged",
    "arm",
    "auth_file",
    "gahp_argv",
    "gahp_env",
    "ssh_key_file",
    "write_auth_file",
]
