"""Every error htgrid raises joins one tree, drawn whole in htgrid/errors.py.

The drawing is checked against the classes themselves: a new error must join the tree
under HTGridError and be drawn where it stands (the failure message prints the drawing
as it should be, to paste in).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import htgrid
import htgrid.errors
from htgrid.errors import HTGridError

#: Signals that carry a result inside the ClassAd evaluator and never leave it.
_INTERNAL = frozenset(
    {
        "htgrid.classad._compile.EvaluationFailed",
        "htgrid.classad._compile.RaisedInPython",
        # The Azure runbook stands alone (no htgrid import); htgrid.annex translates it.
        "htgrid.annex.azure_runbook.ArmFailure",
    }
)


def _htgrid_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(htgrid.__path__, "htgrid."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # running it is what importing it does
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__.startswith("htgrid")
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def _public(name: str) -> bool:
    return not name.rsplit(".", 1)[-1].startswith("_") and name not in _INTERNAL


def _package(cls: type) -> str:
    parts = cls.__module__.split(".")
    return (
        "htgrid"
        if len(parts) < 2 or parts[1].startswith("_") or parts[1] == "errors"
        else f"htgrid.{parts[1]}"
    )


def drawing() -> str:
    """The tree below HTGridError, one class a line, as errors.py draws it."""
    public = {cls for name, cls in _htgrid_exceptions().items() if _public(name)}
    lines = ["HTGridError"]

    def below(parent: type, depth: int) -> None:
        children = sorted(
            (c for c in public if parent in c.__bases__),
            key=lambda c: (_package(c), c.__name__),
        )
        for child in children:
            # What else a script may catch it as (ValueError, LookupError...).
            also = [b.__name__ for b in child.__bases__ if not issubclass(b, HTGridError)]
            where = _package(child) + (f"; also {', '.join(also)}" if also else "")
            lines.append(f"{'    ' * depth}{child.__name__}  ({where})")
            below(child, depth + 1)

    below(HTGridError, 1)
    return "\n".join(lines)


def test_every_error_htgrid_raises_is_an_htgrid_error() -> None:
    strays = sorted(
        name
        for name, cls in _htgrid_exceptions().items()
        if _public(name) and not issubclass(cls, HTGridError)
    )
    assert strays == []


def test_no_two_errors_share_a_name() -> None:
    names = [n.rsplit(".", 1)[-1] for n in _htgrid_exceptions() if _public(n)]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_errors_py_draws_the_whole_tree() -> None:
    doc = htgrid.errors.__doc__ or ""
    drawn = re.search(r"^HTGridError\n(?:    .*\n?)*", doc, re.MULTILINE)
    assert drawn is not None, "errors.py's docstring has no drawing of the tree"
    expected = drawing()
    assert drawn.group(0).rstrip("\n") == expected, "errors.py should draw:\n" + expected
