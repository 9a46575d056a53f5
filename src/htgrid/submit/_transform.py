"""ClassAd transforms: the language of JOB_ROUTER_ROUTE_*, JOB_TRANSFORM_* and
condor_transform_ads (HTCondor's condor_utils/xform_utils.cpp).

    xform = Transform.parse("REQUIREMENTS Owner == \\"alice\\"\\nSET Foo $(MY.Bar:1) + 1", "t")
    if xform.matches(ad):
        xform.apply(ad, TransformMacros())

A transform is submit syntax: `name = value` lines define macros (temporary variables,
never attributes), `if`/`elif`/`else`/`endif` choose lines (a condition HTCondor's
config cannot decide is evaluated as a ClassAd expression in the ad), and the other
lines are statements, run in written order:

    SET attr expr          DEFAULT attr expr (only if attr is not in the ad)
    EVALSET attr expr      (evaluated in the ad now, the value stored)
    EVALMACRO name expr    (evaluated now, the value kept as macro `name`)
    COPY a b | COPY /re/ \\1x   RENAME a b | RENAME /re/ x   DELETE a | DELETE /re/
    NAME n   UNIVERSE u   REQUIREMENTS expr   TRANSFORM (the envelope; nothing to do)

The rest of each statement is macro-expanded first: `$(name)`, `$(name:default)`, the
submit language's `$F()`, `$INT()`... functions, and `$(MY.attr)`, the ad's attribute
(a string's value without quotes, any other expression as text), then the configuration
(`config`). A regex is case-insensitive; `\\1`... in the replacement name its groups.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from htgrid.submit._errors import SubmitError
from htgrid.submit._lines import logical_lines
from htgrid.submit._macros import Expander, MacroSet
from htgrid.submit._tables import universe_number

__all__ = ["Transform", "TransformMacros", "TransformStep"]

_KEYWORDS: Final = frozenset(
    {
        "COPY",
        "DEFAULT",
        "DELETE",
        "EVALMACRO",
        "EVALSET",
        "NAME",
        "RENAME",
        "REQUIREMENTS",
        "SET",
        "TRANSFORM",
        "UNIVERSE",
    }
)
_TWO_ARGS: Final = frozenset({"COPY", "DEFAULT", "EVALMACRO", "EVALSET", "RENAME", "SET"})
_REGEX_OK: Final = frozenset({"COPY", "DELETE", "RENAME"})
_ENVELOPE: Final = frozenset({"NAME", "UNIVERSE", "REQUIREMENTS", "TRANSFORM"})
_MACRO_LINE: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*=(.*)\Z", re.S)
_CONDITIONAL: Final = re.compile(r"(if|elif|else|endif)(?:\s+(.*))?\Z", re.I | re.S)
_IDENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_./]*\Z")
_NUMBER: Final = re.compile(r"-?\d+(\.\d*)?([eE][+-]?\d+)?\Z")


@dataclass(frozen=True, slots=True)
class TransformStep:
    """One line of a transform: a statement, a macro definition or a conditional.

    `kind` is the statement's keyword (upper case), "MACRO", or "IF", "ELIF", "ELSE",
    "ENDIF"; `attr` the attribute (or macro) name; `regex` the compiled regular
    expression when the first argument is `/.../`; `text` the rest, unexpanded.
    """

    kind: str
    attr: str
    text: str
    line: int
    regex: re.Pattern[str] | None = None

    def render(self) -> str:
        """The step as a transform line."""
        if self.kind == "MACRO":
            return f"{self.attr} = {self.text}"
        if self.kind in ("IF", "ELIF"):
            return f"{self.kind.lower()} {self.text}"
        if self.kind in ("ELSE", "ENDIF"):
            return self.kind.lower()
        first = f"/{self.regex.pattern}/" if self.regex is not None else self.attr
        return " ".join(p for p in (self.kind, first, self.text) if p)


@dataclass
class TransformMacros:
    """The temporary variables shared by the transforms applied to one ad in turn (the
    router's pre-route transforms, the route, then the post-route ones), over the
    configuration's values (`config`, the last place a `$(name)` is looked up)."""

    config: Mapping[str, str] = field(default_factory=dict)
    macros: MacroSet = field(default_factory=MacroSet)
    # The configuration by upper-case name, made once for the transforms applied in
    # turn (the router applies three or more to each job it routes).
    _upper: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._upper = {k.upper(): v for k, v in self.config.items()}

    def expander(self, ad: Any) -> _AdExpander:
        return _AdExpander(self.macros, ad=ad, config=self._upper)


class _AdExpander(Expander):
    """Expansion with `$(MY.attr)` read from the ad, then the configuration."""

    __slots__ = ("ad", "config")

    def __init__(self, macros: MacroSet, *, ad: Any, config: Mapping[str, str]) -> None:
        """`config`: the configuration's values by upper-case name."""
        super().__init__(macros)
        self.ad = ad
        self.config = config

    def lookup(self, name: str) -> str | None:
        value = super().lookup(name)
        if value is not None:
            return value
        if self.ad is not None and name[:3].upper() == "MY.":
            attr = name[3:]
            if attr in self.ad:
                tree = self.ad.lookup(attr)
                literal = _string_literal(tree)
                return literal if literal is not None else str(tree)
        return self.config.get(name.upper())


def _string_literal(tree: Any) -> str | None:
    text = str(tree)
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        value = tree.eval()
        if isinstance(value, str):
            return value
    return None


@dataclass(frozen=True, slots=True)
class Transform:
    """A parsed transform: its steps, and its envelope (name, requirements, universe)."""

    name: str
    steps: tuple[TransformStep, ...]
    requirements: str | None = None
    universe: int = 0  # 0: none given
    text: str = ""

    @classmethod
    def parse(cls, text: str, name: str = "") -> Transform:
        """Parse `text`; a SubmitError names the transform and line of a bad one."""
        steps: list[TransformStep] = []
        requirements: str | None = None
        universe = 0
        depth = 0
        for raw in logical_lines(text):
            line = raw.text
            if not line or line.startswith("#"):
                continue
            step = _parse_line(line, raw.line, name)
            if step.kind == "IF":
                depth += 1
            elif step.kind == "ENDIF":
                if depth == 0:
                    raise SubmitError("endif without matching if", path=name, line=raw.line)
                depth -= 1
            elif step.kind in ("ELIF", "ELSE") and depth == 0:
                raise SubmitError(
                    f"{step.kind.lower()} without matching if", path=name, line=raw.line
                )
            if step.kind == "NAME" and step.attr and not name:
                name = step.attr
            elif step.kind == "REQUIREMENTS":
                requirements = _rest_of(line) or None
                _check_expr(requirements, "REQUIREMENTS", name, raw.line)
            elif step.kind == "UNIVERSE":
                universe = universe_number(step.attr)
                if not universe:
                    raise SubmitError(
                        f"UNIVERSE {step.attr}: no such universe", path=name, line=raw.line
                    )
            steps.append(step)
        if depth:
            raise SubmitError("if without matching endif", path=name)
        return cls(name, tuple(steps), requirements, universe, text)

    def top_macros(self) -> dict[str, str]:
        """The macros defined outside any `if` (a route's MaxJobs, GridResource...),
        raw, by name as written."""
        out: dict[str, str] = {}
        depth = 0
        for step in self.steps:
            if step.kind == "IF":
                depth += 1
            elif step.kind == "ENDIF":
                depth -= 1
            elif step.kind == "MACRO" and depth == 0:
                out[step.attr] = step.text
        return out

    def matches(self, ad: Any) -> bool:
        """Whether the ad passes REQUIREMENTS (none: every ad), as HTCondor decides:
        a value that is not a boolean (or a number) does not match."""
        if self.requirements is None:
            return True
        return _truth(_evaluate(self.requirements, ad)) is True

    def apply(
        self,
        ad: Any,
        macros: TransformMacros | None = None,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        """Run the statements on `ad` (changed in place). `macros` carries temporary
        variables to the next transform; `log` is told each step taken. A statement that
        cannot be done (an expression that does not parse, an `if` that is not a
        condition) raises SubmitError naming the transform and line: the ad may then be
        half changed, so transform a copy."""
        macros = macros if macros is not None else TransformMacros()
        expander = macros.expander(ad)
        for step in self._active_steps(expander, ad):
            try:
                _run(step, ad, expander, log)
            except SubmitError as err:
                raise err.at(self.name, step.line) from None

    def _active_steps(self, expander: _AdExpander, ad: Any) -> Iterator[TransformStep]:
        frames: list[list[bool]] = []  # [reading, taken, outer] per open if
        reading = True
        for step in self.steps:
            kind = step.kind
            if kind == "IF":
                value = self._test(step, expander, ad) if reading else False
                frames.append([reading, value])
                reading = reading and value
            elif kind == "ELIF":
                outer, taken = frames[-1]
                value = outer and not taken and self._test(step, expander, ad)
                frames[-1][1] = taken or value
                reading = value
            elif kind == "ELSE":
                outer, taken = frames[-1]
                reading = outer and not taken
                frames[-1][1] = True
            elif kind == "ENDIF":
                reading = frames.pop()[0]
            elif reading:
                if kind == "MACRO":
                    expander.macros.set(step.attr, step.text)
                else:
                    yield step

    def _test(self, step: TransformStep, expander: _AdExpander, ad: Any) -> bool:
        try:
            return _condition(step.text, expander, ad)
        except SubmitError as err:
            raise err.at(self.name, step.line) from None


def _parse_line(line: str, number: int, name: str) -> TransformStep:
    cond = _CONDITIONAL.match(line)
    if cond is not None:
        kind = cond.group(1).upper()
        rest = (cond.group(2) or "").strip()
        if kind in ("IF", "ELIF") and not rest:
            raise SubmitError(f"{kind.lower()} without a condition", path=name, line=number)
        return TransformStep(kind, "", rest, number)
    macro = _MACRO_LINE.match(line)
    if macro is not None and macro.group(1).upper() not in _KEYWORDS:
        return TransformStep("MACRO", macro.group(1), macro.group(2).strip(), number)
    words = line.split(None, 1)
    keyword = words[0].upper()
    if keyword not in _KEYWORDS:
        raise SubmitError(f"{words[0]} is not a valid transform keyword", path=name, line=number)
    rest = words[1].strip() if len(words) > 1 else ""
    if not rest:
        if keyword == "TRANSFORM":
            return TransformStep(keyword, "", "", number)
        raise SubmitError(f"{keyword} needs an argument", path=name, line=number)
    regex = None
    if keyword in _REGEX_OK and rest.startswith("/"):
        regex, attr, rest = _regex_arg(rest, keyword, name, number)
    else:
        first = rest.split(None, 1)
        attr = first[0].rstrip(",=")
        rest = first[1].strip() if len(first) > 1 else ""
    if keyword in _TWO_ARGS:
        if rest[:1] in ("=", ","):
            rest = rest[1:].strip()
        if not rest:
            raise SubmitError(f"{keyword} needs 2 arguments", path=name, line=number)
    if keyword in ("SET", "DEFAULT") and "$" not in rest:
        _check_expr(rest, f"{keyword} {attr}", name, number)
    return TransformStep(keyword, attr, rest, number, regex)


def _regex_arg(rest: str, keyword: str, name: str, number: int) -> tuple[re.Pattern[str], str, str]:
    end = rest.find("/", 1)
    while end > 0 and rest[end - 1] == "\\":
        end = rest.find("/", end + 1)
    if end < 0:
        raise SubmitError(f"{keyword}: the regex {rest!r} has no closing /", path=name, line=number)
    pattern = rest[1:end]
    tail = rest[end + 1 :]
    flags = re.IGNORECASE
    opts = re.match(r"[A-Za-z]*", tail)
    assert opts is not None
    for letter in opts.group():
        flags |= {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}.get(
            letter.lower(), 0
        )
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        raise SubmitError(
            f"{keyword}: invalid regex /{pattern}/: {exc}", path=name, line=number
        ) from None
    return compiled, pattern, tail[opts.end() :].strip()


def _rest_of(line: str) -> str:
    words = line.split(None, 1)
    return words[1].strip() if len(words) > 1 else ""


def _check_expr(text: str | None, what: str, name: str, number: int) -> None:
    if text is not None and "$" not in text:
        _parsed(text, what, name, number)


def _parsed(text: str, what: str, name: str = "", number: int = 0) -> Any:
    from htgrid.classad import ExprTree

    try:
        return ExprTree(text)
    except Exception as exc:  # the library's syntax errors
        raise SubmitError(
            f"{what}: invalid expression {text!r}: {exc}", path=name or None, line=number
        ) from None


def _evaluate(text: str, ad: Any) -> Any:
    return _parsed(text, "expression").eval(ad)


def _truth(value: Any) -> bool | None:
    """A value as a condition: a boolean, or a number (non-zero is true); else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and type(value).__name__ != "Value":
        return value != 0
    return None


def _run(
    step: TransformStep, ad: Any, expander: _AdExpander, log: Callable[[str], None] | None
) -> None:
    kind = step.kind
    if kind in _ENVELOPE:
        return
    rest = expander.expand(step.text) if "$" in step.text else step.text
    if log is not None:
        log(f"{kind} {step.attr} {rest}".rstrip())
    if kind == "EVALMACRO":
        expander.macros.set(step.attr, _as_text(_evaluate(rest, ad)))
    elif kind == "DEFAULT":
        if step.attr not in ad:
            ad[step.attr] = _parsed(rest, f"DEFAULT {step.attr}")
    elif kind == "SET":
        ad[step.attr] = _parsed(rest, f"SET {step.attr}")
    elif kind == "EVALSET":
        value = _evaluate(rest, ad)
        ad[step.attr] = _parsed(_unparse(value), f"EVALSET {step.attr}")
    elif step.regex is not None:
        _regex_op(kind, ad, step.regex, rest)
    elif kind == "DELETE":
        if step.attr in ad:
            del ad[step.attr]
    elif kind in ("COPY", "RENAME"):
        _copy(kind, ad, step.attr, rest)


def _copy(kind: str, ad: Any, attr: str, new: str) -> None:
    if attr not in ad or not new:
        return
    tree = ad.lookup(attr)
    if kind == "RENAME":
        del ad[attr]
    ad[new] = tree


def _regex_op(kind: str, ad: Any, regex: re.Pattern[str], replacement: str) -> None:
    found: dict[str, str] = {}
    for attr in list(ad.keys()):
        match = regex.search(attr)
        if match is None:
            continue
        found[attr] = "" if kind == "DELETE" else _substitute(match, replacement)
    for attr in sorted(found, key=str.lower):
        if kind == "DELETE":
            del ad[attr]
        else:
            _copy(kind, ad, attr, found[attr])


def _substitute(match: re.Match[str], replacement: str) -> str:
    """`\\N` (a digit) replaced by group N of the match, as append_substituted_regex does."""
    groups = len(match.groups())

    def group(m: re.Match[str]) -> str:
        index = int(m.group(1))
        if index > groups:
            return m.group(0)
        return match.group(index) or ""

    return re.sub(r"\\(\d)", group, replacement)


def _unparse(value: Any) -> str:
    from htgrid.submit._classad import unparse_value

    return unparse_value(value)


def _as_text(value: Any) -> str:
    """A value as EVALMACRO keeps it: a string's characters, else its ClassAd text."""
    return value if isinstance(value, str) else _unparse(value)


def _condition(text: str, expander: _AdExpander, ad: Any) -> bool:
    """An `if`'s condition, as config's if does it, then in the ad when complex."""
    expanded = expander.expand(text).strip() if "$" in text else text.strip()
    inverted = False
    if expanded.startswith("!"):
        inverted = True
        expanded = expanded[1:].strip()
    if not expanded:
        return inverted  # a macro that expands to nothing is false
    return _simple(expanded, text, expander, ad) != inverted


def _simple(text: str, original: str, expander: _AdExpander, ad: Any) -> bool:
    low = text.lower()
    if _NUMBER.match(text):
        return float(text) != 0
    if low in ("true", "yes", "t"):
        return True
    if low in ("false", "no", "f"):
        return False
    words = text.split()
    if words[0].lower() == "defined":
        if len(words) != 2:
            raise SubmitError(f"{original} is not a valid if condition")
        return bool(expander.lookup(words[1]))
    if _IDENT.match(text):
        raise SubmitError(
            f"{original} is not a valid if condition because expression is not a conditional"
        )
    try:
        value = _truth(_evaluate(text, ad))
    except SubmitError:
        value = None
    if value is None:
        raise SubmitError(
            f"{original} is not a valid if condition because it is not a boolean in the ad"
        )
    return value
