"""HTCondor's unified map file (CERTIFICATE_MAPFILE): who an authenticated name is here.

    # $HTGRID_HOME/etc/mapfile, or the file CERTIFICATE_MAPFILE names
    SCITOKENS /^https:\\/\\/issuer\\.example,(.*)$/    \\1
    SCITOKENS /^https:\\/\\/vo\\.example,pilot$/       osgpilot@banned.htcondor.org
    TOKEN     /^pool\\.example\\.org,(.*)@example\\.org$/ \\1
    SSL       "/DC=org/DC=example/CN=Jane Doe"       jane
    @include  mapfiles.d

Each line is METHOD PRINCIPAL CANONICAL. The principal is a regular expression between
slashes (`/.../i` ignores case; matched anywhere, as PCRE in HTCondor, so anchor it), or a
literal name (a word, or in double quotes when it holds spaces); in double quotes, one
between slashes or starting with `^` is an expression too (HTCondor-CE's
`GSI "^\\/DC=org\\/CN=Jane Doe$" jane`). The first line of the
method whose principal matches wins; `\\1`...`\\9` in the canonical name are the
expression's groups. What each method's name is: SCITOKENS `<iss>,<sub>` (SciTokens and
WLCG tokens), TOKEN or IDTOKENS `<iss>,<sub>` of the pool's own tokens, SSL and GSI the
certificate's DN, as OpenSSL writes it (`/DC=org/DC=example/CN=Jane Doe`; GSI lines are
read as SSL ones, HTCondor having dropped GSI).

`@include PATH` reads a file, or each file of a directory in lexical order (dot files,
`~` backups, `#` files, .rpmsave and .rpmnew skipped, as LOCAL_CONFIG_DIR_EXCLUDE_REGEXP
does); a relative path is the including file's; an included file's own `@include` lines
are ignored, as HTCondor does. `WatchedMap` reads it all again when any of it changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.net.security._errors import MalformedToken, SecurityError

__all__ = ["TOKEN_METHODS", "MapFile", "MapRule", "WatchedMap", "local_user"]

#: The methods whose lines map the pool's own tokens (HTCondor's IDTOKENS and its alias).
TOKEN_METHODS: Final = frozenset({"IDTOKENS", "IDTOKEN", "TOKEN"})
_LINE: Final = re.compile(
    r"(?P<method>\S+)\s+"
    r'(?:/(?P<regex>(?:\\.|[^\\/])*)/(?P<flags>i?)|"(?P<quoted>(?:\\.|[^\\"])*)"|(?P<literal>\S+))'
    r"\s+(?P<canonical>\S+)\s*"
)
_QUOTED_REGEX: Final = re.compile(r"/(?P<regex>(?:\\.|[^\\/])*)/(?P<flags>i?)")
_INCLUDE: Final = re.compile(r"@include\s+(?P<path>\S.*?)\s*")
_EXCLUDED: Final = re.compile(r"^((\..*)|(.*~)|(#.*)|(.*\.rpmsave)|(.*\.rpmnew))$")
_GROUP_REF: Final = re.compile(r"\\(\d)")
_USER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, slots=True)
class MapRule:
    """One line of a map file: its method, principal pattern and canonical name."""

    method: str
    pattern: re.Pattern[str]
    canonical: str
    origin: str  # file:line, for the log and the audit log
    issuer: str | None = None  # the one issuer a SCITOKENS line can map, if it names one

    def apply(self, name: str) -> str | None:
        """The canonical name `name` maps to by this rule, or None when it does not match."""
        m = self.pattern.search(name)
        return None if m is None else _substitute(m, self.canonical)


def _substitute(m: re.Match[str], canonical: str) -> str:
    def group(ref: re.Match[str]) -> str:
        try:
            return m.group(int(ref[1])) or ""
        except IndexError:
            return ""

    return _GROUP_REF.sub(group, canonical)


def _rule(m: re.Match[str], origin: str) -> MapRule:
    method = m["method"].upper()
    regex, flags = m["regex"], re.IGNORECASE if m["flags"] else 0
    quoted = m["quoted"]
    if quoted is not None:
        # HTCondor-CE's DN lines: `GSI "^\/DC=org\/CN=Jane Doe$" jane` is an expression
        # (as HTCondor reads every principal by default), as is `SSL "/^...$/" jane`.
        inner = _QUOTED_REGEX.fullmatch(quoted)
        if inner is not None:
            regex, flags = inner["regex"], re.IGNORECASE if inner["flags"] else 0
        elif quoted.startswith("^"):
            regex = quoted
    text = ""
    if regex is not None:
        try:
            pattern = re.compile(regex.replace("\\/", "/"), flags)
        except re.error as exc:
            raise SecurityError(f"{origin}: bad regular expression: {exc}") from None
    else:
        text = m["literal"] if quoted is None else re.sub(r"\\(.)", r"\1", quoted)
        pattern = re.compile(r"\A" + re.escape(text) + r"\Z")
    return MapRule(method, pattern, m["canonical"], origin, _issuer_named(regex, text))


_META: Final = frozenset(".^$*+?{}[]|()")


def _issuer_named(regex: str | None, literal: str) -> str | None:
    r"""The issuer an `<iss>,<sub>` principal names: a literal's part before its comma, or
    the literal start of an expression anchored at `^` up to its first comma
    (`/^https:\/\/vo\.example,/`); None when it can match more than one issuer."""
    if regex is None:
        issuer, comma, _ = literal.partition(",")
        return issuer if comma and issuer else None
    text = regex.replace("\\/", "/")
    if text.startswith("^"):
        text = text[1:]
    elif text.startswith("\\A"):
        text = text[2:]
    else:
        return None
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            if i + 1 >= len(text) or text[i + 1].isalnum():
                return None  # \w, \d...: a class, not one character
            out.append(text[i + 1])
            i += 2
            continue
        if char in _META:
            return None
        if char == ",":
            return "".join(out) or None
        out.append(char)
        i += 1
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SecurityError(f"{path}: cannot read the map file: {reason}") from None


def _included(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return [p for p in sorted(path.iterdir()) if p.is_file() and not _EXCLUDED.match(p.name)]


@dataclass(frozen=True, slots=True)
class MapFile:
    """The rules of a unified map file, in order, and the paths they were read from."""

    rules: tuple[MapRule, ...] = ()
    sources: tuple[Path, ...] = ()

    @classmethod
    def parse(
        cls, text: str, origin: str = "mapfile", *, base: Path | None = None, nested: bool = False
    ) -> MapFile:
        """The rules in `text` (SecurityError naming the line of a bad one); `@include`
        paths are `base`'s (skipped in an included file, `nested`)."""
        rules: list[MapRule] = []
        sources: list[Path] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{origin}:{number}"
            include = _INCLUDE.fullmatch(line)
            if include is not None:
                if nested:
                    continue
                target = Path(include["path"])
                if not target.is_absolute():
                    target = (base or Path.cwd()) / target
                sources.append(target)
                for path in _included(target):
                    inner = cls.parse(_read(path), str(path), base=path.parent, nested=True)
                    rules += inner.rules
                    sources.append(path)
                continue
            m = _LINE.fullmatch(line)
            if m is None:
                raise SecurityError(f"{where}: expected METHOD PRINCIPAL CANONICAL")
            rules.append(_rule(m, where))
        return cls(tuple(rules), tuple(sources))

    @classmethod
    def load(cls, path: Path) -> MapFile:
        """The rules in the file at `path`; none when there is no such file."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls()
        except (OSError, UnicodeDecodeError):
            text = _read(path)  # raises, saying why
        mapped = cls.parse(text, str(path), base=path.parent)
        return cls(mapped.rules, (path, *mapped.sources))

    def lookup(self, methods: Iterable[str], name: str) -> tuple[str, MapRule] | None:
        """The canonical name of `name` authenticated by one of `methods`, and the rule
        that gave it (the first that matches); None when no line maps it."""
        wanted = {m.upper() for m in methods}
        for rule in self.rules:
            if rule.method in wanted and (canonical := rule.apply(name)) is not None:
                return canonical, rule
        return None

    def scitokens_issuers(self) -> frozenset[str]:
        """The issuers the SCITOKENS lines name, each line one at most (`_issuer_named`)."""
        return frozenset(
            r.issuer for r in self.rules if r.method == "SCITOKENS" and r.issuer is not None
        )

    def token_name(self, issuer: str, subject: str) -> str:
        """The canonical name of a pool token's `subject`: its TOKEN line's, else itself."""
        found = self.lookup(TOKEN_METHODS, f"{issuer},{subject}")
        return found[0] if found is not None else subject

    def map(self, issuer: str, subject: str) -> str:
        """The local user of a pool token's `subject`: its TOKEN line's, else the part of
        the subject before any `@` (MalformedToken when it names no valid user)."""
        user = local_user(self.token_name(issuer, subject))
        if user is None:
            raise MalformedToken(f"the token's subject {subject!r} names no local user")
        return user


def local_user(canonical: str) -> str | None:
    """The local account of a canonical name (`user` or `user@domain`), if it is a valid one."""
    user = canonical.split("@", 1)[0]
    return user if _USER.fullmatch(user) else None


def _signature(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class WatchedMap:
    """A map file read again when it, or a file or directory it includes, changed: a
    stat each per request, a parse only after an edit (HTCondor needs a reconfig)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._value = MapFile()
        self._signature: tuple[object, ...] | None = None

    def get(self) -> MapFile:
        paths = self._value.sources or (self.path,)
        signature = (self.path, *(_signature(p) for p in paths))
        if signature != self._signature:
            self._value = MapFile.load(self.path)
            self._signature = (
                self.path,
                *(_signature(p) for p in self._value.sources or (self.path,)),
            )
        return self._value
