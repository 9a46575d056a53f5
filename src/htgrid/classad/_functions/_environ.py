"""Environment and argument functions: envV1ToV2 mergeEnvironment argsToList listToArgs,
userHome and userMap (HTCondor compat functions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from htgrid.classad._functions._registry import builtin
from htgrid.classad._values import ERROR, UNDEFINED, ListValue

if TYPE_CHECKING:
    from collections.abc import Callable

    from htgrid.classad._state import EvalState
    from htgrid.classad._values import Val

__all__ = ["USER_MAPS", "join_args", "split_args"]

# Named user maps for userMap(): map name -> function from a user name to a
# comma-separated list of results (None when the user has no mapping). HTCondor
# fills these from CLASSAD_USER_MAPFILE_* configuration; a plain process has none.
USER_MAPS: dict[str, Callable[[str], str | None]] = {}

_PERMITTED_DELIMS = "!#$%&*+,-/:;<>?@^`|~\x1f"
_V1_WS = " \t\n\r"
# A $$() macro without "=" is kept verbatim, with no value.
_NO_VALUE = "\x01\x02\x03\x04\x05\x06"


def split_args(text: str) -> list[str] | None:
    """V2 argument syntax: whitespace separates, '...' quotes, '' inside quotes is '."""
    out: list[str] = []
    buf: list[str] = []
    parsed = False
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "'":
            parsed = True
            i += 1
            while True:
                if i >= n:
                    return None  # unbalanced quote
                if text[i] == "'":
                    if i + 1 < n and text[i + 1] == "'":
                        buf.append("'")
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(text[i])
                i += 1
        elif c in _V1_WS:
            i += 1
            if parsed:
                out.append("".join(buf))
                buf = []
                parsed = False
        else:
            parsed = True
            buf.append(c)
            i += 1
    if parsed:
        out.append("".join(buf))
    return out


def join_args(args: list[str]) -> str:
    """V2 argument syntax for `args`: whitespace and quotes are single-quoted one by one."""
    res: list[str] = []
    for arg in args:
        if res:
            res.append(" ")
        if not arg:
            res.append("''")
        for c in arg:
            if c in " \t\n\r'":
                # Merge with a quoted section just closed, so no doubled quote appears.
                if res and res[-1] == "'":
                    res.pop()
                else:
                    res.append("'")
                if c == "'":
                    res.append("'")
                res.append(c)
                res.append("'")
            else:
                res.append(c)
    return "".join(res)


def _set_env(env: dict[str, str], entry: str) -> bool:
    if not entry:
        return False
    eq = entry.find("=")
    if eq < 0:
        if "$$" in entry:
            env[entry] = _NO_VALUE
            return True
        return False
    if eq == 0:
        return False
    env[entry[:eq]] = entry[eq + 1 :]
    return True


def _env_text(env: dict[str, str]) -> str:
    return join_args([k if v == _NO_VALUE else f"{k}={v}" for k, v in sorted(env.items())])


def _merge_v2(env: dict[str, str], text: str) -> bool:
    entries = split_args(text)
    if entries is None:
        return False
    return all(_set_env(env, e) for e in entries)


def _merge_v1(env: dict[str, str], text: str) -> bool:
    if not text:
        return True
    delim = ";"
    if text[0] == delim:
        text = text[1:]
    elif text[0] in _PERMITTED_DELIMS:
        delim = text[0]
        text = text[1:]
    i = 0
    n = len(text)
    while i < n:
        while i < n and text[i] in _V1_WS:
            i += 1
        j = i
        while j < n and text[j] != "\n" and text[j] != delim:
            j += 1
        entry = text[i:j]
        i = j + 1
        if entry and not _set_env(env, entry):
            return False
    return True


