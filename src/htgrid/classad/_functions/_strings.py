"""String functions: strcat join substr strcmp stricmp toUpper toLower size, versions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from htgrid.classad._ad import AdBase
from htgrid.classad._functions._convert import c_int, to_str
from htgrid.classad._functions._registry import builtin
from htgrid.classad._values import ERROR, UNDEFINED, ListValue

if TYPE_CHECKING:
    from htgrid.classad._state import EvalState
    from htgrid.classad._values import Val

__all__ = ["byte_len", "natural_cmp"]

_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def byte_len(s: str) -> int:
    """The length of `s` in bytes, as C sees a UTF-8 string."""
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogateescape"))


@builtin("strcat")
def _strcat(state: EvalState, *args: Val) -> Val:
    """`strcat(a, ...)`: concatenation through string(); the first undefined/error wins."""
    parts: list[str] = []
    for v in args:
        s = v if type(v) is str else to_str(v)
        if type(s) is not str:
            return s
        parts.append(s)
    return "".join(parts)


@builtin("join")
def _join(state: EvalState, *args: Val) -> Val:
    """`join(sep, a, ...)`, `join(sep, list)`, `join(list)`: undefined items skipped."""
    items: list[Val] = list(args)
    if 0 < len(args) <= 2 and type(args[-1]) is ListValue:
        lst: ListValue = args[-1]
        items = [args[0] if len(args) == 2 else "", *lst.values()]
    buf = ""
    sep = ""
    saw_undef = False
    saw_def = False
    for i, v in enumerate(items):
        s = v if type(v) is str else to_str(v)
        if s is UNDEFINED:
            saw_undef = True
            continue
        if type(s) is not str:
            return ERROR
        if i == 0:
            sep = s
            continue
        # The C code only adds the separator after a non-empty prefix.
        if buf:
            buf += sep
        saw_def = True
        buf += s
    if saw_undef and not saw_def:
        return UNDEFINED
    return buf


def _int_arg(v: Val) -> int | None:
    return c_int(v) if type(v) is int else None


@builtin("substr")
def _substr(state: EvalState, *args: Val) -> Val:
    """`substr(s, offset [, length])`: Perl-like; negative values count from the end."""
    n = len(args)
    if n < 2 or n > 3:
        return ERROR
    if any(a is UNDEFINED for a in args):
        return UNDEFINED
    s = args[0]
    off = _int_arg(args[1])
    ln = _int_arg(args[2]) if n == 3 else 0
    if type(s) is not str or off is None or ln is None:
        return ERROR
    text: str = s
    ascii_ = text.isascii()
    data: str | bytes = text if ascii_ else text.encode("utf-8", "surrogateescape")
    alen = len(data)
    if off < 0:
        off = max(alen + off, 0)
    elif off >= alen:
        off = alen
    if ln <= 0:
        ln = max(alen - off + ln, 0)
    elif ln > alen - off:
        ln = alen - off
    if n == 3 and c_int(args[2]) == 0:  # type: ignore[arg-type]
        ln = 0
    part = data[off : off + ln]
    if ascii_:
        return part  # type: ignore[return-value]
    return part.decode("utf-8", "surrogateescape")  # type: ignore[union-attr]


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def _compare(args: tuple[Val, ...], fold: bool) -> Val:
    if len(args) != 2:
        return ERROR
    a, b = args
    if a is UNDEFINED or b is UNDEFINED:
        return UNDEFINED
    sa = to_str(a)
    sb = to_str(b)
    if type(sa) is not str or type(sb) is not str:
        return ERROR
    if fold:
        sa = sa.translate(_LOWER)
        sb = sb.translate(_LOWER)
    # Code-point order equals the byte order of UTF-8, which strcmp uses.
    return _sign((sa > sb) - (sa < sb))


@builtin("strcmp")
def _strcmp(state: EvalState, *args: Val) -> Val:
    """`strcmp(a, b)`: -1, 0 or 1; arguments through string()."""
    return _compare(args, False)


@builtin("stricmp")
def _stricmp(state: EvalState, *args: Val) -> Val:
    """`stricmp(a, b)`: as strcmp, ignoring ASCII case."""
    return _compare(args, True)


@builtin("toUpper")
def _to_upper(state: EvalState, *args: Val) -> Val:
    """`toUpper(s)`: ASCII upper case of string(s)."""
    if len(args) != 1:
        return ERROR
    s = to_str(args[0])
    return s.translate(_UPPER) if type(s) is str else s


@builtin("toLower")
def _to_lower(state: EvalState, *args: Val) -> Val:
    """`toLower(s)`: ASCII lower case of string(s)."""
    if len(args) != 1:
        return ERROR
    s = to_str(args[0])
    return s.translate(_LOWER) if type(s) is str else s


@builtin("size")
def _size(state: EvalState, *args: Val) -> Val:
    """`size(x)`: bytes of a string, items of a list, attributes of an ad."""
    if len(args) != 1:
        return ERROR
    v = args[0]
    t = type(v)
    if t is str:
        return byte_len(v)  # type: ignore[arg-type]
    if t is ListValue:
        return len(v)  # type: ignore[arg-type]
    if v is UNDEFINED:
        return UNDEFINED
    if isinstance(v, AdBase):
        return len(v)
    return ERROR


def _schar(b: bytes, i: int) -> int:
    """The C `char` (signed) at index i, or 0 past the end."""
    if i >= len(b):
        return 0
    c = b[i]
    return c - 256 if c >= 128 else c


def _isdigit(b: bytes, i: int) -> bool:
    return i < len(b) and 48 <= b[i] <= 57


def natural_cmp(s1: bytes, s2: bytes) -> int:
    """HTCondor's natural_cmp (strverscmp-like): digit runs compare numerically."""
    n = min(len(s1), len(s2))
    i = 0
    while i < n and s1[i] == s2[i]:
        i += 1
    c1 = _schar(s1, i)
    c2 = _schar(s2, i)
    if c1 == c2:
        return 0
    beg = i
    while beg > 0 and 48 <= s1[beg - 1] <= 57:
        beg -= 1
    if beg == i and not (_isdigit(s1, i) and _isdigit(s2, i)):
        return c1 - c2
    z1 = beg
    while z1 < len(s1) and s1[z1] == 48:
        z1 += 1
    z2 = beg
    while z2 < len(s2) and s2[z2] == 48:
        z2 += 1
    # A final trailing zero does not count as a leading zero.
    if z1 > beg and not _isdigit(s1, z1):
        z1 -= 1
    if z2 > beg and not _isdigit(s2, z2):
        z2 -= 1
    if z1 != z2:
        return z2 - z1
    if z1 > beg:
        return c1 - c2
    e1 = z1
    while _isdigit(s1, e1):
        e1 += 1
    e2 = z2
    while _isdigit(s2, e2):
        e2 += 1
    if e1 != e2:
        return e1 - e2
    return c1 - c2


