"""Functions about expressions rather than values: unparse, unresolved, eval, debug."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from htgrid.classad._ast import (
    AttrRef,
    Node,
    children,
)
from htgrid.classad._functions._convert import to_str
from htgrid.classad._functions._pcre import compile_pcre
from htgrid.classad._functions._registry import builtin
from htgrid.classad._parser import parse_expr
from htgrid.classad._state import eval_in
from htgrid.classad._unparse import unparse, unparse_pretty
from htgrid.classad._values import ERROR, UNDEFINED

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd
    from htgrid.classad._state import EvalState
    from htgrid.classad._values import Val

__all__: list[str] = []

_log = logging.getLogger("htgrid.classad")


def _plain_name(node: Node) -> str | None:
    """The name of an unscoped attribute reference, else None."""
    if type(node) is AttrRef and node.base is None and not node.absolute:
        return node.name
    return None


@builtin("unparse", lazy=True, pure=False)
def _unparse(state: EvalState, *nodes: Node) -> Val:
    """`unparse(attr)`: the attribute's expression as text, unevaluated ("" if missing)."""
    if len(nodes) != 1 or type(nodes[0]) is not AttrRef:
        return ERROR
    name = _plain_name(nodes[0])
    ad = state.ad
    # libclassad looks the reference's text up in the current ad only, so a scoped
    # reference such as MY.x never names an attribute.
    if name is None or ad is None:
        return ""
    entry = ad._lookup_entry(name)
    if entry is None:
        return ""
    return unparse_pretty(entry.node)


def _find(ad: ClassAd | None, name: str) -> Node | None:
    """The expression `name` names, searched from `ad` outwards."""
    while ad is not None:
        entry = ad._lookup_entry(name)
        if entry is not None:
            return entry.node
        ad = ad._parent
    return None


def external_refs(node: Node, ad: ClassAd | None) -> list[str]:
    """The references of `node` that `ad` cannot resolve, in libclassad's order.

    Attributes the ad defines are followed into their own expressions; `TARGET.x`
    is reported as `target.x` (the caller strips the prefix) and other scoped
    references by their full text. The set is sorted and deduplicated ignoring case.
    """
    found: dict[str, str] = {}
    seen: set[int] = set()

    def add(text: str) -> None:
        found.setdefault(text.lower(), text)

    # A stack, not recursion: attributes lead into each other and chains may be long.
    todo = [node]
    while todo:
        n = todo.pop()
        if type(n) is not AttrRef:
            todo.extend(reversed(children(n)))
            continue
        if n.absolute:
            continue
        base = n.base
        if base is not None:
            bname = _plain_name(base)
            if bname is None:
                continue
            low = bname.lower()
            if low == "target":
                add("target." + n.name)
                continue
            if low not in ("my", "self"):
                add(f"{bname}.{n.name}")
                continue
        target = _find(ad, n.name)
        if target is None:
            add(n.name)
        elif id(target) not in seen:
            seen.add(id(target))
            todo.append(target)
    return [found[k] for k in sorted(found)]


@builtin("unresolved", lazy=True, pure=False)
def _unresolved(state: EvalState, *nodes: Node) -> Val:
    """`unresolved(attr [, regex])`: the attribute's unresolvable references, or a match test."""
    if not 1 <= len(nodes) <= 2 or type(nodes[0]) is not AttrRef:
        return ERROR
    name = _plain_name(nodes[0])
    expr = _find(state.ad, name) if name is not None else None
    if expr is None:
        return UNDEFINED
    rx = None
    if len(nodes) == 2:
        pat = eval_in(nodes[1], state)
        if type(pat) is not str:
            return ERROR
        rx = compile_pcre(pat, "i")
        if rx is None:
            return ERROR
    names = []
    for ref in external_refs(expr, state.ad):
        if ref[:7].lower() == "target.":
            ref = ref[7:]
        names.append(ref)
    if rx is None:
        return ",".join(names)
    for ref in names:
        try:
            m = rx.search(ref.encode("utf-8", "surrogateescape"), state)
        except TimeoutError:  # no match, as PCRE2's match limit gives in HTCondor
            continue
        if m is not None and m.end() > m.start():
            return True
    return False


@builtin("eval", pure=False)
def _eval(state: EvalState, *args: Val) -> Val:
    """`eval(s)`: parse string(s) and evaluate it in the current scope."""
    if len(args) != 1:
        return ERROR
    text = to_str(args[0])
    if type(text) is not str:
        return ERROR
    try:
        node = parse_expr(text)
    except Exception:
        return ERROR
    try:
        return eval_in(node, state)
    except RecursionError:
        return ERROR


@builtin("debug", lazy=True, pure=False)
def _debug(state: EvalState, *nodes: Node) -> Val:
    """`debug(x)`: x's value; the evaluation is logged at DEBUG level."""
    if len(nodes) != 1:
        return ERROR
    v = eval_in(nodes[0], state)
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("debug(%s) = %r", unparse(nodes[0]), v)
    return v
