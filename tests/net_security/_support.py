"""What the security tests share: a clock they move, and hand-made JWTs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC, fixed so expiry reads plainly


@dataclass
class FakeClock:
    """Wall-clock seconds that move only when told."""

    now: float = NOW

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A token's header, claims and signature text, decoded without any checking."""
    head, body, sig = token.split(".")
    return (
        json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))),
        json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))),
        sig,
    )


def sign(header: dict[str, Any], claims: dict[str, Any], key: bytes) -> str:
    """A JWT made by hand: whatever header, HMAC-SHA256 over it with `key`."""
    head = b64(json.dumps(header).encode())
    body = b64(json.dumps(claims).encode())
    mac = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"
