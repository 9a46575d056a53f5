"""Where a request goes and as whom: the service URL and the two key files.

Every EC2 GAHP request names `<service-url> <access-key-file> <secret-key-file>`. The files
hold just the key (surrounding white space is dropped, as HTCondor's `trim` does); both
names may be the literal `FROM INSTANCE`, meaning the credentials of the machine's IAM
role. Files are read fresh for every request but only re-read when their modification
time, size or inode changed, so a rotated key is picked up at once.

The region is taken from the host name, `ec2.<region>.amazonaws.com`, as HTCondor's
signer does; any other host (a private cloud, moto on loopback) uses the default region.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.parse
from dataclasses import dataclass, field

from htgrid.backends.ec2._errors import Ec2RequestError

__all__ = ["USE_INSTANCE_ROLE", "Account", "KeyFiles", "endpoint_of"]

#: HTCondor's magic key file name: use the instance's IAM role credentials.
USE_INSTANCE_ROLE = "FROM INSTANCE"

_AWS_HOST = re.compile(r"ec2\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?", re.IGNORECASE)
# euca3[s] are Eucalyptus 3 spellings of http[s]; HTCondor posts to http[s] for them.
_SCHEMES = {"http": "http", "https": "https", "euca3": "http", "euca3s": "https"}


@dataclass(frozen=True, slots=True)
class Account:
    """One EC2 endpoint and the credentials used there: the key of a boto3 client."""

    endpoint_url: str
    region: str
    #: None for both: the instance's IAM role.
    access_key: str | None
    secret_key: str | None = field(repr=False)


def endpoint_of(service_url: str, default_region: str) -> tuple[str, str]:
    """(endpoint URL for boto3, region) for a GAHP service URL."""
    try:
        parts = urllib.parse.urlsplit(service_url)
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or not parts.scheme or not host:
        raise Ec2RequestError(
            "E_INVALID_SERVICE_URL", f"Failed to parse service URL {service_url!r}."
        )
    scheme = parts.scheme.lower()
    if scheme == "x509":
        raise Ec2RequestError(
            "E_INVALID_SERVICE_URL",
            "x509:// service URLs (X.509 authentication) are not supported.",
        )
    if scheme not in _SCHEMES:
        raise Ec2RequestError(
            "E_INVALID_SERVICE_URL", "Service URL not of a known protocol (http[s]|euca3[s])."
        )
    url = urllib.parse.urlunsplit((_SCHEMES[scheme], parts.netloc, parts.path, "", ""))
    match = _AWS_HOST.fullmatch(host)
    if match is not None:
        return url, match.group(1).lower()
    if host.lower() in ("ec2.amazonaws.com", "amazonaws.com"):
        return url, "us-east-1"
    return url, default_region


class KeyFiles:
    """Reads key files, re-reading one only when it changed on disk. Thread-safe."""

    def __init__(self, default_region: str) -> None:
        self._default_region = default_region
        self._cache: dict[str, tuple[tuple[int, int, int], str]] = {}
        self._lock = threading.Lock()

    def account(self, service_url: str, access_key_file: str, secret_key_file: str) -> Account:
        """The Account a request's three common arguments name."""
        url, region = endpoint_of(service_url, self._default_region)
        if USE_INSTANCE_ROLE in (access_key_file, secret_key_file):
            return Account(url, region, None, None)
        access = self.read(access_key_file, "accesskey")
        secret = self.read(secret_key_file, "secretkey")
        return Account(url, region, access, secret)

    def read(self, path: str, what: str = "key") -> str:
        """The key in `path`, stripped; raises Ec2RequestError(E_FILE_IO)."""
        try:
            info = os.stat(path)
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
            with self._lock:
                cached = self._cache.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            with open(path, "rb") as handle:
                key = handle.read(64 * 1024).decode("utf-8", "replace").strip()
        except OSError as err:
            reason = err.strerror or str(err)
            raise Ec2RequestError(
                "E_FILE_IO", f"Unable to read from {what} file '{path}': {reason}."
            ) from err
        if not key:
            raise Ec2RequestError("E_FILE_IO", f"The {what} file '{path}' is empty.")
        with self._lock:
            # The stamp taken before reading: a change during the read shows next time.
            self._cache[path] = (stamp, key)
        return key
