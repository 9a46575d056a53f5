"""The GAHP servers (separate processes) import no daemon package, and the client side
they share with the daemons imports none either: checked on the source, import by import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import htgrid

SRC = Path(htgrid.__file__).parent

# What each package may import of htgrid besides itself.
ALLOWED = {
    "backends": {"classad", "gahp", "errors", "client", "_gc", "_startup", "_args", "_lazy"},
    "client": {"errors", "_lazy"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n.split(".")[1] for n in names if n.startswith("htgrid.")}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_is_below_it(package: str) -> None:
    wrong = {
        str(path.relative_to(SRC)): sorted(found)
        for path in sorted((SRC / package).rglob("*.py"))
        if (found := _imports(path) - ALLOWED[package] - {package})
    }
    assert wrong == {}
