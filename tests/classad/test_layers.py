"""htgrid.classad's modules sit in layers (its docstring; import-linter's classad-layers),
so none imports inside a function to dodge a cycle: an import there has another reason
(a module loaded at first use, for start-up), and says it in a comment."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import htgrid.classad

PACKAGE = Path(htgrid.classad.__file__).parent


def _imports_in_functions(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    def walk(node: ast.AST, in_function: bool) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # for annotations: never run
            if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from walk(child, inside)

    return walk(tree, False)


def _says_why(lines: list[str], node: ast.Import | ast.ImportFrom) -> bool:
    """A comment on the import's line, or right above it (above the imports it heads)."""
    if "#" in lines[node.lineno - 1]:
        return True
    above = node.lineno - 2
    while above >= 0 and lines[above].lstrip().startswith(("import ", "from ")):
        above -= 1
    return above >= 0 and lines[above].lstrip().startswith("#")


def _silent(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    return [
        f"{path.relative_to(PACKAGE)}:{node.lineno} {ast.unparse(node)}"
        for node in _imports_in_functions(ast.parse(text))
        if not _says_why(lines, node)
    ]


def test_every_import_inside_a_function_says_why() -> None:
    assert [line for path in sorted(PACKAGE.rglob("*.py")) for line in _silent(path)] == []
