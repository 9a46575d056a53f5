"""The audit log (HTCondor-CE's SCHEDD_AUDIT_LOG): every change a caller asks for, accepted
or refused, with who asked, who they were mapped to, what, when, and why a refusal.

    2026-11-28T16:30:23Z accepted POST /v1/jobs from 127.0.0.1:40112 status=200
      method=SCITOKENS issuer="https://issuer.example" subject="pilot" jti="4f0c..."
      mapped="alice@users.htcondor.org" user="alice"
    2026-11-28T16:30:24Z refused POST /v1/jobs from 127.0.0.1:40114 status=403
      method=SCITOKENS issuer="https://issuer.example" subject="bad" jti="91ab..."
      mapped="-" reason="DeniedIdentity: bad@banned.htcondor.org ... DENY_WRITE ..."

(one line each; wrapped here). The tokens a daemon mints for its callers (annex tokens)
and revokes are lines of their own (`AuditGrant`: granted|revoked, what, for whom, until
when, their ids). Values are quoted with `"` and `\\` escaped and control
characters dropped, cut at 300 characters, so a caller cannot forge a line; a token's
text is never written, only its claimed issuer, subject and id. The file is made 0600,
and one others may read is made 0600 again (a group-readable 0640 one is left so).

As HTCondor rotates it (MAX_SCHEDD_AUDIT_LOG, MAX_NUM_SCHEDD_AUDIT_LOG; HTCondor-CE
keeps 90 daily files): past `max_age` seconds since its first line, or `max_bytes`, the
file is renamed `AuditLog.<YYYYmmddTHHMMSS>` and a new one begun; the oldest beyond
`keep` are deleted.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from htgrid.client import ALGORITHM, TOKEN_ALGORITHMS, NotAToken, take_apart
from htgrid.net.security._authz import Principal

__all__ = [
    "AuditEvent",
    "AuditGrant",
    "AuditLog",
    "Claimed",
    "Rotation",
    "claimed",
    "parse_rotation",
]

_log = logging.getLogger("htgrid.net.security")
_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f]")
_STAMP: Final = "%Y-%m-%dT%H:%M:%SZ"
_SUFFIX: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_ROTATED: Final = re.compile(r"\.\d{8}T\d{6}(\.\d+)?")


@dataclass(frozen=True, slots=True)
class Rotation:
    """When the audit log is rotated, and how many old ones are kept."""

    max_age: float | None = 86400.0  # seconds since its first line (None: never by age)
    max_bytes: int | None = None  # (None: never by size)
    keep: int = 90


def parse_rotation(max_log: str, keep: int) -> Rotation:
    """MAX_<SUBSYS>_AUDIT_LOG as HTCondor reads it: bytes (`10000000`) or a time with
    a unit (`1d`, `12h`, `30m`, `3600s`); 0 never rotates. ValueError names a bad one."""
    text = max_log.strip().lower()
    try:
        if text and text[-1] in _SUFFIX:
            seconds = float(text[:-1]) * _SUFFIX[text[-1]]
            return Rotation(seconds if seconds > 0 else None, None, keep)
        size = int(text)
    except ValueError:
        raise ValueError(f"{max_log!r} is neither a size in bytes nor a time (1d, 12h)") from None
    return Rotation(None, size if size > 0 else None, keep)


def _quoted(value: str) -> str:
    text = _UNPRINTABLE.sub("", value)[:300].replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


@dataclass(frozen=True, slots=True)
class Claimed:
    """Who a token says its holder is, read without believing it (for the audit log)."""

    method: str
    issuer: str
    subject: str
    token_id: str


def claimed(token: str) -> Claimed | None:
    """What `token` claims of itself, if it can be read at all (never raises)."""
    try:
        header, claims, _, _ = take_apart(token, TOKEN_ALGORITHMS)
    except NotAToken:
        return None

    def text(name: str) -> str:
        value = claims.get(name)
        return value if isinstance(value, str) else ""

    method = "IDTOKENS" if header.get("alg") == ALGORITHM else "SCITOKENS"
    return Claimed(method, text("iss"), text("sub"), text("jti"))


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One request decided: accepted (with the principal) or refused (with the reason)."""

    accepted: bool
    request: str  # "POST /v1/jobs"
    client: str  # "127.0.0.1:40112"
    status: int | None
    principal: Principal | None = None
    claimed: Claimed | None = None  # what a refused token said of itself
    reason: str | None = None

    def line(self, at: float) -> str:
        """The event as one line of the audit log."""
        when = datetime.fromtimestamp(at, UTC).strftime(_STAMP)
        words = [
            when,
            "accepted" if self.accepted else "refused",
            _UNPRINTABLE.sub("", self.request)[:300],
            "from",
            _UNPRINTABLE.sub("", self.client)[:100],
            f"status={self.status if self.status is not None else '-'}",
        ]
        p, c = self.principal, self.claimed
        if p is not None:
            words += [
                f"method={p.method}",
                f"issuer={_quoted(p.issuer)}",
                f"subject={_quoted(p.subject)}",
                f"jti={_quoted(p.token_id)}",
                f"mapped={_quoted(p.name)}",
                f"user={_quoted(p.user)}",
            ]
        elif c is not None:
            words += [
                f"method={c.method}",
                f"issuer={_quoted(c.issuer)}",
                f"subject={_quoted(c.subject)}",
                f"jti={_quoted(c.token_id)}",
                'mapped="-"',
            ]
        else:
            words.append("method=- (no token)")
        if self.reason is not None:
            words.append(f"reason={_quoted(self.reason)}")
        return " ".join(words) + "\n"


