"""A small evaluator of IAM policy documents, for what moto does not check: resources,
conditions and policy variables (moto checks a call's action only, see
../shared/reference/moto-for-annex.md). It follows IAM's rules for what the annex's
policies use: an explicit Deny wins; else an Allow is needed in the principal's policies
and, when it has one, in its permissions boundary; a statement whose resource or
condition names a policy variable or condition key the request lacks does not match.
An operator it does not know is an error, so that no policy it cannot judge passes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Context = Mapping[str, str]
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
        if match.group(1) not in context:
            missing = True
            return ""
        return context[match.group(1)]

    out = _VARIABLE.sub(value, text)
    return None if missing else out


def _listed(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _matches(statement: Mapping[str, Any], action: str, resource: str, context: Context) -> bool:
    if not any(_glob(a, action, fold=True) for a in _listed(statement["Action"])):
        return False
    patterns = [_substitute(r, context) for r in _listed(statement["Resource"])]
    if not any(p is not None and _glob(p, resource) for p in patterns):
        return False
    for operator, tests in statement.get("Condition", {}).items():
        check = _OPERATORS.get(operator)
        if check is None:
            raise ValueError(f"the evaluator does not know the condition operator {operator}")
        for key, wanted in tests.items():
            if key not in context:
                return False
            values = [_substitute(w, context) for w in _listed(wanted)]
            if not any(v is not None and check(context[key], v) for v in values):
                return False
    return True


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
