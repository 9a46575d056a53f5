"""Helpers of the macro functions: printf formats ($INT, $REAL, $STRING) and
the path splitting of $F(), $BASENAME() and $DIRNAME().
"""

from __future__ import annotations

import re

from htgrid.submit._errors import SubmitError

__all__ = ["filename_func", "printf"]


_FMT = re.compile(r"%([-+ #0]*)(\d*|\*)(?:\.(\d*))?(hh|h|ll|l|q|j|z|t|L)?([diouxXcfFeEgGaAs])")


def printf(fmt: str, value: int | float | str, kind: str) -> str:
    match = _FMT.search(fmt)
    if match is None:
        raise SubmitError(f"${kind}() error: '{fmt}' is not a valid format specifier")
    conv = match.group(5)
    ok = {
        "INT": "diouxXc",
        "REAL": "fFeEgGaA",
        "STRING": "s",
    }[kind]
    if conv not in ok:
        raise SubmitError(f"${kind}() error: '{fmt}' is not a valid format specifier")
    spec = f"%{match.group(1)}{match.group(2)}"
    if match.group(3) is not None:
        spec += f".{match.group(3)}"
    spec += "d" if conv == "u" else conv
    if conv in "aA":
        body = float(value).hex()
    else:
        body = spec % value
    return fmt[: match.start()] + body + fmt[match.end() :].replace("%%", "%")


# ---------------------------------------------------------------------------
# filename helpers ($F, $BASENAME, $DIRNAME)


def _basename_index(path: str) -> int:
    return max(path.rfind("/"), path.rfind("\\")) + 1


def _ext_index(path: str, start: int) -> int:
    dot = path.rfind(".", start)
    return dot if dot >= 0 else len(path)


def _unquote(text: str) -> str:
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def filename_func(flags: str, value: str, cwd: str | None) -> str:
    parts = 0
    dirs = 0
    quoted = full = bare = arg_quote = False
    to_char = ""
    for ch in flags.lower():
        if ch == "x":
            parts |= 1
        elif ch == "n":
            parts |= 2
        elif ch == "p":
            parts |= 4
        elif ch == "d":
            parts |= 8
            dirs += 1
        elif ch == "a":
            arg_quote = True
        elif ch == "b":
            bare = True
        elif ch == "f":
            full = True
        elif ch == "w":
            to_char = "\\"
        elif ch == "u":
            to_char = "/"
        elif ch == "q":
            quoted = True
    path = _unquote(value)
    if to_char:
        path = path.replace("\\" if to_char == "/" else "/", to_char)
    if full and cwd and not path.startswith("/"):
        base = cwd[:-1] if cwd.endswith("/") else cwd
        if len(path) > 2 and path.startswith("./"):
            path = path[2:]
        path = f"{base}{to_char or '/'}{path}"
    ixn = _basename_index(path)
    ixx = _ext_index(path, ixn)
    end = len(path)
    if ixn == 0 and parts & 3:
        parts &= ~(4 | 8)
    start = 0
    sel = parts & 0xF
    if sel == 1:
        start = ixx + 1 if bare and ixx < end else ixx
    elif sel == 3:
        start = ixn
    elif sel == 2:
        start, end = ixn, ixx
    elif sel in (0, 7, 5):
        start = 0
    elif sel == 4:
        end = ixn - 1 if bare and ixn > 0 else ixn
    elif sel == 6:
        end = ixx
    elif ixn > 0:
        seps = [i + 1 for i, ch in enumerate(path) if ch in "/\\"]
        keep = len(seps) - dirs
        seps = seps[:keep] if keep > 0 else []
        start = seps[-1] if seps else 0
        if (parts & 3) == 2:
            end = ixx
        elif (parts & 3) == 0:
            end = ixn - 1 if bare and ixn > 0 else ixn
    else:
        start = end = 0
    result = path[start:end]
    if quoted:
        q = "'" if arg_quote else '"'
        result = q + result + q
    return result
