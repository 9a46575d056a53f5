"""Who a verified token's holder is here, and what they may do.

Authorizations are HTCondor's names. A token's `scope` ("condor:/READ condor:/WRITE")
limits its holder to those (and what they imply); a token without one acts with its
identity's own rights: READ and WRITE for a user, everything for the pool's
administrators (`admin_users`, as QUEUE_SUPER_USERS: root and condor by default).

Implied authorizations, as in HTCondor's permission hierarchy: WRITE gives READ,
ADMINISTRATOR gives WRITE, DAEMON gives WRITE and the ADVERTISE_* levels, NEGOTIATOR
gives READ.

The token's subject becomes a local user through the unified map file (`_mapfile`,
re-exported here): its TOKEN/IDTOKENS lines map `<issuer>,<subject>`, first match wins,
and a subject no line maps becomes the part of it before the `@`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from htgrid.net.security._errors import InsufficientScope
from htgrid.net.security._mapfile import MapFile, MapRule
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
    method: str = "IDTOKENS"  # how it authenticated: IDTOKENS (the pool's), SCITOKENS
    canonical: str = ""  # the mapped name, user@domain, that DENY_<level> is matched against

    @property
    def name(self) -> str:
        """The canonical name (`user@domain`), else the user: how the audit log names it."""
        return self.canonical or self.user

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