@dataclass(frozen=True, slots=True)
class AuditGrant:
    """A token the daemon minted for a caller, or revoked (an annex's): who, for what,
    until when, its id; never its text.

        2026-11-28T16:30:25Z granted annex-token annex="ua" user="alice"
          identity="ua.annex@pool.example" authz="ADVERTISE_STARTD" jti="4f0c..."
          expires=2026-11-28T17:00:25Z
    """

    action: str  # "granted" or "revoked"
    kind: str  # "annex-token"
    annex: str
    user: str  # who asked (the caller's mapped name)
    identity: str = ""  # the token's subject
    authz: str = ""
    token_ids: tuple[str, ...] = ()
    expires: float | None = None
    owner: str = ""  # a revocation's annex's owner, when another (an administrator) asked

    def line(self, at: float) -> str:
        """The grant as one line of the audit log."""
        words = [
            datetime.fromtimestamp(at, UTC).strftime(_STAMP),
            _UNPRINTABLE.sub("", self.action)[:40],
            _UNPRINTABLE.sub("", self.kind)[:40],
            f"annex={_quoted(self.annex)}",
            f"user={_quoted(self.user)}",
        ]
        if self.owner:
            words.append(f"owner={_quoted(self.owner)}")
        if self.identity:
            words.append(f"identity={_quoted(self.identity)}")
        if self.authz:
            words.append(f"authz={_quoted(self.authz)}")
        words.append(f"jti={_quoted(' '.join(self.token_ids))}")
        if self.expires is not None:
            stamp = datetime.fromtimestamp(self.expires, UTC).strftime(_STAMP)
            words.append(f"expires={stamp}")
        return " ".join(words) + "\n"


class AuditLog:
    """Appends events to the audit log file, one line each (a write a line, O_APPEND)."""

    def __init__(
        self,
        path: Path,
        *,
        rotation: Rotation | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.rotation = rotation if rotation is not None else Rotation()
        self._clock = clock
        self._lock = threading.Lock()  # records come from worker threads

    def record(self, event: AuditEvent | AuditGrant) -> None:
        """Write `event`; a log that cannot be written is said in the daemon's log, and
        the request goes on (HTCondor's audit log is a log, not a gate)."""
        now = self._clock()
        data = event.line(now).encode("utf-8", "replace")
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._rotate_if_due(now, len(data))
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                fd = os.open(self.path, flags, 0o600)
                try:
                    if stat.S_IMODE(os.fstat(fd).st_mode) & 0o037:
                        os.fchmod(fd, 0o600)  # others (or the group, writing) must not read it
                    os.write(fd, data)
                finally:
                    os.close(fd)
            except OSError as exc:
                _log.error("cannot write the audit log %s: %s", self.path, exc)

    def _rotate_if_due(self, now: float, adding: int) -> None:
        r = self.rotation
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0:
            return
        too_big = r.max_bytes is not None and size + adding > r.max_bytes
        born = self._first_time()
        too_old = r.max_age is not None and born is not None and now - born >= r.max_age
        if not (too_big or too_old):
            return
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S")
        target = self.path.with_name(f"{self.path.name}.{stamp}")
        n = 0
        while target.exists():  # two rotations within a second
            n += 1
            target = self.path.with_name(f"{self.path.name}.{stamp}.{n}")
        os.rename(self.path, target)
        old = sorted(
            p
            for p in self.path.parent.iterdir()
            if p.name.startswith(self.path.name)
            and _ROTATED.fullmatch(p.name[len(self.path.name) :])
        )
        for stale in old[: max(0, len(old) - r.keep)]:
            stale.unlink(missing_ok=True)

    def _first_time(self) -> float | None:
        try:
            with open(self.path, "rb") as f:
                head = f.read(20).decode("ascii", "replace")
            return datetime.strptime(head, _STAMP).replace(tzinfo=UTC).timestamp()
        except (OSError, ValueError):
            return None
