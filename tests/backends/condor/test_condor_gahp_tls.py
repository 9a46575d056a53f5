"""The condor GAHP trusts the remote pools' CAs it is given, and no other."""

from __future__ import annotations

import ssl
from pathlib import Path

from htgrid.backends.condor._http import tls_context
from htgrid.testing.collector import pool_home


def test_given_pool_cas_the_gahp_trusts_only_those(tmp_path: Path) -> None:
    cas = [str(pool_home(tmp_path / d, d) / "etc" / "ca" / "ca.crt") for d in ("b", "c")]

    context = tls_context(cas)

    subjects = [c["subject"] for c in context.get_ca_certs()]
    assert len(subjects) == 2, subjects  # not the system's CAs besides
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_given_no_ca_the_gahp_trusts_the_systems() -> None:
    assert tls_context([]).verify_mode is ssl.CERT_REQUIRED
