"""No package of htgrid reaches into another's private parts (read from the source).

- htgrid.classad: no module outside it imports one of its private modules or names, or
  uses a `_` member of its objects (ClassAd, ExprTree, entries, syntax nodes). What the
  queue and the negotiator need is public in `htgrid.classad.fast`, `.syntax` and
  `.analysis`.

That no package imports another's private modules is import-linter's contract (the
"private" one in pyproject.toml, run by .ci/run); this test adds what it cannot see for
htgrid.classad: private names imported from its public modules and `_` members used.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid

SRC = Path(htgrid.__file__).parent


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package(module: str) -> str | None:
    """`htgrid.X` of a module in package X; None for the modules right under htgrid."""
    parts = module.split(".")
    if len(parts) < 2 or _private(parts[1]):
        return None
    return ".".join(parts[:2])


def _private_target(dotted: str) -> str | None:
    """`dotted` cut after its first private part (beyond `htgrid.X`), or None."""
    parts = dotted.split(".")
    if len(parts) < 2 or parts[0] != "htgrid" or _private(parts[1]):
        return None
    for i in range(2, len(parts)):
        if _private(parts[i]):
            return ".".join(parts[: i + 1])
    return None


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything `tree` imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package up
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def private_imports(source: str, module: str, is_package: bool = False) -> set[tuple[str, str]]:
    """(module, the other package's private module or name) for each import of one;
    `is_package`: the source is the package's `__init__`."""
    own = _package(module)
    found = set()
    for _, dotted in _imported(ast.parse(source), module, is_package):
        target = _private_target(dotted)
        if target is not None and _package(target) != own:
            found.add((module, target))
    return found


def defined_members(tree: ast.AST) -> set[str]:
    """The `_` members the classes of `tree` define: methods, class attributes and
    fields, slots, and what their methods assign to `self._x`."""
    names: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(stmt.name)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names.add(stmt.target.id)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        names.add(target.id)
                        if target.id == "__slots__":
                            names.update(
                                c.value
                                for c in ast.walk(stmt.value)
                                if isinstance(c, ast.Constant) and isinstance(c.value, str)
                            )
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return {name for name in names if _private(name)}


def _own_receiver(node: ast.expr) -> bool:
    """`self`, `cls` or `super()`: the object's own members."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def member_uses(source: str, members: set[str]) -> set[tuple[int, str]]:
    """(line, member) of each use of one of `members` on another object (`x._attrs`,
    `getattr(x, "_attrs")`), except those the module's own classes define."""
    tree = ast.parse(source)
    foreign = members - defined_members(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in foreign:
            if not _own_receiver(node.value):
                found.add((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and len(node.args) >= 2
            and (
                (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"))
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "__setattr__")
            )
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in foreign
            and not _own_receiver(node.args[0])
        ):
            found.add((node.lineno, str(node.args[1].value)))
    return found


def _sources() -> Iterator[tuple[str, str, bool]]:
    """(module, its source, whether it is a package's __init__) of each module."""
    for path in sorted(SRC.rglob("*.py")):
        yield _module_name(path), path.read_text(encoding="utf-8"), path.stem == "__init__"


# The modules of htgrid.classad's public API.
_CLASSAD_API = ("", ".adjson", ".analysis", ".fast", ".syntax")


def _classad_members() -> set[str]:
    """The `_` members of every class whose objects htgrid.classad hands out: those its
    public modules export, their bases and subclasses in htgrid.classad (sunder names
    such as an Enum's `_value_` are Python's protocols, left out)."""
    todo = [
        obj
        for suffix in _CLASSAD_API
        for module in [importlib.import_module("htgrid.classad" + suffix)]
        for obj in (getattr(module, name) for name in module.__all__)
        if inspect.isclass(obj)
    ]
    seen: set[type] = set()
    while todo:
        cls = todo.pop()
        if cls in seen or not cls.__module__.startswith("htgrid.classad"):
            continue
        seen.add(cls)
        todo += [*cls.__mro__[1:], *cls.__subclasses__()]
    return {
        name
        for cls in seen
        for name in vars(cls)
        if _private(name) and not (name.endswith("_") and len(name) > 2)
    }


def test_nothing_outside_classad_imports_its_private_parts() -> None:
    found = sorted(
        (module, target)
        for module, source, is_package in _sources()
        for module, target in private_imports(source, module, is_package)
        if _package(target) == "htgrid.classad"
    )
    assert found == []


def test_nothing_outside_classad_uses_a_private_member_of_its_objects() -> None:
    members = _classad_members()
    # The checker sees the classes: ClassAd's, ExprTree's (and BuiltExpr's), Entry's, Node's.
    assert {"_attrs", "_node", "_of", "_truth", "_fn"} <= members
    found = sorted(
        (module, line, member)
        for module, source, _ in _sources()
        if _package(module) != "htgrid.classad"
        for line, member in member_uses(source, members)
    )
    assert found == []


# -- the checker itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from htgrid.classad._ast import Node", "htgrid.queue._x", "htgrid.classad._ast"),
        ("import htgrid.classad._ast", "htgrid.queue._x", "htgrid.classad._ast"),
        ("from htgrid.classad import _v1", "htgrid.queue._x", "htgrid.classad._v1"),
        ("from htgrid.classad.fast import _x", "htgrid.cli.x", "htgrid.classad.fast._x"),
        (
            "from htgrid.net.security._rotate import C",
            "htgrid.schedd",
            "htgrid.net.security._rotate",
        ),
        ("from ..net._wire import f", "htgrid.schedd._service", "htgrid.net._wire"),
        ("importlib.import_module('htgrid.classad._ast')", "htgrid.cli.x", "htgrid.classad._ast"),
    ],
)
def test_the_import_check_finds(source: str, module: str, expected: str) -> None:
    assert private_imports(source, module) == {(module, expected)}


def test_the_import_check_resolves_relative_imports_in_a_package() -> None:
    found = private_imports("from ..net import _wire", "htgrid.schedd", is_package=True)
    assert found == {("htgrid.schedd", "htgrid.net._wire")}


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from htgrid.classad.fast import entries", "htgrid.queue._x"),
        ("from htgrid.queue._serial import decode", "htgrid.queue._store"),
        ("from htgrid.net.security._rotate import C", "htgrid.net.app"),
        ("from htgrid._privsep import Account", "htgrid.schedd._launch"),
        ("from ._store import JobQueue", "htgrid.queue._x"),
    ],
)
def test_the_import_check_allows(source: str, module: str) -> None:
    assert private_imports(source, module) == set()
    assert private_imports("from . import _store", "htgrid.queue", is_package=True) == set()


def test_the_member_check_finds_uses_on_other_objects_only() -> None:
    source = (
        "def f(ad, e):\n"
        "    ad._attrs.get('x')\n"
        "    ExprTree._of(e)\n"
        "    getattr(ad, '_node')\n"
        "class Own:\n"
        "    __slots__ = ('_scope',)\n"
        "    def g(self, other):\n"
        "        return self._node, other._scope, super()._of\n"
    )
    uses = member_uses(source, {"_attrs", "_of", "_node", "_scope"})
    assert uses == {(2, "_attrs"), (3, "_of"), (4, "_node")}