@builtin("envV1ToV2")
def _env_v1_to_v2(state: EvalState, *args: Val) -> Val:
    """`envV1ToV2(env)`: a V1 (;-separated) environment in V2 syntax; undefined stays so."""
    if len(args) != 1:
        return ERROR
    v = args[0]
    if v is UNDEFINED:
        return UNDEFINED
    if type(v) is not str:
        return ERROR
    env: dict[str, str] = {}
    if not _merge_v1(env, v):
        return ERROR
    return _env_text(env)


@builtin("mergeEnvironment")
def _merge_environment(state: EvalState, *args: Val) -> Val:
    """`mergeEnvironment(env, ...)`: V2 environments merged, later values winning."""
    env: dict[str, str] = {}
    for v in args:
        if v is UNDEFINED:
            continue
        if type(v) is not str or not _merge_v2(env, v):
            return ERROR
    return _env_text(env)


def _version(args: tuple[Val, ...]) -> int | None:
    if len(args) == 1:
        return 2
    v = args[1]
    if type(v) is not int or v not in (1, 2):
        return None
    return v


@builtin("argsToList")
def _args_to_list(state: EvalState, *args: Val) -> Val:
    """`argsToList(args [, version])`: an argument string (V2 by default) as a list."""
    if len(args) not in (1, 2):
        return ERROR
    vers = _version(args)
    text = args[0]
    if vers is None or type(text) is not str:
        return ERROR
    if vers == 1:
        items: list[str] | None = [p for p in _split_ws(text) if p]
    else:
        items = split_args(text)
        if items is None:
            return ERROR
    return ListValue.from_values(list(items))  # type: ignore[arg-type]


def _split_ws(text: str) -> list[str]:
    out = [text]
    for c in _V1_WS:
        out = [part for piece in out for part in piece.split(c)]
    return out


@builtin("listToArgs")
def _list_to_args(state: EvalState, *args: Val) -> Val:
    """`listToArgs(list [, version])`: a list of strings as an argument string."""
    if len(args) not in (1, 2):
        return ERROR
    vers = _version(args)
    lst = args[0]
    if vers is None or type(lst) is not ListValue:
        return ERROR
    items: list[str] = []
    for v in lst.values():
        if type(v) is not str:
            return ERROR
        items.append(v)
    if vers == 2:
        return join_args(items)
    if any(c in a for a in items for c in _V1_WS):
        return ERROR
    out = ""
    for a in items:
        if out:
            out += " "
        out += a
    return out


@builtin("userHome", pure=False)
def _user_home(state: EvalState, *args: Val) -> Val:
    """`userHome(user [, default])`: the user's home directory from the password database."""
    if len(args) not in (1, 2):
        return ERROR
    default = args[1] if len(args) == 2 and type(args[1]) is str else ""
    owner = args[0]
    if owner is UNDEFINED and not default:
        return UNDEFINED
    if type(owner) is not str:
        return default if default else ERROR
    try:
        import pwd  # POSIX only: elsewhere the default (ImportError below)

        home = pwd.getpwnam(owner).pw_dir
    except (ImportError, KeyError, ValueError, OSError):
        return default if default else UNDEFINED
    return home


@builtin("userMap", pure=False)
def _user_map(state: EvalState, *args: Val) -> Val:
    """`userMap(map, user [, preferred [, default]])`: map a user through a named map."""
    n = len(args)
    if n < 2 or n > 4:
        return ERROR
    mapname, user = args[0], args[1]
    fallback: Val = args[3] if n == 4 else UNDEFINED
    if type(mapname) is not str or type(user) is not str:
        if mapname is ERROR or user is ERROR:
            return ERROR
        return fallback
    mapper = USER_MAPS.get(mapname)
    result = mapper(user) if mapper is not None else None
    if result is None:
        return fallback
    if n == 2:
        return result
    items = [s for s in result.split(",") if s]
    pref = args[2]
    if type(pref) is str:
        low = pref.lower()
        for item in items:
            if item.lower() == low:
                return item
    if items:
        return items[0]
    return fallback
