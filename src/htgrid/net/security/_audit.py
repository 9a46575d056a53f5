"""The audit log (HTCondor-CE's SCHEDD_AUDIT_LOG): every change a caller asks for, accepted
or refused, with who asked, who they were mapped to, what, when, and why a refusal.

    2026-11-28T16:30:23Z accepted POST /v1/jobs from 127.0.0.1:40112 status=200
      method=SCITOKENS issuer="https://issuer.example" subject="pilot" jti="4f0c..."
      mapped="alice@users.htcondor.org" user="alice"
    2026-11-28T16:30:24Z refused POST /v1/jobs from 127.0.0.1:40114 status=403
      method=SCITOKENS issuer="https://issuer.example" subject="bad" jti="91ab..."
      mapped="-" reason="DeniedIdentity: bad@banned.htcondor.org ... DENY_WRITE ..."

(one line each; wrapped here). Values are quoted with `"` and `\\` escaped and control
characters dropped, cut at 300 characters, so a caller cannot forge a line; a token's
text is never written, only its claimed issuer, subject and id. The file is made 0600,
and one others may read is made 0600 again (a group-readable 0640 one is left so).
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from htgrid.net.security._authz import Principal
from htgrid.net.security._gatekeeper import Claimed

__all__ = ["AuditEvent", "AuditLog"]

_log = logging.getLogger("htgrid.net.security")
_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f]")


def _quoted(value: str) -> str:
    text = _UNPRINTABLE.sub("", value)[:300].replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


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
        when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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


class AuditLog:
    """Appends events to the audit log file, one line each (a write a line, O_APPEND)."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock

    def record(self, event: AuditEvent) -> None:
        """Write `event`; a log that cannot be written is said in the daemon's log, and
        the request goes on (HTCondor's audit log is a log, not a gate)."""
        data = event.line(self._clock()).encode("utf-8", "replace")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                if stat.S_IMODE(os.fstat(fd).st_mode) & 0o037:
                    os.fchmod(fd, 0o600)  # others (or the group, writing) must not read it
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            _log.error("cannot write the audit log %s: %s", self.path, exc)
