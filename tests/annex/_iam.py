"""A small evaluator of IAM policy documents, for what moto does not check: resources,
conditions and policy variables (moto checks a call's action only, see
../shared/reference/moto-for-annex.md). It follows IAM's rules for what the annex's
policies use: an explicit Deny wins; else an Allow is needed in the principal's policies
and, when it has one, in its permissions boundary; a statement whose resource or
condition names a policy variable or condition key the request lacks does not match
(unless `...IfExists`, or `Null`, or `ForAllValues:`, which IAM passes then). A
context key's value is a string, or a list for a multivalued key (aws:TagKeys), which
only the set operators (`ForAllValues:`, `ForAnyValue:`) take. An operator it does not
know is an error, so that no policy it cannot judge passes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Context = Mapping[str, str | Sequence[str]]
_VARIABLE = re.compile(r"\$\{([^}]+)\}")
_OPERATORS = {
    "StringEquals": lambda have, want: have == want,
    "StringLike": lambda have, want: _glob(want, have),
    "ArnEquals": lambda have, want: have == want,
    "ArnLike": lambda have, want: _glob(want, have),
}


def _glob(pattern: str, text: str, *, fold: bool = False) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, re.IGNORECASE if fold else 0) is not None


def _substitute(text: str, context: Context) -> str | None:
    """`text` with its policy variables replaced (None: one is not in the request)."""
    missing = False

    def value(match: re.Match[str]) -> str:
        nonlocal missing
        got = context.get(match.group(1))
        if not isinstance(got, str):  # absent (or multivalued: no variable's value)
            missing = True
            return ""
        return got

    out = _VARIABLE.sub(value, text)
    return None if missing else out


def _listed(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _condition(operator: str, key: str, wanted: Any, context: Context) -> bool:
    """Whether one condition's key passes (IAM's rules for a key the request lacks)."""
    if operator == "Null":
        return (key not in context) == (str(wanted).lower() == "true")
    quantifier, _, name = operator.rpartition(":")
    if_exists = name.endswith("IfExists")
    check = _OPERATORS.get(name.removesuffix("IfExists"))
    if check is None or quantifier not in ("", "ForAllValues", "ForAnyValue"):
        raise ValueError(f"the evaluator does not know the condition operator {operator}")
    if key not in context:
        return if_exists or quantifier == "ForAllValues"
    values = [v for v in (_substitute(w, context) for w in _listed(wanted)) if v is not None]
    have = context[key]
    if quantifier:
        items = [have] if isinstance(have, str) else list(have)
        hits = [any(check(item, v) for v in values) for item in items]
        return all(hits) if quantifier == "ForAllValues" else any(hits)
    if not isinstance(have, str):
        raise ValueError(f"{key} is multivalued: {operator} needs ForAllValues/ForAnyValue")
    return any(check(have, v) for v in values)


def _matches(statement: Mapping[str, Any], action: str, resource: str, context: Context) -> bool:
    if not any(_glob(a, action, fold=True) for a in _listed(statement["Action"])):
        return False
    if "NotResource" in statement:
        patterns = [_substitute(r, context) for r in _listed(statement["NotResource"])]
        if any(p is None or _glob(p, resource) for p in patterns):
            return False
    else:
        patterns = [_substitute(r, context) for r in _listed(statement["Resource"])]
        if not any(p is not None and _glob(p, resource) for p in patterns):
            return False
    return all(
        _condition(operator, key, wanted, context)
        for operator, tests in statement.get("Condition", {}).items()
        for key, wanted in tests.items()
    )


def _effects(policies: Iterable[Mapping[str, Any]], action: str, resource: str,
             context: Context) -> set[str]:  # fmt: skip
    return {
        s["Effect"]
        for policy in policies
        for s in policy["Statement"]
        if _matches(s, action, resource, context)
    }


def allowed(policies: Sequence[Mapping[str, Any]], action: str, resource: str,
            context: Context | None = None,
            boundary: Mapping[str, Any] | None = None) -> bool:  # fmt: skip
    """Whether a principal with `policies` (and `boundary`) may do `action` on
    `resource` in a request with `context` (condition keys and variables)."""
    ctx = context or {}
    effects = _effects(policies, action, resource, ctx)
    if "Deny" in effects or "Allow" not in effects:
        return False
    if boundary is None:
        return True
    limits = _effects([boundary], action, resource, ctx)
    return "Allow" in limits and "Deny" not in limits
