"""`htgrid trust add|list|remove`: which other pools' CAs this pool's clients trust.

    $ htgrid trust add site.example /path/to/site/etc/ca/ca.crt
    Trusting site.example: CN=htgrid pool CA, O=htgrid (SHA-256 3F:1A:...), until 2036-11-19.
    $ htgrid trust list
    NAME          EXPIRES     SHA-256                          FILE
    (this pool)   2036-11-18  8C:02:...                        /home/alice/.htgrid/etc/ca/ca.crt
    site.example  2036-11-19  3F:1A:...                        /home/alice/.htgrid/etc/ca/trusted.d/site.example.crt
    $ htgrid trust remove site.example

htgrid's own command: HTCondor has none (its administrators edit the file that
AUTH_SSL_CLIENT_CAFILE names). A trusted CA is a file in $HTGRID_HOME/etc/ca/trusted.d
(`htgrid config_val AUTH_SSL_CLIENT_CADIR`); clients of this pool then accept servers
whose certificate that CA signed (HTCondor-C, `-name/-pool`). Another pool's CA is its
`htgrid config_val TRUST_DOMAIN_CAFILE`.

Exit status: 0 done, 1 no trusted CA of that name (remove), 2 bad input (a name that
cannot name a file, a file that is not a CA certificate).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from htgrid.cli._common import EXIT_NO, EXIT_OK, EXIT_USAGE, is_terminal
from htgrid.cli._table import Column, print_table
from htgrid.errors import UsageError
from htgrid.net.security import SecurityConfig

__all__ = ["CACertificate", "read_ca_file", "register"]

_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}")
_SUFFIXES: Final = (".crt", ".pem")  # what trusted_ca_files reads


@dataclass(frozen=True, slots=True)
class CACertificate:
    """What `trust` shows of a CA certificate."""

    subject: str
    fingerprint: str  # SHA-256, colon-separated hex as openssl prints it
    not_after: datetime
    pem: bytes


def register(commands: Any) -> None:
    """Add `trust` and its subcommands to the top-level parser."""
    trust = commands.add_parser(
        "trust",
        help="trust other pools' CAs (htgrid's own; for HTCondor-C and -pool)",
        description=(
            "Manage the CA certificates of other pools that this pool's clients trust "
            "($HTGRID_HOME/etc/ca/trusted.d). htgrid's own command: HTCondor has none "
            "(its administrators edit the file AUTH_SSL_CLIENT_CAFILE names)."
        ),
    )
    verbs = trust.add_subparsers(dest="verb", metavar="VERB")
    add = verbs.add_parser(
        "add",
        help="trust a pool's CA certificate",
        description=(
            "Check that CA_FILE holds CA certificates (PEM) and copy it to "
            "$HTGRID_HOME/etc/ca/trusted.d/NAME.crt. The other pool's CA file is what "
            "`htgrid config_val TRUST_DOMAIN_CAFILE` prints there."
        ),
    )
    add.add_argument("name", metavar="NAME", help="a name for it, e.g. the pool's trust domain")
    add.add_argument("ca_file", metavar="CA_FILE", type=Path, help="the CA certificate (PEM)")
    add.set_defaults(handler=_add)
    listing = verbs.add_parser(
        "list",
        help="show the trusted CAs",
        description="Show this pool's CA and the other pools' CAs it trusts.",
    )
    listing.set_defaults(handler=_list)
    remove = verbs.add_parser(
        "remove",
        help="stop trusting a pool's CA",
        description="Remove $HTGRID_HOME/etc/ca/trusted.d/NAME.crt (or NAME.pem).",
    )
    remove.add_argument("name", metavar="NAME")
    remove.set_defaults(handler=_remove)
    trust.set_defaults(handler=lambda _: _usage(trust))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _trusted_dir() -> Path:
    return SecurityConfig.load().trusted_ca_dir


def read_ca_file(path: Path) -> list[CACertificate]:
    """The CA certificates in a PEM file (UsageError naming the file and what is wrong)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise UsageError(f"{path}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise UsageError(f"{path}: not a readable PEM certificate: {exc}") from None
    found = []
    for number, cert in enumerate(certs, 1):
        which = f"{path}: certificate {number} ({cert.subject.rfc4514_string() or 'no subject'})"
        try:
            basic = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            raise UsageError(f"{which} is not a CA certificate (no basicConstraints)") from None
        except ValueError as exc:  # a malformed extension
            raise UsageError(f"{which} has unreadable extensions: {exc}") from None
        if not basic.ca:
            raise UsageError(
                f"{which} is not a CA certificate (basicConstraints CA:FALSE); give the "
                "pool's CA (its etc/ca/ca.crt), not a server certificate"
            )
        if cert.not_valid_after_utc <= datetime.now(UTC):
            raise UsageError(f"{which} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
        found.append(_describe(cert))
    return found


def _describe(cert: x509.Certificate) -> CACertificate:
    digest = cert.fingerprint(hashes.SHA256()).hex().upper()
    return CACertificate(
        cert.subject.rfc4514_string(),
        ":".join(digest[i : i + 2] for i in range(0, len(digest), 2)),
        cert.not_valid_after_utc,
        cert.public_bytes(serialization.Encoding.PEM),
    )


def _check_name(name: str) -> str:
    if not _NAME.fullmatch(name) or name in {".", ".."}:
        raise UsageError(
            f"{name!r} cannot name a trusted CA: use letters, digits, '.', '_', '-' or '@' "
            "(e.g. the pool's trust domain)"
        )
    return name


def _add(args: argparse.Namespace) -> int:
    name = _check_name(args.name)
    certs = read_ca_file(args.ca_file)
    directory = _trusted_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{name}.crt"
    replaced = target.exists()
    _write_atomically(target, b"".join(c.pem for c in certs))
    for other in _SUFFIXES:  # one file per name, or remove would leave one trusted
        if other != ".crt":
            (directory / f"{name}{other}").unlink(missing_ok=True)
    verb = "Now trusting" if replaced else "Trusting"
    for cert in certs:
        print(
            f"{verb} {name}: {cert.subject} (SHA-256 {cert.fingerprint}), until "
            f"{cert.not_after:%Y-%m-%d}."
        )
    if replaced:
        print(f"(replaced the CA trusted before as {name})")
    return EXIT_OK


def _write_atomically(target: Path, data: bytes) -> None:
    # A client reading trusted.d meanwhile sees the old file or the new, never half of one;
    # the temporary's suffix is not one trusted_ca_files reads.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _entries(directory: Path) -> list[Path]:
    try:
        files = sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    return [p for p in files if p.suffix in _SUFFIXES and p.is_file()]


def _list(args: argparse.Namespace) -> int:
    config = SecurityConfig.load()
    rows: list[list[str]] = []
    problems = []
    own = config.ca_dir / "ca.crt"
    files = ([("(this pool)", own)] if own.exists() else []) + [
        (p.stem, p) for p in _entries(config.trusted_ca_dir)
    ]
    for name, path in files:
        try:
            certs = read_ca_file(path)
        except UsageError as exc:
            problems.append(str(exc))
            continue
        rows.extend([name, f"{c.not_after:%Y-%m-%d}", c.fingerprint, str(path)] for c in certs)
    columns = [Column("NAME"), Column("EXPIRES"), Column("SHA-256"), Column("FILE")]
    print_table(columns, rows, rich=is_terminal())
    for problem in problems:
        print(f"htgrid trust list: {problem}", file=sys.stderr)
    return EXIT_USAGE if problems else EXIT_OK


def _remove(args: argparse.Namespace) -> int:
    name = _check_name(args.name)
    directory = _trusted_dir()
    removed = False
    for suffix in _SUFFIXES:
        path = directory / f"{name}{suffix}"
        if path.exists():
            path.unlink()
            removed = True
            print(f"No longer trusting {name} ({path} removed).")
    if not removed:
        have = ", ".join(p.stem for p in _entries(directory)) or "none"
        print(
            f"htgrid trust remove: no trusted CA named {name} in {directory}; it has: {have}",
            file=sys.stderr,
        )
        return EXIT_NO
    return EXIT_OK
