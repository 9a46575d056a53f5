"""A job's X.509 proxy across HTCondor-C: it goes to B with the input, the job there finds
it in X509_USER_PROXY, and a proxy renewed on A follows it there while it runs
(CONDOR_JOB_REFRESH_PROXY)."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest

from htgrid.client.x509 import make_proxy, read_proxy
from htgrid.queue import JobStatus
from htgrid.testing import PersonalPool, proxy_pem, wait_for
from htgrid.testing.myproxy import (
    MYPROXY_PORT,
    PKI,
    destroy_credential,
    new_credential,
    require_myproxy,
)

from ._pools import ad_of, remote_id, submit

# The job keeps what it first found, waits (at most 60 s) for the file to change, then
# keeps the new one: both come back with its output.
_SCRIPT = """cat in.txt
cp "$X509_USER_PROXY" first.pem
n=0
while cmp -s "$X509_USER_PROXY" first.pem && [ $n -lt 300 ]; do sleep 0.2; n=$((n + 1)); done
cp "$X509_USER_PROXY" second.pem
echo "$X509_USER_PROXY"
"""


@pytest.mark.timeout(300)
def test_the_proxy_goes_with_the_job_and_a_renewed_one_follows_it(
    pools: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    _renewed_proxy_follows(*pools, tmp_path, "local")


@pytest.mark.timeout(300)
def test_a_renewed_proxy_reaches_the_job_on_an_execute_node_of_b(
    pools_with_nodes: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    # B's schedd has the new file in its spool; its shadow hands it to the starter, which
    # puts it in the job's sandbox in place of the copy the input brought.
    _renewed_proxy_follows(*pools_with_nodes, tmp_path, "vanilla")


def _renewed_proxy_follows(a: PersonalPool, b: PersonalPool, tmp_path: Path, universe: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proxy = work / "x509up_test"
    first, renewed = proxy_pem(2_000_000_000), proxy_pem(2_100_000_000)
    proxy.write_bytes(first)
    proxy.chmod(0o600)
    job = submit(a, b, work, extra=f"x509userproxy = {proxy}\n", body=_SCRIPT, universe=universe)
    # Running on B: the job has its first proxy by now.
    wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.RUNNING,
        timeout=120,
        what="the job running on B",
    )
    remote = remote_id(ad_of(a, job) or {})
    wait_for(
        lambda: (ad := ad_of(b, remote)) and ad.get("JobStatus") == JobStatus.RUNNING,
        timeout=30,
        what="B's copy running",
    )

    proxy.write_bytes(renewed)
    later = proxy.stat().st_mtime + 5  # a change the grid manager cannot miss
    os.utime(proxy, (later, later))

    done = wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.COMPLETED and ad,
        timeout=120,
        what="the job to complete on A",
    )
    assert done["ExitCode"] == 0
    assert (work / "first.pem").read_bytes() == first
    assert (work / "second.pem").read_bytes() == renewed
    out = (work / "out.txt").read_text().splitlines()
    assert out[0] == "from A"
    # B's copy: in its spool (local universe) or the execute node's sandbox (vanilla).
    where = b.home / ("execute" if universe == "vanilla" else "spool")
    assert out[1].endswith("/x509up_test") and Path(out[1]).is_relative_to(where), out[1]
    assert proxy.read_bytes() == renewed  # not overwritten by what came back
    b_ad = ad_of(b, remote) or {}
    assert b_ad.get("x509UserProxyExpiration") == 2_100_000_000


# The job waits (at most 120 s) until its copy of the proxy outlives $1, then keeps it.
_RENEWED_SCRIPT = """n=0
while [ $n -lt 600 ]; do
  end=$(openssl x509 -noout -enddate -in "$X509_USER_PROXY" | cut -d= -f2)
  [ "$(date -d "$end" +%s)" -gt "$1" ] && break
  sleep 0.2; n=$((n + 1))
done
cp "$X509_USER_PROXY" renewed.pem
"""


@pytest.mark.timeout(300)
def test_a_proxy_renewed_from_myproxy_follows_the_job_to_b(
    pools: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    # The whole path: the password in the submit file kept by A's schedd, A's grid
    # manager renewing the proxy from the MyProxy server when it is due, the renewed file
    # sent to B (CONDOR_JOB_REFRESH_PROXY).
    require_myproxy()
    a, b = pools
    password = "c-" + secrets.token_hex(6)
    credential = new_credential("root", password)
    try:
        _renewed_from_myproxy_follows(a, b, tmp_path, credential, password)
    finally:
        destroy_credential("root", credential)


def _renewed_from_myproxy_follows(
    a: PersonalPool, b: PersonalPool, tmp_path: Path, credential: str, password: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proxy = work / "x509up_test"
    cert, key = (PKI / "user.pem").read_bytes(), (PKI / "user.key").read_bytes()
    proxy.write_bytes(make_proxy(cert, key, lifetime=3600))
    proxy.chmod(0o600)
    extra = (
        f"x509userproxy = {proxy}\narguments = {int(time.time()) + 2 * 3600 - 600}\n"
        f"MyProxyHost = localhost:{MYPROXY_PORT}\nMyProxyCredentialName = {credential}\n"
        f"MyProxyPassword = {password}\n"
        "MyProxyRefreshThreshold = 3000\nMyProxyNewProxyLifetime = 120\n"
    )
    job = submit(a, b, work, extra=extra, body=_RENEWED_SCRIPT)
    wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.RUNNING,
        timeout=120,
        what="the job running on B",
    )
    # The user puts a proxy with a minute left in its place: MyProxy renews it.
    proxy.write_bytes(make_proxy(cert, key, lifetime=60))
    done = wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.COMPLETED and ad,
        timeout=150,
        what="the job to complete on A",
    )
    assert done["ExitCode"] == 0
    renewed = read_proxy(work / "renewed.pem")
    assert renewed.identity == "/DC=org/DC=realgridtest/CN=Test User"
    assert renewed.expiration == read_proxy(proxy).expiration > time.time() + 3600
    b_ad = ad_of(b, remote_id(done)) or {}
    assert b_ad.get("x509UserProxyExpiration") == renewed.expiration
    assert "MyProxyPassword" not in done
    assert password not in (work / "job.log").read_text()
