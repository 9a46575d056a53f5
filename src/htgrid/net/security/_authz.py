"""Who a verified token's holder is here, and what they may do.

Authorizations are HTCondor's names. A token's `scope` ("condor:/READ condor:/WRITE")
limits its holder to those (and what they imply); a token without one acts with its
identity's own rights: READ and WRITE for a user, everything for the pool's
administrators (`admin_users`, as QUEUE_SUPER_USERS: root and condor by default).

Implied authorizations, as in HTCondor's permission hierarchy: WRITE gives READ,
ADMINISTRATOR gives WRITE, DAEMON gives WRITE and the ADVERTISE_* levels, NEGOTIATOR
gives READ.

The token's subject becomes a local user through a map file in HTCondor's unified form,
first match wins, `\\1`...`\\9` naming the regex's groups; the principal matched is
`<issuer>,<subject>` (as HTCondor maps SCITOKENS), lines for other methods are skipped:

    # $HTGRID_HOME/etc/mapfile
    IDTOKENS /^pool\\.example\\.org,(.*)@example\\.org$/   \\1
    IDTOKENS pool.example.org,monitor@example.org         nobody

A subject no line maps becomes the part of it before the `@`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.net.security._errors import InsufficientScope, MalformedToken, SecurityError
from htgrid.queue import Identity

__all__ = [
    "AUTHORIZATIONS",
    "MapFile",
    "MapRule",
    "Principal",
    "effective_authorizations",
    "format_scope",
    "normalize_authz",
    "parse_scope",
]

SCOPE_PREFIX: Final = "condor:/"
AUTHORIZATIONS: Final = frozenset(
    {
        "ALLOW",
        "READ",
        "WRITE",
        "NEGOTIATOR",
        "ADMINISTRATOR",
        "CONFIG",
        "DAEMON",
        "ADVERTISE_MASTER",
        "ADVERTISE_STARTD",
        "ADVERTISE_SCHEDD",
    }
)
_IMPLIES: Final[Mapping[str, frozenset[str]]] = {
    "READ": frozenset({"ALLOW"}),
    "WRITE": frozenset({"READ"}),
    "NEGOTIATOR": frozenset({"READ"}),
    "ADMINISTRATOR": frozenset({"WRITE"}),
    "DAEMON": frozenset({"WRITE", "ADVERTISE_MASTER", "ADVERTISE_STARTD", "ADVERTISE_SCHEDD"}),
}
_USER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def normalize_authz(name: str) -> str:
    """`read` or `condor:/READ` as READ; ValueError for a name HTCondor does not have."""
    bare = name[len(SCOPE_PREFIX) :] if name.startswith(SCOPE_PREFIX) else name
    upper = bare.strip().upper()
    if upper not in AUTHORIZATIONS:
        known = ", ".join(sorted(AUTHORIZATIONS))
        raise ValueError(f"{name!r} is not an authorization (one of {known})")
    return upper


def format_scope(authz: Iterable[str]) -> str:
    """The `scope` claim for these authorizations, as condor_token_create writes it."""
    return " ".join(SCOPE_PREFIX + a for a in authz)


def parse_scope(scope: str) -> tuple[str, ...]:
    """The authorizations a `scope` claim names; other scopes (SciTokens') are ignored."""
    names: list[str] = []
    for item in scope.split():
        if item.startswith(SCOPE_PREFIX):
            try:
                names.append(normalize_authz(item))
            except ValueError:
                continue  # a level a newer HTCondor knows: it grants nothing here
    return tuple(names)


def _closure(names: Iterable[str]) -> frozenset[str]:
    granted: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in granted:
            granted.add(name)
            todo.extend(_IMPLIES.get(name, ()))
    return frozenset(granted)


def effective_authorizations(
    scopes: tuple[str, ...] | None, user: str, admin_users: frozenset[str]
) -> frozenset[str]:
    """What a token grants: its scopes (and what they imply), else its identity's rights."""
    if scopes is not None:
        return _closure(scopes)
    if user in admin_users:
        return AUTHORIZATIONS
    return _closure(("WRITE",))


@dataclass(frozen=True, slots=True)
class Principal:
    """A caller whose token verified: the local user and what the token lets it do."""

    user: str  # the local user the subject maps to (compared with jobs' Owner)
    subject: str  # the token's `sub`
    issuer: str
    scopes: tuple[str, ...] | None  # the token's own authorizations; None: unrestricted
    authorizations: frozenset[str]  # what it may do, implications included
    token_id: str  # `jti`
    key_id: str  # `kid`
    expires: float | None = None

    @property
    def is_admin(self) -> bool:
        """May act on anyone's jobs (HTCondor's ADMINISTRATOR)."""
        return "ADMINISTRATOR" in self.authorizations

    def allows(self, authz: str) -> bool:
        """Whether the token grants `authz`."""
        return authz in self.authorizations

    def require(self, authz: str) -> Principal:
        """This principal, or InsufficientScope when the token does not grant `authz`."""
        if authz not in self.authorizations:
            granted = ", ".join(sorted(self.authorizations)) or "nothing"
            raise InsufficientScope(
                f"token {self.token_id} of {self.subject} does not grant {authz} "
                f"(it grants {granted})"
            )
        return self

    def identity(self) -> Identity:
        """The job queue's view of this caller."""
        return Identity(self.user, admin=self.is_admin)


@dataclass(frozen=True, slots=True)
class MapRule:
    """One IDTOKENS line of a map file."""

    pattern: re.Pattern[str]
    canonical: str
    line: int


_LINE: Final = re.compile(
    r"(?P<method>\S+)\s+(?:/(?P<regex>(?:\\.|[^\\/])*)/(?P<flags>i?)|(?P<literal>\S+))"
    r"\s+(?P<canonical>\S+)\s*"
)
_GROUP_REF: Final = re.compile(r"\\(\d)")


@dataclass(frozen=True, slots=True)
class MapFile:
    """The IDTOKENS rules of a unified map file."""

    rules: tuple[MapRule, ...] = ()

    @classmethod
    def parse(cls, text: str, origin: str = "mapfile") -> MapFile:
        """The rules in `text` (SecurityError naming the line of a bad one)."""
        rules: list[MapRule] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = _LINE.fullmatch(line)
            if m is None:
                raise SecurityError(f"{origin}:{number}: expected METHOD PRINCIPAL CANONICAL")
            if m["method"].upper() not in {"IDTOKENS", "IDTOKEN", "TOKEN"}:
                continue
            if m["regex"] is not None:
                flags = re.IGNORECASE if m["flags"] else 0
                try:
                    pattern = re.compile(m["regex"].replace("\\/", "/"), flags)
                except re.error as exc:
                    raise SecurityError(
                        f"{origin}:{number}: bad regular expression: {exc}"
                    ) from None
            else:
                pattern = re.compile(r"\A" + re.escape(m["literal"]) + r"\Z")
            rules.append(MapRule(pattern, m["canonical"], number))
        return cls(tuple(rules))

    @classmethod
    def load(cls, path: Path) -> MapFile:
        """The rules in the file at `path`; none when there is no such file."""
        try:
            return cls.parse(path.read_text(encoding="utf-8"), str(path))
        except FileNotFoundError:
            return cls()
        except (OSError, UnicodeDecodeError) as exc:
            raise SecurityError(f"{path}: cannot read the map file: {exc}") from None

    def map(self, issuer: str, subject: str) -> str:
        """The local user of `subject` (MalformedToken when it names no valid user)."""
        principal = f"{issuer},{subject}"
        user: str | None = None
        for rule in self.rules:
            m = rule.pattern.search(principal)  # unanchored, as PCRE in HTCondor
            if m is not None:
                user = _substitute(m, rule.canonical)
                break
        if user is None:
            user = subject.split("@", 1)[0]
        if not _USER.fullmatch(user):
            raise MalformedToken(f"the token's subject {subject!r} names no local user")
        return user


def _substitute(m: re.Match[str], canonical: str) -> str:
    def group(ref: re.Match[str]) -> str:
        try:
            return m.group(int(ref[1])) or ""
        except IndexError:
            return ""

    return _GROUP_REF.sub(group, canonical)
