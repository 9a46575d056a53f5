"""The macro table and `$(name)` expansion, with HTCondor's macro functions.

Expansion follows condor_utils/config.cpp: find the leftmost macro reference,
replace it with its (raw) value, and scan again from the same place, so values
that hold references are expanded in turn. `$$(...)` is never touched: it is
filled in at match time. `$(DOLLAR)` becomes `$` only at the very end.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from htgrid.submit import _classad
from htgrid.submit._errors import SubmitError
from htgrid.submit._funcs import filename_func, printf
from htgrid.submit._trace import IWD, RANDOM
from htgrid.submit._values import string_is_double, string_is_long

__all__ = [
    "Expander",
    "MacroSet",
    "expand_self",
]

# Expansion that goes on this long is a reference loop (a = $(b), b = $(a)).
_MAX_STEPS = 20_000

_NORMAL = "normal"
_FILENAME = "F"
_FUNCS = {
    "$ENV": "ENV",
    "$RANDOM_CHOICE": "RANDOM_CHOICE",
    "$RANDOM_INTEGER": "RANDOM_INTEGER",
    "$CHOICE": "CHOICE",
    "$SUBSTR": "SUBSTR",
    "$INT": "INT",
    "$REAL": "REAL",
    "$STRING": "STRING",
    "$EVAL": "EVAL",
    "$BASENAME": "BASENAME",
    "$DIRNAME": "DIRNAME",
}
_FILENAME_FLAGS = frozenset("pnxdqabfuw")


class MacroSet:
    """Submit variables: case-insensitive names, values kept raw (unexpanded)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: dict[str, tuple[str, str]] = {}
        for name, value in (items or {}).items():
            self.set(name, value)

    def set(self, name: str, value: str) -> None:
        """Define (or redefine) `name`; the first spelling of the name is kept."""
        key = name.lower()
        old = self._items.get(key)
        self._items[key] = (old[0] if old else name, value)

    def get(self, name: str) -> str | None:
        """The raw value of `name`, or None when it is not defined."""
        return self.get_key(name.lower())

    def get_key(self, key: str) -> str | None:
        """`get` of a name already in lower case."""
        item = self._items.get(key)
        return item[1] if item else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def copy(self) -> MacroSet:
        """A shallow copy (values are immutable strings)."""
        new = MacroSet()
        new._items = dict(self._items)
        return new

    def items(self) -> Iterator[tuple[str, str]]:
        """(name, raw value) pairs in HTCondor's order: case-insensitively sorted."""
        for key in sorted(self._items):
            yield self._items[key]

    def names(self) -> list[str]:
        """Defined names, sorted case-insensitively."""
        return [name for name, _ in self.items()]


# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Ref:
    """One macro reference found in a string: text[dollar:right] is `$func(body)`."""

    kind: str
    func: str
    dollar: int
    body: int
    colon: int  # index of the default text after ':' in the text, or -1
    right: int  # index just past ')'


def _idchar(ch: str) -> bool:
    return ch.isalnum() or ch in "_."


#: The common reference, `$(name)`: found without a walk through it character by character.
_PLAIN_REF = re.compile(r"\$\(([A-Za-z0-9_.]+)\)")


def _find(text: str, start: int, *, dollar_only: bool = False) -> _Ref | None:
    """The next macro reference at or after `start` (None when there is none)."""
    pos = start
    while True:
        dollar = text.find("$", pos)
        if dollar < 0:
            return None
        if not dollar_only:
            plain = _PLAIN_REF.match(text, dollar)
            if plain is not None and plain.group(1).lower() != "dollar":
                return _Ref(_NORMAL, "", dollar, dollar + 2, -1, plain.end())
        p = dollar + 1
        if p < len(text) and text[p] == "$":
            p += 1
        while p < len(text) and (text[p].isalnum() or text[p] == "_"):
            p += 1
        if p >= len(text) or text[p] != "(":
            pos = p if p > dollar else dollar + 1
            continue
        prefix = text[dollar:p]
        kind = _prefix_kind(prefix)
        if kind is None:
            pos = p
            continue
        body = p + 1
        q = body
        colon = -1
        ok = True
        if kind in (_NORMAL, "ENV"):
            while q < len(text) and text[q] != ")":
                ch = text[q]
                q += 1
                if ch == ":" and colon < 0:
                    colon = q
                    continue
                if colon >= 0:
                    if ch == "(":
                        close = text.find(")", q)
                        if close >= 0:
                            q = close + 1
                        continue
                    continue
                if not _idchar(ch):
                    ok = False
                    break
        else:
            while q < len(text) and text[q] != ")":
                q += 1
        if not ok or q >= len(text):
            pos = body
            continue
        is_dollar = kind == _NORMAL and text[body:q].lower() == "dollar"
        if is_dollar != dollar_only:
            pos = q
            continue
        return _Ref(kind, prefix[1:], dollar, body, colon, q + 1)


