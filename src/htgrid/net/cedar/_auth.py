"""The arithmetic of CEDAR's security, with no I/O: ECDH, the TOKEN proof, FS's check.

- ECDH (`KeyExchange`): P-256; the public key travels as base64 of the uncompressed
  point; the session key is HKDF-SHA256(shared X, salt "htcondor", info "keygen").
- TOKEN (IDTOKENS, HTCondor's AKEP2 variant): the client sends its token without the
  signature (T = header.payload) and 256 random bytes ra; the server signs T itself with
  the key `kid` names, so only a holder of the real signature can answer. Both sides
  derive ka = HKDF-SHA256(signature, salt SEED_KA || T, info "master ka"); the server
  proves itself with hkt = HMAC-SHA1(ka, "a b" NUL ra rb), the client with
  hk = HMAC-SHA1(ka, a NUL rb).
- FS: the client makes a directory the server named (mode 0700, its own); its owner is
  who the client is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import pwd
import stat
from dataclasses import dataclass
from typing import Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from htgrid.net._errors import CedarError

__all__ = [
    "NONCE_BYTES",
    "FsProof",
    "KeyExchange",
    "token_hk",
    "token_hkt",
    "token_ka",
]

NONCE_BYTES: Final = 256  # AUTH_PW_KEY_LEN: ra and rb
_POINT_BYTES: Final = 65

# Condor_Auth_Passwd's fixed seed for ka (256 bytes; SHA-256 5402...9633).
_SEED_KA: Final = bytes.fromhex(
    "3e4a502047d5f4e5dc7c69bb5210cbb6167add8084f7dd9ef3ad2cca71d283dd"
    "114a4fbb7b1ee90adfa862c44304de5473a3172f735c2cbb6e775b5d40d39fac"
    "e873182523f9252b623be0d4b167a3a8040cacfee9ee3da02c0abbf4d9d8b11f"
    "89004c943923ce5d9508bb3f04bc66a3fa20a13a416c5e6f4e0d3187d45fc783"
    "35c5e485db2c5a3717970cc26e7b6b9d1965b47a67df77a31f22f08a6c0ba570"
    "97a21a9ca7c60424f72739ab5cb915a4185bd109828e35e42108ab851c08a3df"
    "fde0e3b06f3d3938cdad6df6ef9a6f6dc2cb74f0228512eb7a3d6823010684b0"
    "15c12ac3014c4f9f938e384dad1e3bd745ff8c141fd70b465ba8af5d1b98b4b1"
)


def _hkdf(ikm: bytes, salt: bytes, info: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt=salt, info=info).derive(ikm)


class KeyExchange:
    """This side's P-256 key for one new session."""

    def __init__(self) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())

    def public(self) -> str:
        """Base64 of the uncompressed point, as `ECDHPublicKey`."""
        point = self._key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        return base64.b64encode(point).decode("ascii")

    def session_key(self, peer: str) -> bytes:
        """The AES key both sides derive from the peer's `ECDHPublicKey`."""
        try:
            point = base64.b64decode(peer, validate=True)
        except (binascii.Error, ValueError):
            raise CedarError("the peer's ECDHPublicKey is not base64") from None
        if len(point) != _POINT_BYTES or point[0] != 4:
            raise CedarError(
                f"the peer's ECDHPublicKey is {len(point)} bytes, not an uncompressed P-256 point"
            )
        try:
            theirs = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        except ValueError as exc:
            raise CedarError(f"the peer's ECDHPublicKey is not on P-256: {exc}") from None
        shared = self._key.exchange(ec.ECDH(), theirs)
        return _hkdf(shared, b"htcondor", b"keygen")


def token_ka(signature: bytes, unsigned: bytes) -> bytes:
    """ka, from the token's raw signature and its header.payload text."""
    return _hkdf(signature, _SEED_KA + unsigned, b"master ka")


def token_hkt(ka: bytes, a: bytes, b: bytes, ra: bytes, rb: bytes) -> bytes:
    """The server's proof (HMAC-SHA1, as Condor_Auth_Passwd::hmac)."""
    return hmac.new(ka, a + b" " + b + b"\0" + ra + rb, hashlib.sha1).digest()


def token_hk(ka: bytes, a: bytes, rb: bytes) -> bytes:
    """The client's proof, which the server recomputes."""
    return hmac.new(ka, a + b"\0" + rb, hashlib.sha1).digest()


@dataclass(frozen=True, slots=True)
class FsProof:
    """What FS's directory proves: the owner of `path`, if it is a proper proof."""

    path: str

    def owner(self) -> str:
        """The user who made the directory; CedarError saying why it proves nothing."""
        try:
            st = os.lstat(self.path)
        except OSError as exc:
            raise CedarError(f"FS: {self.path}: {exc.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise CedarError(f"FS: {self.path} is not a directory")
        if stat.S_IMODE(st.st_mode) != 0o700:
            raise CedarError(f"FS: {self.path} has mode {stat.S_IMODE(st.st_mode):o}, not 700")
        if st.st_nlink not in (1, 2):
            raise CedarError(f"FS: {self.path} has {st.st_nlink} links")
        try:
            return pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            raise CedarError(f"FS: {self.path} is owned by uid {st.st_uid}, no user") from None
