"""Shared machinery of the ClassAd conformance suite.

Every case is run through two modules with the same API: the oracle (the official
``classad2`` binding, evaluated in HTCondor mode) and the module under test
(``htgrid.classad``).  A run turns whatever comes back into a *canonical form*: a
JSON-friendly nest of lists, strings, ints and bools, so that two results compare
with ``==`` and an oracle result can be recorded in the case files.

Canonical forms::

    ["int", 3]                  a Python int (bool is never an int here)
    ["bool", True]
    ["real", "2.5"]             repr() of a float: keeps -0.0, nan, inf apart
    ["str", "abc"]
    ["value", "Undefined"]      Value.Undefined / Value.Error, by name
    ["abstime", "1970-01-01T00:00:00+00:00"]   a datetime, by isoformat()
    ["list", [...]]             item by item
    ["expr", "a + 1"]           an ExprTree, by its compact unparse (repr)
    ["ad", [[key.lower(), key, repr(lookup(key))], ...]]  sorted by key.lower()
    ["raises", "ClassAdException"]   or the builtin exception class name

ClassAd attribute order is a hash order in classad2, so every unparse that can
hold a nested record goes through `normalize_unparse`, which sorts the
attributes of each ``[ ... ]`` record while keeping all the whitespace.
"""

from __future__ import annotations

import builtins
import datetime
import enum
import json
import os
import re
import string
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"

SELFTEST_ENV = "HTGRID_CONFORMANCE_SELFTEST"

Canon = Any


def fix_timezone() -> None:
    """Pin the process time zone: formatTime() and friends read it."""
    os.environ["TZ"] = "UTC"
    time.tzset()


fix_timezone()


def load_oracle() -> ModuleType:
    import classad2
    import htcondor2  # noqa: F401  (switches classad2 into HTCondor evaluation mode)

    return classad2


def load_ours() -> ModuleType:
    """The module under test; the oracle again when the self-test switch is on.

    An ImportError here is meant to fail the importing test module.
    """
    if os.environ.get(SELFTEST_ENV) == "1":
        return load_oracle()
    import htgrid.classad as ours

    missing = [name for name in ("ClassAd", "ExprTree", "Value") if not hasattr(ours, name)]
    if missing:
        raise ImportError(f"htgrid.classad does not define {', '.join(missing)} yet")
    return ours


def exception_classes(mod: ModuleType) -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    exc = getattr(mod, "ClassAdException", None)
    if isinstance(exc, type):
        found.append(exc)
    if mod.__name__.startswith("htgrid"):
        try:
            from htgrid.errors import ClassAdException
        except ImportError:  # pragma: no cover - htgrid always has it
            pass
        else:
            found.append(ClassAdException)
    return tuple(found)


def exception_token(mod: ModuleType, exc: BaseException, hint: Canon = None) -> str:
    """One token for an exception, the same for both modules when they agree.

    When the oracle raised a builtin exception (the hint), an exception of ours
    that is an instance of that builtin class counts as the same (htgrid's
    errors are often both a ClassAdException and a ValueError/TypeError).
    """
    if isinstance(hint, list) and len(hint) == 2 and hint[0] == "raises":
        wanted = getattr(builtins, hint[1], None)
        if isinstance(wanted, type) and isinstance(exc, wanted):
            return str(hint[1])
    if isinstance(exc, exception_classes(mod)):
        return "ClassAdException"
    return type(exc).__name__


# ---------------------------------------------------------------------------
# Unparse normalisation (attribute order inside records is a hash order)
# ---------------------------------------------------------------------------

_IDENT = frozenset(string.ascii_letters + string.digits + "_")
_CLOSERS = {"(": ")", "{": "}", "[": "]"}


def _skip_quoted(text: str, i: int) -> int:
    quote = text[i]
    j = i + 1
    n = len(text)
    while j < n:
        if text[j] == "\\":
            j += 2
        elif text[j] == quote:
            return j + 1
        else:
            j += 1
    return n


def _opens_record(text: str, i: int) -> bool:
    """Is the '[' at i a record literal (and not a subscript)?"""
    j = i - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    if j < 0:
        return True
    prev = text[j]
    if prev in _IDENT:
        k = j
        while k >= 0 and text[k] in _IDENT:
            k -= 1
        return text[k + 1 : j + 1].lower() in ("is", "isnt")
    return prev not in ")]}\"'"


def _scan(text: str, i: int, closer: str | None, split: bool) -> tuple[list[str], int]:
    """Normalise text[i:] up to `closer` at depth 0; split on ';' if asked."""
    segments: list[str] = []
    parts: list[str] = []
    n = len(text)
    while i < n:
        ch = text[i]
        if closer is not None and ch == closer:
            break
        if split and ch == ";":
            segments.append("".join(parts))
            parts = []
            i += 1
            continue
        if ch in "\"'":
            j = _skip_quoted(text, i)
            parts.append(text[i:j])
            i = j
            continue
        if ch in _CLOSERS:
            close = _CLOSERS[ch]
            record = ch == "[" and _opens_record(text, i)
            inner, j = _scan(text, i + 1, close, record)
            body = _assemble_record(inner) if record else inner[0]
            parts.append(ch + body + (close if j < n else ""))
            i = j + 1
            continue
        parts.append(ch)
        i += 1
    segments.append("".join(parts))
    return segments, i