Template = tuple[tuple[tuple[str, str], ...], str]
#: Texts expanded before, as (text before, name) of each reference and the text after
#: them; None for a text holding more than `$(name)` references. Mostly a description's
#: own values, expanded again for each proc.
_TEMPLATES: dict[str, Template | None] = {}
_TEMPLATES_MAX = 4096
_UNSEEN: Final[Any] = object()


def _template(text: str) -> Template | None:
    pieces = []
    pos = 0
    while (dollar := text.find("$", pos)) >= 0:
        plain = _PLAIN_REF.match(text, dollar)
        if plain is None or plain.group(1).lower() == "dollar":
            return None
        pieces.append((text[pos:dollar], plain.group(1)))
        pos = plain.end()
    return tuple(pieces), text[pos:]


def _prefix_kind(prefix: str) -> str | None:
    if prefix == "$":
        return _NORMAL
    if prefix.startswith("$$"):
        return None
    if (
        len(prefix) >= 2
        and prefix[1] == "F"
        and all(c.lower() in _FILENAME_FLAGS for c in prefix[2:])
    ):
        return _FILENAME
    return _FUNCS.get(prefix)


def _nth_item(args: str, index: int, *, trim: bool = True) -> str | None:
    items = args.split(",")
    if index >= len(items):
        return None
    return items[index].strip() if trim else items[index]


