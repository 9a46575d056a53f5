"""Build the conformance case files (cases/*.json) from sources/ and the generators.

Run from anywhere:  python tests/classad/conformance/build_cases.py

For every case the oracle (classad2 in HTCondor mode) is run three times; a case
whose answers differ, or whose answer depends on the current time, is dropped and
listed in cases/BUILD_REPORT.txt.  Where a ported source states an expected value
(the "=> WANT" of a line) and the oracle answers otherwise, the case is kept (the
oracle is the reference) and the disagreement is listed in the report.

Source line format (sources/*.txt, one case a line):

    # comment
    define: NAME := TEXT          later lines may say $NAME
    scope: AD                     scope ad for the eval/simplify lines that follow
    scope:                        (clears it); target: works the same way
    mode: eval+unparse            every later eval line also yields an unparse case
    eval: EXPR [=> WANT]
    unparse: EXPR
    simplify: EXPR
    adeval: AD :: ATTR [=> WANT]
    adprint: HOW :: AD            HOW: repr, str, printOld, printJson, content, len
    adop: OP :: AD :: ARG         OP: matches, symmetricMatch (ARG an ad),
                                  flatten, externalRefs, internalRefs (ARG an expr)
    quote: TEXT  /  unquote: TEXT
    json: {...}                   any case as a JSON object (see _support.KINDS)

WANT: U, E, B:true, B:false, I:<int>, R:<float>, S:<raw text>, X:<expr> (the
value EXPR evaluates to), RAISES.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _support

ORACLE = _support.load_oracle()
SOURCES = _support.HERE / "sources"
REPORT = _support.CASES_DIR / "BUILD_REPORT.txt"

Case = dict[str, Any]

# ---------------------------------------------------------------------------
# Reading the ported sources
# ---------------------------------------------------------------------------

_DEFINE_REF = re.compile(r"\$([A-Z][A-Z0-9_]*)")


def _split_want(text: str) -> tuple[str, str | None]:
    if " => " in text:
        expr, want = text.rsplit(" => ", 1)
        return expr.strip(), want.strip()
    return text.strip(), None


def read_source(path: Path) -> list[Case]:
    cases: list[Case] = []
    defines: dict[str, str] = {}
    scope: str | None = None
    target: str | None = None
    also_unparse = False
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path.name}:{lineno}"
        directive, sep, rest = line.partition(":")
        if not sep:
            raise SystemExit(f"{where}: no directive in {line!r}")
        rest = rest.strip()
        if directive == "define":
            name, _, text = rest.partition(":=")
            defines[name.strip()] = text.strip()
            continue

        def expand(text: str) -> str:
            return _DEFINE_REF.sub(lambda m: defines[m.group(1)], text)

        rest = rest if directive == "json" else expand(rest)
        if directive == "scope":
            scope = rest or None
        elif directive == "target":
            target = rest or None
        elif directive == "mode":
            also_unparse = rest == "eval+unparse"
        elif directive == "eval":
            expr, want = _split_want(rest)
            case: Case = {"kind": "eval", "expr": expr}
            if scope is not None:
                case["scope"] = scope
            if target is not None:
                case["target"] = target
            if want is not None:
                case["want"] = want
            cases.append(case)
            if also_unparse:
                cases.append({"kind": "unparse", "expr": expr})
        elif directive == "simplify":
            case = {"kind": "simplify", "expr": rest}
            if scope is not None:
                case["scope"] = scope
            if target is not None:
                case["target"] = target
            cases.append(case)
        elif directive == "unparse":
            cases.append({"kind": "unparse", "expr": rest})
        elif directive == "adeval":
            body, want = _split_want(rest)
            ad, _, attr = body.rpartition(" :: ")
            case = {"kind": "adeval", "ad": ad.strip(), "attr": attr.strip()}
            if want is not None:
                case["want"] = want
            cases.append(case)
        elif directive == "adprint":
            how, _, ad = rest.partition(" :: ")
            cases.append({"kind": "adprint", "how": how.strip(), "ad": ad.strip()})
        elif directive == "adop":
            op, ad, arg = (part.strip() for part in rest.split(" :: "))
            key = "other" if op in ("matches", "symmetricMatch") else "expr"
            cases.append({"kind": "adop", "op": op, "ad": ad, key: arg})
        elif directive in ("quote", "unquote"):
            cases.append({"kind": "quote", "op": directive, "text": json.loads(rest)})
        elif directive == "json":
            case = json.loads(rest)
            for key in ("ad", "other", "scope", "target", "text", "expr"):
                if isinstance(case.get(key), str):
                    case[key] = expand(case[key])
            cases.append(case)
        else:
            raise SystemExit(f"{where}: unknown directive {directive!r}")
        if cases:
            cases[-1].setdefault("where", where)
    return cases


def version_cases(path: Path) -> list[Case]:
    """Expand the version-comparison tables the way the HTCondor test does."""
    equal: list[tuple[str, str, bool]] = []
    lt: list[tuple[str, str, str, bool]] = []
    lt_nc: list[tuple[str, str, str, bool]] = []
    ranges: list[tuple[str, str, str, bool]] = []
    sequence: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        tag, _, rest = line.partition(":")
        parts = [p.strip() for p in rest.split("|")]
        if tag == "equal":
            equal.append((parts[0], parts[1], parts[2] == "true"))
        elif tag == "lt":
            lt.append(("versionLT", parts[0], parts[1], parts[2] == "true"))
        elif tag == "lt_nc":
            lt_nc.append(("versionLT", parts[0], parts[1], parts[2] == "true"))
        elif tag == "range":
            ranges.append((parts[0], parts[1], parts[2], parts[3] == "true"))
        elif tag == "sequence":
            sequence = rest.split()

    def swap(rows: list[tuple[str, str, str, bool]]) -> list[tuple[str, str, str, bool]]:
        return [(op, right, left, not exp) for (op, left, right, exp) in rows]

    gt = [("versionGT", right, left, exp) for (_, left, right, exp) in lt]
    gt_nc = [("versionGT", right, left, exp) for (_, left, right, exp) in lt_nc]
    le = [("versionLE", left, right, exp) for (_, left, right, exp) in lt]
    le_nc = [("versionLE", left, right, not exp) for (_, left, right, exp) in lt_nc]
    ge = [("versionGE", left, right, exp) for (_, left, right, exp) in gt]
    ge_nc = [("versionGE", left, right, not exp) for (_, left, right, exp) in gt_nc]
    inequalities = [
        *lt,
        *swap(lt),
        *lt_nc,
        *gt,
        *swap(gt),
        *gt_nc,
        *le,
        *swap(le),
        *le_nc,
        *ge,
        *swap(ge),
        *ge_nc,
    ]

    cases: list[Case] = []

    def add(expr: str, want: str) -> None:
        cases.append({"kind": "eval", "expr": expr, "want": want})

    def bool_tag(value: bool) -> str:
        return "B:true" if value else "B:false"

    for left, right, exp in equal:
        add(f'versionEQ( "{left}", "{right}" )', bool_tag(exp))
        add(f'versionEQ( "{right}", "{left}" )', bool_tag(exp))
    for op, left, right, exp in inequalities:
        add(f'{op}( "{left}", "{right}" )', bool_tag(exp))
    for low, version, high, exp in ranges:
        add(f'version_in_range("{version}", "{low}", "{high}")', bool_tag(exp))
    for left, right, exp in equal:
        add(f'versioncmp( "{left}", "{right}" ) == 0', bool_tag(exp))
    signs = (
        [(left, right, -1) for (_, left, right, _e) in lt]
        + [(left, right, 1) for (_, left, right, _e) in swap(lt)]
        + [(left, right, 0) for (_, left, right, _e) in lt_nc]
        + [(left, right, 1) for (_, left, right, _e) in gt]
        + [(left, right, -1) for (_, left, right, _e) in swap(gt)]
        + [(left, right, 0) for (_, left, right, _e) in gt_nc]
        + [(left, right, -1) for (_, left, right, _e) in le]
        + [(left, right, 1) for (_, left, right, _e) in swap(le)]
        + [(left, right, 0) for (_, left, right, _e) in le_nc]
        + [(left, right, 1) for (_, left, right, _e) in ge]
        + [(left, right, -1) for (_, left, right, _e) in swap(ge)]
        + [(left, right, 0) for (_, left, right, _e) in ge_nc]
    )
    for left, right, sign in signs:
        expr = f'versioncmp( "{left}", "{right}" )'
        if sign < 0:
            add(f"{expr} < 0", "B:true")
        elif sign > 0:
            add(f"{expr} > 0", "B:true")
        else:
            add(f"{expr} == 0", "B:true")
    for i, left in enumerate(sequence[:-1]):
        for right in sequence[i + 1 :]:
            add(f'versionLT("{left}","{right}")', "B:true")
    for case in cases:
        case["where"] = path.name
    return cases


# ---------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------

VALUES = [
    "undefined",
    "error",
    "true",
    "false",
    "0",
    "1",
    "-7",
    "2.5",
    "0.0",
    "-0.0",
    '"abc"',
    '"ABC"',
    '""',
    "{1,2}",
    "[a=1]",
    "absTime(0)",
    "relTime(5)",
]

BINARY_OPS = [
    "+",
    "-",
    "*",
    "/",
    "%",
    "<",
    "<=",
    ">",
    ">=",
    "==",
    "!=",
    "=?=",
    "=!=",
    "is",
    "isnt",
    "&&",
    "||",
    "&",
    "|",
    "^",
    "<<",
    ">>",
    ">>>",
]

UNARY_OPS = ["-", "+", "!", "~"]


def operator_cases() -> Iterator[Case]:
    for op in BINARY_OPS:
        for left in VALUES:
            for right in VALUES:
                yield {"kind": "eval", "expr": f"{left} {op} {right}"}
    for op in UNARY_OPS:
        for value in VALUES:
            yield {"kind": "eval", "expr": f"{op}{value}"}
            yield {"kind": "eval", "expr": f"{op}({value})"}


# function name -> a typical ("good") argument list
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "isUndefined": ("1",),
    "isError": ("1",),
    "isString": ("1",),
    "isInteger": ("1",),
    "isReal": ("1",),
    "isList": ("1",),
    "isClassAd": ("1",),
    "isBoolean": ("1",),
    "isAbstime": ("1",),
    "isReltime": ("1",),
    "member": ("2", "{1,2,3}"),
    "identicalMember": ("2", "{1,2,3}"),
    "anyCompare": ('"<"', "{1,2,3}", "2"),
    "allCompare": ('"<"', "{1,2,3}", "2"),
    "sum": ("{1,2,3}",),
    "avg": ("{1,2,3}",),
    "min": ("{1,2,3}",),
    "max": ("{1,2,3}",),
    "size": ('"abc"',),
    "getYear": ("absTime(1384242623)",),
    "getMonth": ("absTime(1384242623)",),
    "getDayOfYear": ("absTime(1384242623)",),
    "getDayOfMonth": ("absTime(1384242623)",),
    "getDayOfWeek": ("absTime(1384242623)",),
    "getHours": ("absTime(1384242623)",),
    "getMinutes": ("absTime(1384242623)",),
    "getSeconds": ("absTime(1384242623)",),
    "getDays": ("relTime(90061)",),
    "getUSeconds": ("absTime(1384242623)",),
    "floor": ("2.5",),
    "ceiling": ("2.5",),
    "ceil": ("2.5",),
    "round": ("2.5",),
    "pow": ("2", "10"),
    "quantize": ("7", "3"),
    "interval": ("90061",),
    "strcat": ('"a"', '"b"'),
    "join": ('","', '"a"', '"b"'),
    "substr": ('"hello"', "1", "3"),
    "strcmp": ('"a"', '"B"'),
    "stricmp": ('"a"', '"B"'),
    "toUpper": ('"aBc"',),
    "toLower": ('"aBc"',),
    "string": ('"12"',),
    "int": ('"12"',),
    "real": ('"12"',),
    "bool": ('"true"',),
    "absTime": ('"2013-11-12T07:50:23+0000"',),
    "relTime": ('"1+01:01:01"',),
    "splitTime": ("absTime(1384242623)",),
    "formatTime": ("1384242623", '"%Y-%m-%d %H:%M:%S"'),
    "timeZoneOffset": (),
    "versioncmp": ('"7.1"', '"7.10"'),
    "versionLT": ('"7.1"', '"7.10"'),
    "versionLE": ('"7.1"', '"7.10"'),
    "versionGT": ('"7.1"', '"7.10"'),
    "versionGE": ('"7.1"', '"7.10"'),
    "versionEQ": ('"7.1"', '"7.10"'),
    "version_in_range": ('"8.1"', '"8.0"', '"8.2"'),
    "regexp": ('"a+"', '"caat"'),
    "regexpMember": ('"b"', '{"a","b"}'),
    "regexps": ('"(a+)"', '"caat"', '"<\\\\1>"'),
    "replace": ('"a"', '"banana"', '"o"'),
    "replaceAll": ('"a"', '"banana"', '"o"'),
    "split": ('"a b,c"',),
    "splitUserName": ('"u@d"',),
    "splitSlotName": ('"s1@m"',),
    "stringListSize": ('"1,2,3"',),
    "stringListSum": ('"1,2,3"',),
    "stringListAvg": ('"1,2,3"',),
    "stringListMin": ('"1,2,3"',),
    "stringListMax": ('"1,2,3"',),
    "stringListMember": ('"b"', '"a,b"'),
    "stringListIMember": ('"B"', '"a,b"'),
    "stringListsIntersect": ('"a,b"', '"b,c"'),
    "stringListSubsetMatch": ('"a,b"', '"b,a,c"'),
    "stringListISubsetMatch": ('"A,b"', '"b,a,c"'),
    "stringList_regexpMember": ('"^b"', '"a,bc"'),
    "unparse": ("x",),
    "unresolved": ("x",),
    "ifThenElse": ("true", "1", "2"),
    "eval": ('"1+1"',),
    "debug": ("1",),
    "envV1ToV2": ('"A=1;B=2"',),
    "mergeEnvironment": ('"A=1"', '"B=2 A=3"'),
    "listToArgs": ('{"a","b c"}',),
    "argsToList": ('"a \\"b c\\""',),
    "evalInEachContext": ("x", "{[x=1],[x=2]}"),
    "countMatches": ("x > 1", "{[x=1],[x=2]}"),
    "random": ('"x"',),
    "noSuchFunction": ("1",),
}

EDGES = [
    "undefined",
    "error",
    '"abc"',
    '""',
    "1",
    "0",
    "-1",
    "2.5",
    "true",
    "{1,2}",
    "[a=1]",
    "absTime(0)",
    "relTime(5)",
]


def function_cases() -> Iterator[Case]:
    for name, good in FUNCTIONS.items():
        calls: list[tuple[str, ...]] = [(), good, (*good, "1")]
        for i in range(max(len(good), 1)):
            for edge in EDGES:
                args = list(good) if good else [edge]
                args[i] = edge
                calls.append(tuple(args))
        for args in calls:
            yield {"kind": "eval", "expr": f"{name}({', '.join(args)})"}


def scope_cases() -> Iterator[Case]:
    """MY./TARGET. lookup order (the facts of HTCondor's test_classad_eval.py)."""
    my = "[ x = 7; z = 10; ]"
    target = "[ x = 8; y = 9; ]"
    for expr in ("x", "MY.x", "TARGET.x", "y", "z", "MY.y", "TARGET.z", "w", "x + y + z"):
        yield {"kind": "eval", "expr": expr, "scope": my}
        yield {"kind": "eval", "expr": expr, "scope": "[ ]", "target": target}
        yield {"kind": "eval", "expr": expr, "scope": my, "target": target}


# ---------------------------------------------------------------------------
# Oracle runs
# ---------------------------------------------------------------------------

NOW = time.time()

# Exceptions that are part of classad2's contract; anything else the oracle
# raises (SystemError, UnicodeDecodeError, ...) is a crash of its binding.
CONTRACT_EXCEPTIONS = ("ClassAdException", "ValueError", "KeyError", "TypeError")


def _looks_like_now(canon: Any) -> bool:
    """Does a canonical result carry the current time (so it is not reproducible)?"""
    year = time.gmtime(NOW).tm_year
    text = json.dumps(canon)
    if any(str(y) in text for y in (year - 1, year, year + 1)):
        return True
    for number in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", text):
        try:
            value = float(number)
        except ValueError:
            continue
        if abs(value - NOW) < 10 * 86400:
            return True
    return False


def _want_matches(want: str, canon: Any) -> bool:
    if want == "U":
        return bool(canon == ["value", "Undefined"])
    if want == "E":
        return bool(canon == ["value", "Error"])
    if want == "RAISES":
        return bool(canon[0] == "raises")
    tag, _, payload = want.partition(":")
    if tag == "B":
        return bool(canon == ["bool", payload == "true"])
    if tag == "I":
        return bool(canon == ["int", int(payload)])
    if tag == "R":
        if canon[0] != "real":
            return False
        got, exp = float(canon[1]), float(payload)
        return (math.isnan(got) and math.isnan(exp)) or got == exp
    if tag == "S":
        return bool(canon == ["str", payload])
    if tag == "X":
        return bool(canon == _support.run_case(ORACLE, {"kind": "eval", "expr": payload}))
    raise SystemExit(f"unknown want {want!r}")


def finish(
    source: str, cases: Iterable[Case], seen: set[tuple[Any, ...]], report: list[str]
) -> list[Case]:
    kept: list[Case] = []
    for case in cases:
        key = _support.case_inputs(case)
        if key in seen:
            continue
        seen.add(key)
        results = [_support.run_case(ORACLE, case) for _ in range(3)]
        label = _support.case_label(source, case, limit=200)
        if any(r != results[0] for r in results):
            report.append(f"DROPPED (oracle not deterministic) {label}")
            continue
        canon = results[0]
        if canon[0] == "raises" and canon[1] not in CONTRACT_EXCEPTIONS:
            report.append(f"DROPPED (oracle binding crashed: {canon[1]}) {label}")
            continue
        if _looks_like_now(canon) and "want" not in case:
            report.append(f"DROPPED (depends on the current time) {label}")
            continue
        want = case.get("want")
        if want is not None and not _want_matches(want, canon):
            where = case.get("where", source)
            report.append(
                f"SOURCE DISAGREES {where}: {label}\n"
                f"    source says {want}; classad2 says {_support.describe(canon)}"
            )
        case["oracle"] = canon
        kept.append(case)
    return kept


def write_cases(source: str, origin: str, cases: list[Case]) -> None:
    path = _support.CASES_DIR / f"{source}.json"
    lines = [
        "{",
        f'  "source": {json.dumps(origin)},',
        f'  "count": {len(cases)},',
        '  "cases": [',
    ]
    ordered = [
        {
            key: case[key]
            for key in (*_support.INPUT_FIELDS, "id", "want", "where", "oracle")
            if key in case
        }
        for case in cases
    ]
    body = [json.dumps(case, ensure_ascii=False) for case in ordered]
    lines.extend("    " + text + ("," if i < len(body) - 1 else "") for i, text in enumerate(body))
    lines.extend(["  ]", "}", ""])
    path.write_text("\n".join(lines), encoding="utf-8")


PORTED = [
    ("pelican_cpp_parity", "PelicanPlatform/classad:classad/cpp_parity_test.go"),
    ("htcondor_classad_funcs", "htcondor/htcondor:src/condor_utils/test_classad_funcs.cpp"),
    ("htcondor_functional_tests", "htcondor/htcondor:src/classad/functional_tests.txt"),
    ("htcondor_classad_tests", "htcondor/htcondor:src/classad/tests.txt"),
    (
        "htcondor_docs",
        "htcondor/htcondor:docs/classads/classad-mechanism.rst + classad-builtin-functions.rst",
    ),
]

HANDWRITTEN = [
    ("probes_syntax", "hand-written: precedence, associativity, lexing, literals"),
    ("probes_scoping", "hand-written: attribute references, scopes, MY./TARGET., projection"),
    ("probes_time", "hand-written: absTime/relTime/splitTime/formatTime with fixed times"),
    ("probes_printing", "hand-written: unparse, printOld/printJson, parseAds/One/Next"),
    ("probes_functions", "hand-written: function edge cases beyond the generated grid"),
]


def main() -> None:
    _support.CASES_DIR.mkdir(exist_ok=True)
    for old in _support.CASES_DIR.glob("*.json"):
        old.unlink()
    seen: set[tuple[Any, ...]] = set()
    report: list[str] = []
    counts: list[tuple[str, int, int]] = []

    def emit(source: str, origin: str, cases: list[Case]) -> None:
        raw = len(cases)
        kept = finish(source, cases, seen, report)
        write_cases(source, origin, kept)
        counts.append((source, raw, len(kept)))

    ported_exprs: list[str] = []
    for source, origin in PORTED:
        cases = read_source(SOURCES / f"{source}.txt")
        ported_exprs.extend(c["expr"] for c in cases if c["kind"] == "eval" and "scope" not in c)
        emit(source, origin, cases)
    emit(
        "htcondor_version_comparison",
        "htcondor/htcondor:src/condor_tests/test_classad_version_comparison.py",
        version_cases(SOURCES / "htcondor_version_comparison.txt"),
    )
    emit(
        "htcondor_classad_eval",
        "htcondor/htcondor:src/condor_tests/test_classad_eval.py (MY/TARGET lookup order)",
        list(scope_cases()),
    )
    for source, origin in HANDWRITTEN:
        emit(source, origin, read_source(SOURCES / f"{source}.txt"))
    emit(
        "generated_unparse_ported",
        "generated: unparse/round trip of every scope-free expression of the ported sources",
        [{"kind": "unparse", "expr": expr} for expr in ported_exprs],
    )
    emit(
        "generated_operators",
        "generated: every binary operator over every pair of value kinds; unary operators",
        list(operator_cases()),
    )
    emit(
        "generated_functions",
        "generated: every built-in function with edge arguments and wrong arities",
        list(function_cases()),
    )

    total = sum(kept for _, _, kept in counts)
    summary = [
        f"{source:32} {kept:6} cases ({raw} written, duplicates/drops removed)"
        for source, raw, kept in counts
    ]
    summary.append(f"{'TOTAL':32} {total:6}")
    text = "\n".join(
        [
            "Conformance case build report (written by build_cases.py; do not edit)",
            f"classad2 version: {ORACLE.version()}",
            "",
            *summary,
            "",
            *report,
            "",
        ]
    )
    REPORT.write_text(text, encoding="utf-8")
    print("\n".join(summary))
    print(f"{len(report)} report lines in {REPORT}")


if __name__ == "__main__":
    main()
