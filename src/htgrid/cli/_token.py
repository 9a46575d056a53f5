"""`htgrid token create|list|revoke`: condor_token_create and condor_token_list, and revocation.

    $ htgrid token create -identity alice@example.org -authz READ -lifetime 3600
    eyJhbGciOiJIUzI1NiIsImtpZCI6IlBPT0wifQ.eyJleHAiOjE3...
    $ htgrid token create -identity alice@example.org -token alice     # ~/.htgrid/tokens.d/alice
    $ htgrid token create -identity alice@site.example -token laptop/etc/tokens.d/site
    $ htgrid token list
    Header: {"alg":"HS256","kid":"POOL"} Payload: {"iat":...,"iss":"submit","jti":"5f0c...",\
"sub":"alice@example.org"} File: /home/alice/.htgrid/tokens.d/alice
    $ htgrid token revoke -jti 5f0c...          # or: -token alice
    Token 5f0c... revoked.

`create` signs with the pool's key in $HTGRID_HOME/etc/passwords.d (POOL, made on first
use; only whoever can read it can mint tokens); the issuer is the pool's trust domain
(TRUST_DOMAIN in $HTGRID_HOME/htgrid.conf, else $HTGRID_TRUST_DOMAIN, else this host's
name). `-token FILE` names a bare file in ~/.htgrid/tokens.d, or any path with a `/`
(relative to the current directory, or absolute); the file is written readable by its
owner only (mode 0600), and a directory made for it is 0700. `revoke` adds token ids to
$HTGRID_HOME/etc/tokens.revoked, which the daemons read on the next request.

Exit status: 0 done, 2 bad usage or input (an unknown authorization or key, a file
that is not a token).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from htgrid.cli._common import EXIT_OK, EXIT_USAGE
from htgrid.client import read_token_file, scan_tokens, user_token_dir
from htgrid.errors import UsageError
from htgrid.net.security import (
    AUTHORIZATIONS,
    RevocationList,
    SecurityConfig,
    TokenIssuer,
    save_token,
    token_path,
)

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add `token` and its subcommands to the top-level parser."""
    token = commands.add_parser(
        "token",
        help="create, list and revoke tokens (condor_token_*)",
        description="Create, list and revoke the pool's authentication tokens.",
    )
    verbs = token.add_subparsers(dest="verb", metavar="VERB")

    create = verbs.add_parser(
        "create",
        help="sign a token with the pool's key (condor_token_create)",
        description="Sign a token for an identity with the pool's signing key.",
    )
    create.add_argument("-identity", required=True, metavar="USER[@DOMAIN]")
    create.add_argument(
        "-authz",
        action="append",
        default=[],
        metavar="AUTHZ",
        help=f"limit the token to this authorization (repeatable): {', '.join(sorted(AUTHORIZATIONS))}",
    )
    create.add_argument("-lifetime", type=int, metavar="SECONDS", help="expire after this long")
    create.add_argument("-key", default="POOL", metavar="NAME", help="the signing key (POOL)")
    create.add_argument(
        "-token",
        metavar="FILE",
        help="write to FILE (mode 0600) instead of stdout: a bare name is in "
        "~/.htgrid/tokens.d, a path with a '/' is relative to here or absolute",
    )
    create.set_defaults(handler=_create)

    listing = verbs.add_parser(
        "list",
        help="show the tokens in ~/.htgrid/tokens.d (condor_token_list)",
        description="Show the header and claims of each token in ~/.htgrid/tokens.d.",
    )
    listing.set_defaults(handler=_list)

    revoke = verbs.add_parser(
        "revoke",
        help="refuse a token from now on",
        description="Add tokens to the pool's revocation list ($HTGRID_HOME/etc/tokens.revoked).",
    )
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("-jti", metavar="ID", help="the token's id (its jti claim)")
    which.add_argument(
        "-token", metavar="FILE", help="the tokens in this file (named as for create)"
    )
    revoke.set_defaults(handler=_revoke)
    token.set_defaults(handler=lambda _: _usage(token))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _token_file(name: str) -> Path:
    """Where `-token NAME` means: a bare name in ~/.htgrid/tokens.d (condor_token_create's
    rule), a path with a `/` (or `~`) as the shell would read it."""
    if "/" in name or name.startswith("~"):
        path = Path(name).expanduser().absolute()
        if path.is_dir():
            raise UsageError(f"-token {name}: {path} is a directory; name a file in it")
        return path
    try:
        return token_path(name)
    except ValueError as exc:
        raise UsageError(f"-token {exc}") from None


def _create(args: argparse.Namespace) -> int:
    if args.lifetime is not None and args.lifetime < 0:
        raise UsageError("-lifetime must not be negative")
    path = _token_file(args.token) if args.token else None
    try:
        token = TokenIssuer(SecurityConfig.load()).create(
            args.identity, authz=args.authz, lifetime=args.lifetime, key=args.key
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if path is None:
        print(token)
    else:
        save_token(path, token)
    return EXIT_OK


def _json(obj: Mapping[str, Any]) -> str:
    # condor_token_list's form: compact, sorted, with "/" escaped as its JSON writer does.
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).replace("/", "\\/")


def _list(args: argparse.Namespace) -> int:
    tokens, problems = scan_tokens([user_token_dir()])
    for stored in tokens:
        print(f"Header: {_json(stored.header)} Payload: {_json(stored.claims)} File: {stored.path}")
    for problem in problems:
        print(f"htgrid token list: {problem}", file=sys.stderr)
    return EXIT_USAGE if problems else EXIT_OK


def _revoke(args: argparse.Namespace) -> int:
    revoked = RevocationList(SecurityConfig.load().revocation_file)
    if args.jti is not None:
        targets = [(args.jti, "")]
    else:
        path = _token_file(args.token)
        tokens, problems = read_token_file(path)
        if problems or not tokens:
            raise UsageError(str(problems[0]) if problems else f"{path}: holds no token")
        targets = []
        for stored in tokens:
            if stored.token_id is None:
                raise UsageError(f"{path}:{stored.line}: the token has no jti to revoke")
            note = f"sub={stored.claims.get('sub')} iss={stored.issuer} file={path}"
            targets.append((stored.token_id, note))
    for jti, note in targets:
        added = revoked.add(jti, note)
        print(f"Token {jti} revoked." if added else f"Token {jti} was already revoked.")
    return EXIT_OK
