"""Small facts about ClassAd expressions that job-ad building needs."""

from __future__ import annotations

import re

from htgrid.submit import _classad

__all__ = ["references", "top_precedence", "wrap_for"]

# Binary operator precedence, higher binds tighter (as in the ClassAd grammar).
_PRECEDENCE = {
    "?": 1,
    "||": 2,
    "&&": 3,
    "|": 4,
    "^": 5,
    "&": 6,
    "==": 7,
    "!=": 7,
    "=?=": 7,
    "=!=": 7,
    "is": 7,
    "isnt": 7,
    "<": 8,
    "<=": 8,
    ">": 8,
    ">=": 8,
    "<<": 9,
    ">>": 9,
    ">>>": 9,
    "+": 10,
    "-": 10,
    "*": 11,
    "/": 11,
    "%": 11,
}
_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[A-Za-z_][A-Za-z0-9_.]*|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?'
    r"|=\?=|=!=|>>>|<<|>>|<=|>=|==|!=|\|\||&&|[-+*/%<>|^&?:!~()\[\]{},;.]|\s+"
)


def top_precedence(text: str) -> int:
    """Precedence of the loosest top-level binary operator of `text` (99: none)."""
    depth = 0
    lowest = 99
    previous_operand = False
    for match in _TOKEN.finditer(text):
        tok = match.group()
        if tok.isspace():
            continue
        if tok in "([{":
            depth += 1
            previous_operand = False
            continue
        if tok in ")]}":
            depth -= 1
            previous_operand = True
            continue
        op = tok.lower() if tok.lower() in ("is", "isnt") else tok
        if op in _PRECEDENCE and previous_operand:
            if depth == 0:
                lowest = min(lowest, _PRECEDENCE[op])
            previous_operand = False
            continue
        if tok == ":":
            previous_operand = False
            continue
        previous_operand = tok not in ("!", "~", "-", "+")
    return lowest


def wrap_for(text: str, op: str) -> str:
    """`text` ready to be joined with `op`: parenthesised (and normalized) if needed."""
    normal = _classad.normalize(text)
    if top_precedence(normal) < _PRECEDENCE[op]:
        return f"({normal})"
    return text


def references(text: str) -> bool:
    """Whether the expression refers to any attribute."""
    return bool(_classad.external_refs(text, {}))