@dataclass(slots=True)
class Expander:
    """Expands macro references against a macro table, defaults and live values.

    `live` holds the per-job values ($(Cluster), $(Process), loop variables...)
    that HTCondor keeps in its defaults table; `macros` wins over `defaults`.
    """

    macros: MacroSet
    defaults: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    #: The generator of $RANDOM_CHOICE and $RANDOM_INTEGER; None: a Random(0), made at
    #: the first draw (seeding one for every expander was 6% of a job router's pass).
    rng: random.Random | None = None
    #: While a build is watched (`_plan`): the names looked up, lower case, with
    #: "$random" for a draw and "%iwd" for a file name taken against `cwd`.
    trace: set[str] | None = None
    _defaults_lower: dict[str, str] = field(default_factory=dict, init=False)
    _memo: dict[tuple[str, str | None], str | None] | None = field(default=None, init=False)
    _proc_names: frozenset[str] = field(default=frozenset(), init=False)

    def __post_init__(self) -> None:
        self._defaults_lower = {k.lower(): v for k, v in self.defaults.items()}

    def set_default(self, name: str, value: str) -> None:
        """Set a value in the defaults table (a live value, or a computed default)."""
        self._defaults_lower[name.lower()] = value

    def set_live(self, values: Mapping[str, str]) -> None:
        """Set defaults by lower-case name (a proc's $(Process), $(Step)...) at once."""
        self._defaults_lower.update(values)

    def lookup(self, name: str) -> str | None:
        """The raw value of `name`: file macros first, then defaults; None if neither."""
        key = name.lower()
        if self.trace is not None:
            self.trace.add(key)
        value = self.macros.get_key(key)
        if value is not None:
            return value
        return self._defaults_lower.get(key)

    def remember(self, proc_names: frozenset[str]) -> None:
        """From now on, keep what `param` gives when no lookup it made is of a name in
        `proc_names` (those of a proc's own values), nor a draw, nor a file name: every
        proc of the queue statement gets the same (`_plan` replays steps proc by proc)."""
        self._memo = {}
        self._proc_names = proc_names | {RANDOM, IWD}

    def param(self, name: str, alt: str | None = None) -> str | None:
        """HTCondor's submit_param: expanded value of `name` (or `alt`); None if unset or empty."""
        memo = self._memo
        if memo is None:
            return self._param(name, alt)
        key = (name, alt)
        if key in memo:
            return memo[key]
        outer = self.trace
        seen: set[str] = set()
        self.trace = seen
        try:
            value = self._param(name, alt)
        finally:
            self.trace = outer
        if outer is not None:
            outer |= seen
        if seen.isdisjoint(self._proc_names):
            memo[key] = value
        return value

    def _param(self, name: str, alt: str | None) -> str | None:
        raw = self.lookup(name)
        if raw is None and alt is not None:
            raw = self.lookup(alt)
        if raw is None:
            return None
        value = self.expand(raw)
        return value if value else None

    def expand(self, text: str, *, keep_dollar: bool = False) -> str:
        """`text` with every `$(...)` and macro function replaced."""
        if "$" not in text:
            return text
        template = _TEMPLATES.get(text, _UNSEEN)
        if template is _UNSEEN:
            template = _template(text)
            if len(_TEMPLATES) >= _TEMPLATES_MAX:
                _TEMPLATES.clear()
            _TEMPLATES[text] = template
        if template is not None:
            # Only `$(name)` references: each value, unless it holds a reference itself
            # (then the walk below, which expands what it substitutes in turn).
            pieces, tail = template
            out = []
            for literal, name in pieces:
                value = self.lookup(name)
                if value and "$" in value:
                    break
                out.append(literal)
                out.append(value or "")
            else:
                out.append(tail)
                return "".join(out)
        pos = 0
        steps = 0
        while True:
            ref = _find(text, pos)
            if ref is None:
                break
            steps += 1
            if steps > _MAX_STEPS:
                raise SubmitError(f"macro expansion does not terminate in: {text[:200]}")
            text = text[: ref.dollar] + self._evaluate(text, ref) + text[ref.right :]
            pos = ref.dollar
        if not keep_dollar:
            while (ref := _find(text, 0, dollar_only=True)) is not None:
                text = text[: ref.dollar] + "$" + text[ref.right :]
        return text

    def _arg(self, args: str, index: int) -> str | None:
        item = _nth_item(args, index)
        if item is None:
            return None
        value = self.lookup(item)
        return self.expand(value if value is not None else item, keep_dollar=True)

    def _evaluate(self, text: str, ref: _Ref) -> str:
        end = ref.right - 1
        if ref.colon >= 0:
            name = text[ref.body : ref.colon - 1]
            default: str | None = text[ref.colon : end]
        else:
            name = text[ref.body : end]
            default = None
        kind = ref.kind
        if kind == _NORMAL:
            value = self.lookup(name)
            if not value and default is not None:
                return default
            return value or ""
        if kind == "ENV":
            env_value = self.env.get(name)
            if env_value:
                return env_value
            if default is not None:
                return default
            return "UNDEFINED" if env_value is None else ""
        body = text[ref.body : end]
        handler: Callable[[str, str], str] = getattr(self, f"_f_{kind.lower()}")
        return handler(body, ref.func)

    # -- macro functions ---------------------------------------------------

    def _drawn(self) -> random.Random:
        """The generator, for a draw (which each proc makes anew)."""
        if self.trace is not None:
            self.trace.add(RANDOM)
        if self.rng is None:
            self.rng = random.Random(0)
        return self.rng

    def _f_random_choice(self, body: str, _func: str) -> str:
        items = body
        if "," not in items:
            if not items:
                raise SubmitError("$RANDOM_CHOICE() error: no list")
            items = self._arg(body, 0) or ""
        choices = items.split(",")
        return choices[self._drawn().randrange(len(choices))].strip()

    def _f_random_integer(self, body: str, _func: str) -> str:
        bounds = []
        for index, what, dflt in ((0, "min", None), (1, "max", None), (2, "step", "1")):
            item = _nth_item(body, index)
            if item is None:
                item = dflt
            match = re.match(r"\s*[+-]?\d+", item or "")
            if not match:
                raise SubmitError(f"$RANDOM_INTEGER() error: invalid {what}")
            bounds.append(int(match.group()))
        low, high, step = bounds
        if step < 1:
            raise SubmitError("$RANDOM_INTEGER() error: invalid step")
        if low > high:
            raise SubmitError("$RANDOM_INTEGER() error: min > max")
        count = (step + high - low) // step
        return str(low + self._drawn().randrange(count) * step)

    def _f_choice(self, body: str, _func: str) -> str:
        if _nth_item(body, 1) is None:
            raise SubmitError("$CHOICE() error: no list")
        index_text = self._arg(body, 0) or ""
        index = string_is_long(index_text)
        if index is None or index < 0:
            raise SubmitError(f"$CHOICE() error: '{index_text}' is invalid index")
        items = body.split(",")[1:]
        if len(items) == 1:
            list_name = items[0].strip()
            raw = self.lookup(list_name) if list_name else None
            if raw is None:
                raise SubmitError(f"$CHOICE() error: no list named {list_name}")
            items = self.expand(raw, keep_dollar=True).split(",")
        if index >= len(items):
            raise SubmitError(f"$CHOICE() error: index {index} is out of range")
        return items[index].strip()

    def _f_substr(self, body: str, _func: str) -> str:
        # $SUBSTR(name, start[, length]); negative values count from the end
        if _nth_item(body, 1) is None:
            raise SubmitError("$SUBSTR() macro: no length specified!")
        start_text = self._arg(body, 1) or ""
        start = string_is_long(start_text)
        if start is None:
            raise SubmitError(f"$SUBSTR() macro: {start_text} is invalid start index!")
        length: int | None = None
        if _nth_item(body, 2) is not None:
            length_text = self._arg(body, 2) or ""
            length = string_is_long(length_text)
            if length is None:
                raise SubmitError(f"$SUBSTR() macro: {length_text} is invalid length !")
        value = self._arg(body, 0)
        if not value:
            return ""
        size = len(value)
        if start < 0:
            start = max(size + start, 0)
        start = min(start, size)
        rest = value[start:]
        if length is None:
            return rest
        if length < 0:
            length = max(len(rest) + length, 0)
        return rest[:length]

    def _number(self, body: str, kind: str) -> str:
        fmt = _nth_item(body, 1, trim=False)
        value_text = self._arg(body, 0) or ""
        if kind == "INT":
            number = string_is_long(value_text)
            if number is None:
                raise SubmitError(f"$INT() error: {value_text} does not evaluate to an integer")
            return printf(fmt, number, "INT") if fmt is not None else str(number)
        real = string_is_double(value_text)
        if real is None:
            raise SubmitError(f"$REAL() error: {value_text} does not evaluate to a real")
        if fmt is None:
            return _g16(real)
        out = printf(fmt, real, "REAL")
        return out if "." in out else out + ".0"

    def _f_int(self, body: str, _func: str) -> str:
        return self._number(body, "INT")

    def _f_real(self, body: str, _func: str) -> str:
        return self._number(body, "REAL")

    def _f_string(self, body: str, _func: str) -> str:
        fmt = _nth_item(body, 1, trim=False)
        value = self._arg(body, 0) or ""
        result = _classad.eval_text(value) if _classad.parses(value) else None
        if isinstance(result, str):
            value = result
        return printf(fmt, value, "STRING") if fmt is not None else value

    def _f_eval(self, body: str, _func: str) -> str:
        raw = self.lookup(body)
        text = raw if raw is not None else body
        expanded = self.expand(text) if "$" in text else None
        source = expanded if expanded is not None else text
        if _classad.parses(source):
            result = _classad.eval_text(source)
            if isinstance(result, str):
                return result
            return _classad.unparse_value(result)
        return expanded or ""

    def _f_basename(self, body: str, _func: str) -> str:
        return self._filename(body, "nx")

    def _f_dirname(self, body: str, _func: str) -> str:
        return self._filename(body, "p")

    def _f_f(self, body: str, func: str) -> str:
        return self._filename(body, func[1:])

    def _filename(self, body: str, flags: str) -> str:
        raw = self.lookup(body)
        value = raw if raw is not None else body
        if "$" in value:
            value = self.expand(value, keep_dollar=True)
        if self.trace is not None:
            self.trace.add(IWD)
        return filename_func(flags, value, self.cwd)


def _g16(value: float) -> str:
    """C's "%.16G" (what $REAL prints by default)."""
    return f"{value:.16G}"


def expand_self(name: str, value: str, expander: Expander) -> str:
    """Expand only references to `name` itself (what `x = $(x) more` does at parse time)."""
    pos = 0
    steps = 0
    while True:
        ref = _find(value, pos)
        while ref is not None and not (
            ref.kind == _NORMAL
            and value[ref.body : (ref.colon - 1 if ref.colon >= 0 else ref.right - 1)].lower()
            == name.lower()
        ):
            ref = _find(value, ref.right)
        if ref is None:
            return value
        steps += 1
        if steps > _MAX_STEPS:
            raise SubmitError(f"macro expansion does not terminate in: {value[:200]}")
        value = value[: ref.dollar] + expander._evaluate(value, ref) + value[ref.right :]
        pos = ref.dollar


def environ_snapshot() -> dict[str, str]:
    """The current process environment (for callers; the core never reads it itself)."""
    return dict(os.environ)
