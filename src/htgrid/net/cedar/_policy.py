"""What a CEDAR server agrees to: the security policy's reconciliation, and its sessions.

A client's auth ad says, for Authentication (AuthenticationNew when present), Encryption
and Integrity, REQUIRED, PREFERRED, OPTIONAL or NEVER; the server's own level meets it
in HTCondor's table (`reconcile`): YES, NO, or a refusal when one side requires what the
other never does. htgrid's daemons require authentication (as its HTTPS side requires a
token) and always encrypt with AES-GCM when the client offers an ECDH key, as HTCondor's
daemons do.

A session (`Sessions`) is what a client may resume without a new handshake: its key,
who authenticated, the commands it covers, until it expires (the shorter of the
client's SessionDuration and the daemon's SEC_DEFAULT_SESSION_DURATION, kept 20 s longer
as HTCondor's daemons do). Sessions live in memory, at most MAX_SESSIONS of them (the
expired dropped as new ones come, then the oldest): after a restart, or once dropped,
one call of each client fails with SID_NOT_FOUND and the next negotiates again, as with
HTCondor.
"""

from __future__ import annotations

import enum
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from htgrid.net._errors import CedarError
from htgrid.net.security import Principal

__all__ = ["Level", "Session", "Sessions", "reconcile"]

_SLOP: Final = 20.0  # seconds a session outlives its duration (HTCondor's daemons)
MAX_SESSIONS: Final = 50_000
_PURGE_STEP: Final = 4  # expired sessions looked at per new one


class Level(enum.Enum):
    """A side's wish for one security feature (only the first letter counts)."""

    REQUIRED = "R"
    PREFERRED = "P"
    OPTIONAL = "O"
    NEVER = "N"

    @classmethod
    def of(cls, text: object, default: Level) -> Level:
        if not isinstance(text, str) or not text:
            return default
        for level in cls:
            if level.value == text[0].upper():
                return level
        return default


# (client, server) -> YES (True), NO (False); the pairs missing refuse.
_TABLE: Final[dict[tuple[Level, Level], bool]] = {
    (Level.REQUIRED, Level.REQUIRED): True,
    (Level.REQUIRED, Level.PREFERRED): True,
    (Level.REQUIRED, Level.OPTIONAL): True,
    (Level.PREFERRED, Level.REQUIRED): True,
    (Level.PREFERRED, Level.PREFERRED): True,
    (Level.PREFERRED, Level.OPTIONAL): True,
    (Level.PREFERRED, Level.NEVER): False,
    (Level.OPTIONAL, Level.REQUIRED): True,
    (Level.OPTIONAL, Level.PREFERRED): True,
    (Level.OPTIONAL, Level.OPTIONAL): False,
    (Level.OPTIONAL, Level.NEVER): False,
    (Level.NEVER, Level.PREFERRED): False,
    (Level.NEVER, Level.OPTIONAL): False,
    (Level.NEVER, Level.NEVER): False,
}


def reconcile(what: str, client: Level, server: Level) -> bool:
    """Whether `what` is on for this connection; CedarError when the sides cannot agree."""
    try:
        return _TABLE[(client, server)]
    except KeyError:
        raise CedarError(
            f"the client's {what} is {client.name} and this daemon's {server.name}"
        ) from None


@dataclass(frozen=True, slots=True)
class Session:
    """A security session a client may resume."""

    sid: str
    key: bytes | None  # the AES key; None: a plaintext session
    principal: Principal
    commands: frozenset[int]
    expires: float


class Sessions:
    """This daemon's sessions, by id: the expired dropped, and the oldest past `limit`."""

    def __init__(
        self, clock: Callable[[], float], prefix: str, *, limit: int = MAX_SESSIONS
    ) -> None:
        self._clock = clock
        self._prefix = prefix
        self.limit = limit
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._serial = 0

    def new_id(self) -> str:
        self._serial += 1
        return f"{self._prefix}:{secrets.token_hex(8)}:{self._serial}"

    def add(
        self,
        sid: str,
        key: bytes | None,
        principal: Principal,
        commands: frozenset[int],
        duration: float,
    ) -> Session:
        now = self._clock()
        session = Session(sid, key, principal, commands, now + duration + _SLOP)
        self._by_id[sid] = session
        self._purge(now)
        while len(self._by_id) > self.limit:
            self._by_id.popitem(last=False)
        return session

    def _purge(self, now: float) -> None:
        """Drop expired sessions from the oldest end, a few per new one: with durations
        alike, the oldest expire first, so the dead ones do not pile up to the limit."""
        for _ in range(_PURGE_STEP):
            if not self._by_id:
                return
            sid, oldest = next(iter(self._by_id.items()))
            if oldest.expires > now:
                return
            del self._by_id[sid]

    def get(self, sid: str) -> Session | None:
        """The live session `sid`, None when unknown or expired."""
        session = self._by_id.get(sid)
        if session is None:
            return None
        if session.expires <= self._clock():
            del self._by_id[sid]
            return None
        return session

    def drop(self, sid: str) -> None:
        self._by_id.pop(sid, None)

    def __len__(self) -> int:
        return len(self._by_id)