def _assemble_record(segments: list[str]) -> str:
    cores = sorted((s.strip() for s in segments if s.strip()), key=lambda c: (c.lower(), c))
    supply = iter(cores)
    out: list[str] = []
    for seg in segments:
        core = seg.strip()
        if not core:
            out.append(seg)
            continue
        lead = seg[: len(seg) - len(seg.lstrip())]
        trail = seg[len(seg.rstrip()) :]
        out.append(lead + next(supply) + trail)
    return ";".join(out)


def normalize_unparse(text: str) -> str:
    """`text` with the attributes of every record literal in sorted order."""
    segments, _ = _scan(text, 0, None, False)
    return segments[0]


# ---------------------------------------------------------------------------
# Canonical forms
# ---------------------------------------------------------------------------


def canon_expr(mod: ModuleType, expr: Any) -> Canon:
    return ["expr", normalize_unparse(repr(expr))]


def canon_ad(mod: ModuleType, ad: Any) -> Canon:
    rows = [[str(key).lower(), str(key), normalize_unparse(repr(ad.lookup(key)))] for key in ad]
    rows.sort()
    return ["ad", rows]


def canon_value(mod: ModuleType, value: Any) -> Canon:
    """The canonical form of a Python value handed back by `mod`."""
    value_type = getattr(mod, "Value", None)
    if isinstance(value_type, type) and isinstance(value, value_type):
        return ["value", value.name]
    if isinstance(value, enum.Enum):
        return ["enum", f"{type(value).__module__}.{type(value).__qualname__}", value.name]
    if value is None:
        return ["none"]
    if type(value) is bool:
        return ["bool", value]
    if type(value) is int:
        return ["int", value]
    if type(value) is float:
        return ["real", repr(value)]
    if type(value) is str:
        return ["str", value]
    if type(value) is datetime.datetime:
        return ["abstime", value.isoformat()]
    if type(value) is list:
        return ["list", [canon_value(mod, item) for item in value]]
    if isinstance(value, mod.ClassAd):
        return canon_ad(mod, value)
    if isinstance(value, mod.ExprTree):
        return canon_expr(mod, value)
    return ["other", f"{type(value).__module__}.{type(value).__qualname__}", repr(value)]


def canon_old(text: str) -> Canon:
    lines = sorted(normalize_unparse(line) for line in text.split("\n"))
    return ["old", lines]


_EXPR_IN_JSON = re.compile(r'"/Expr\((.*)\)/"')


def _json_canon(obj: Any) -> Canon:
    if isinstance(obj, dict):
        return ["obj", sorted([key, _json_canon(val)] for key, val in obj.items())]
    if isinstance(obj, list):
        return ["arr", [_json_canon(item) for item in obj]]
    if isinstance(obj, str) and obj.startswith("/Expr(") and obj.endswith(")/"):
        return ["jexpr", normalize_unparse(obj[6:-2])]
    if isinstance(obj, float):
        return ["jreal", repr(obj)]
    return ["j" + type(obj).__name__, obj]


def _json_line(line: str) -> str:
    def norm(match: re.Match[str]) -> str:
        try:
            inner = json.loads('"' + match.group(1) + '"')
        except ValueError:
            return match.group(0)
        return '"/Expr(' + normalize_unparse(inner) + ')/"'

    return _EXPR_IN_JSON.sub(norm, line.rstrip().rstrip(","))


def canon_json(text: str) -> Canon:
    try:
        parsed = _json_canon(json.loads(text))
    except ValueError:
        parsed = ["badjson", text]
    return ["json", parsed, sorted(_json_line(line) for line in text.split("\n"))]


# ---------------------------------------------------------------------------
# Case kinds
# ---------------------------------------------------------------------------


def _ad(mod: ModuleType, text: str | None) -> Any:
    return None if text is None else mod.ClassAd(text)


def _kind_eval(mod: ModuleType, case: dict[str, Any]) -> Canon:
    expr = mod.ExprTree(case["expr"])
    scope = _ad(mod, case.get("scope"))
    target = _ad(mod, case.get("target"))
    if scope is None and target is None:
        return canon_value(mod, expr.eval())
    if target is None:
        return canon_value(mod, expr.eval(scope))
    return canon_value(mod, expr.eval(scope, target))


def _kind_adeval(mod: ModuleType, case: dict[str, Any]) -> Canon:
    ad = mod.ClassAd(case["ad"])
    return canon_value(mod, ad.eval(case["attr"]))


def _kind_unparse(mod: ModuleType, case: dict[str, Any]) -> Canon:
    expr = mod.ExprTree(case["expr"])
    compact = repr(expr)
    pretty = str(expr)
    again = repr(mod.ExprTree(compact))
    return [
        "unparse",
        normalize_unparse(compact),
        normalize_unparse(pretty),
        normalize_unparse(again),
    ]


