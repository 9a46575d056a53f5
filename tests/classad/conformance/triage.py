"""Run every conformance case outside pytest and print the failures, grouped.

    python tests/classad/conformance/triage.py            # groups with counts and examples
    python tests/classad/conformance/triage.py -v         # every failing case
    python tests/classad/conformance/triage.py GROUP...   # only groups whose name contains GROUP

A group is the case kind plus the function or operator the case is about
(the first `name(` in the expression, or the operator of a generated
operator case).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _support

_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def group_of(source: str, case: dict[str, Any]) -> str:
    kind = case["kind"]
    if kind == "adprint":
        return f"adprint:{case['how']}"
    if kind in ("adop", "quote"):
        return f"{kind}:{case['op']}"
    if kind == "parse":
        return f"parse:{case['fn']}/{case.get('parser', 'default')}"
    expr = case.get("expr") or ""
    if source == "generated_operators":
        parts = expr.split(" ")
        return f"{kind}:operator {parts[1]}" if len(parts) >= 3 else f"{kind}:unary {expr[:1]}"
    match = _CALL.search(expr)
    if match:
        return f"{kind}:{match.group(1).lower()}()"
    return f"{kind}:{source}"


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    wanted = [a for a in argv if not a.startswith("-")]
    oracle = _support.load_oracle()
    ours = _support.load_ours()
    groups: dict[str, list[tuple[str, dict[str, Any], Any, Any]]] = defaultdict(list)
    total = 0
    for source, case in _support.load_case_files():
        total += 1
        expected = _support.run_case(oracle, case)
        actual = _support.run_case(ours, case, hint=expected)
        if actual != expected:
            groups[group_of(source, case)].append((source, case, expected, actual))
    failed = sum(len(v) for v in groups.values())
    print(f"{failed} of {total} cases differ, in {len(groups)} groups\n")
    for name, items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if wanted and not any(w in name for w in wanted):
            continue
        print(f"== {name}: {len(items)}")
        for source, case, expected, actual in items if verbose else items[:3]:
            print(f"   {_support.case_label(source, case, 150)}")
            print(f"      classad2: {_support.describe(expected)[:300]}")
            print(f"      htgrid:   {_support.describe(actual)[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