def _vstr(v: Val) -> bytes | None:
    s = to_str(v)
    if type(s) is not str:
        return None
    return s.encode("utf-8", "surrogateescape")


def _version(name: str, decide: object) -> None:
    def fn(state: EvalState, *args: Val) -> Val:
        if len(args) != 2:
            return ERROR
        a, b = args
        if a is UNDEFINED or b is UNDEFINED:
            return UNDEFINED
        ba = _vstr(a)
        bb = _vstr(b)
        if ba is None or bb is None:
            return ERROR
        r = natural_cmp(ba, bb)
        return decide(r)  # type: ignore[no-any-return,operator]

    fn.__name__ = name
    fn.__doc__ = f"`{name}(a, b)`: natural version comparison."
    builtin(name)(fn)


_version("versioncmp", lambda r: r)
_version("versionLT", lambda r: r < 0)
_version("versionLE", lambda r: r <= 0)
_version("versionGT", lambda r: r > 0)
_version("versionGE", lambda r: r >= 0)
_version("versionEQ", lambda r: r == 0)


@builtin("version_in_range")
def _version_in_range(state: EvalState, *args: Val) -> Val:
    """`version_in_range(v, lo, hi)`: lo <= v <= hi in natural order."""
    if len(args) != 3:
        return ERROR
    v, lo, hi = args
    if lo is UNDEFINED or hi is UNDEFINED:
        return UNDEFINED
    bv = _vstr(v)
    blo = _vstr(lo)
    bhi = _vstr(hi)
    if bv is None or blo is None or bhi is None:
        return ERROR
    return natural_cmp(blo, bv) <= 0 and natural_cmp(bv, bhi) <= 0