def _kind_adprint(mod: ModuleType, case: dict[str, Any]) -> Canon:
    ad = mod.ClassAd(case["ad"])
    how = case["how"]
    if how == "repr":
        return ["repr", normalize_unparse(repr(ad))]
    if how == "str":
        return ["str", normalize_unparse(str(ad))]
    if how == "printOld":
        return canon_old(ad.printOld())
    if how == "printJson":
        return canon_json(ad.printJson())
    if how == "content":
        return canon_ad(mod, ad)
    if how == "len":
        return ["len", len(ad)]
    raise AssertionError(f"unknown adprint mode {how!r}")


def _parser(mod: ModuleType, name: str | None) -> Any:
    return None if name is None else getattr(mod.ParserType, name)


def _kind_parse(mod: ModuleType, case: dict[str, Any]) -> Canon:
    fn = getattr(mod, case["fn"])
    parser = _parser(mod, case.get("parser"))
    args: tuple[Any, ...] = (case["text"],) if parser is None else (case["text"], parser)
    result = fn(*args)
    if case["fn"] == "parseAds":
        return ["ads", [canon_ad(mod, ad) for ad in result]]
    if result is None:
        return ["none"]
    return canon_ad(mod, result)


def _kind_adop(mod: ModuleType, case: dict[str, Any]) -> Canon:
    ad = mod.ClassAd(case["ad"])
    op = case["op"]
    if op in ("matches", "symmetricMatch"):
        other = mod.ClassAd(case["other"])
        return canon_value(mod, getattr(ad, op)(other))
    expr = mod.ExprTree(case["expr"])
    if op == "flatten":
        return canon_value(mod, ad.flatten(expr))
    if op in ("externalRefs", "internalRefs"):
        return ["refs", list(getattr(ad, op)(expr))]
    raise AssertionError(f"unknown adop {op!r}")


def _kind_simplify(mod: ModuleType, case: dict[str, Any]) -> Canon:
    expr = mod.ExprTree(case["expr"])
    scope = _ad(mod, case.get("scope"))
    target = _ad(mod, case.get("target"))
    return canon_value(mod, expr.simplify(scope, target))


def _kind_quote(mod: ModuleType, case: dict[str, Any]) -> Canon:
    return canon_value(mod, getattr(mod, case["op"])(case["text"]))


KINDS: dict[str, Callable[[ModuleType, dict[str, Any]], Canon]] = {
    "eval": _kind_eval,
    "adeval": _kind_adeval,
    "unparse": _kind_unparse,
    "adprint": _kind_adprint,
    "parse": _kind_parse,
    "adop": _kind_adop,
    "simplify": _kind_simplify,
    "quote": _kind_quote,
}

INPUT_FIELDS = (
    "kind",
    "expr",
    "scope",
    "target",
    "ad",
    "attr",
    "how",
    "fn",
    "parser",
    "text",
    "op",
    "other",
)


def case_inputs(case: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a case: its kind and inputs (for de-duplication)."""
    return tuple(case.get(name) for name in INPUT_FIELDS)


def run_case(mod: ModuleType, case: dict[str, Any], hint: Canon = None) -> Canon:
    try:
        return KINDS[case["kind"]](mod, case)
    except Exception as exc:
        return ["raises", exception_token(mod, exc, hint)]


# ---------------------------------------------------------------------------
# Case files
# ---------------------------------------------------------------------------


def load_case_files(directory: Path = CASES_DIR) -> list[tuple[str, dict[str, Any]]]:
    cases: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(directory.glob("*.json")):
        source = path.stem
        with path.open(encoding="utf-8") as handle:
            document = json.load(handle)
        cases.extend((source, case) for case in document["cases"])
    return cases


def case_label(source: str, case: dict[str, Any], limit: int = 90) -> str:
    kind = case["kind"]
    if "id" in case:
        label = case["id"]
    elif kind == "eval":
        label = case["expr"]
        if case.get("scope") is not None or case.get("target") is not None:
            label = f"{label} @scope"
    elif kind in ("unparse", "simplify"):
        label = f"{kind} {case['expr']}"
    elif kind == "adeval":
        label = f"{case['ad']}.eval({case['attr']})"
    elif kind == "adprint":
        label = f"{case['how']} {case['ad']}"
    elif kind == "adop":
        label = f"{case['op']} {case.get('expr') or case.get('other')} in {case['ad']}"
    elif kind == "parse":
        label = f"{case['fn']}/{case.get('parser', 'default')} {case['text']!r}"
    elif kind == "quote":
        label = f"{case['op']} {case['text']!r}"
    else:
        label = kind
    label = " ".join(str(label).split()) or "(empty)"
    if len(label) > limit:
        label = label[: limit - 3] + "..."
    return f"{source}:{label}"


def describe(canon: Canon) -> str:
    return json.dumps(canon, ensure_ascii=False)
