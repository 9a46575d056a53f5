"""Two pools on one host: finding a schedd by name, and `-name`/`-pool` on the job commands.

Pool A's user works from A's environment (HTGRID_HOME = A) on pool B's queue, as
condor_q -name/-pool does: B's CA is trusted in A, the user holds a token of B.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.cli._common import current_user
from htgrid.collector import ScheddNotFound, locate_schedd
from htgrid.testing import PersonalPool, run_cli, wait_for

# The queue and a collector: the jobs stay idle (no execute node), which is all q needs.
DAEMONS = ("MASTER", "SCHEDD", "COLLECTOR")
HOST = socket.gethostname()


def _pool(home: Path, domain: str) -> PersonalPool:
    knobs = {"TRUST_DOMAIN": domain, "SCHEDD_NAME": f"{domain}@{HOST}", "SCHEDD_INTERVAL": 1}
    return PersonalPool(home, fsync=False, daemons=DAEMONS, config=knobs)


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PersonalPool, PersonalPool]]:
    root = tmp_path_factory.mktemp("two-pools")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HOME", str(root / "user"))  # no token of the real user's is seen
        env.delenv("HTGRID_TOKEN", raising=False)
        env.delenv("HTGRID_COLLECTOR_HOST", raising=False)
        with _pool(root / "a", "pool-a") as a, _pool(root / "b", "pool-b") as b:
            a.trust(b, user=current_user())
            for pool in (a, b):  # each schedd's ad, with its URL, is in its collector
                wait_for(lambda p=pool: _advertised(p), what="the schedd's ad")  # type: ignore[misc]
            yield a, b


def _advertised(pool: PersonalPool) -> bool:
    try:
        return locate_schedd(None, pool.collector, home=pool.home) == pool.url
    except ScheddNotFound:
        return False


def _in(directory: Path, home: Path, *argv: str) -> tuple[int, str, str]:
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        return run_cli(home, *argv)
    finally:
        os.chdir(cwd)


def test_locate_schedd_by_name_and_clear_errors(pools: tuple[PersonalPool, PersonalPool]) -> None:
    a, b = pools
    assert locate_schedd(f"pool-b@{HOST}", b.collector, home=a.home) == b.url
    assert locate_schedd(None, b.collector, home=a.home) == b.url
    with pytest.raises(ScheddNotFound, match=f"no schedd named 'nosuch' .*it has: pool-b@{HOST}"):
        locate_schedd("nosuch", b.collector, home=a.home)
    with pytest.raises(ScheddNotFound, match=r"no collector answers at 127\.0\.0\.1:1"):
        locate_schedd("x", "127.0.0.1:1", home=a.home)


def test_q_submit_hold_release_rm_on_another_pools_schedd(
    pools: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    a, b = pools
    where = ["-name", f"pool-b@{HOST}", "-pool", b.collector]
    (tmp_path / "job.sub").write_text("executable = /bin/true\nqueue 2\n")
    rc, out, err = _in(tmp_path, a.home, "submit", "job.sub", *where)
    assert rc == 0, err
    cluster = int(out.strip().rsplit(" ", 1)[-1].rstrip("."))
    with b.client() as schedd_b, a.client() as schedd_a:
        assert [ad["ProcId"] for ad in schedd_b.query(f"ClusterId == {cluster}")] == [0, 1]
        assert schedd_a.query() == []  # nothing went to the local queue

    rc, out, err = run_cli(a.home, "q", "-nobatch", *where)
    assert rc == 0, err
    assert f"-- Schedd: pool-b@{HOST} : <{b.url.removeprefix('https://')}>" in out
    assert {f"{cluster}.0", f"{cluster}.1"} <= {
        line.split()[0] for line in out.splitlines() if line
    }
    assert "Total for query: 2 jobs" in out

    rc, out, err = run_cli(a.home, "hold", str(cluster), *where)
    assert (rc, out.strip()) == (0, f"All jobs in cluster {cluster} have been held"), err
    with b.client() as schedd_b:
        assert {ad["JobStatus"] for ad in schedd_b.query(f"ClusterId == {cluster}")} == {5}
    rc, out, err = run_cli(a.home, "release", f"{cluster}.0", *where)
    assert (rc, out.strip()) == (0, f"Job {cluster}.0 released"), err
    rc, out, err = run_cli(a.home, "rm", str(cluster), "-pool", b.collector)  # -pool alone
    assert rc == 0, err
    with b.client() as schedd_b:
        wait_for(lambda: not schedd_b.query(f"ClusterId == {cluster}"), what="removed jobs gone")


def test_name_alone_looks_in_this_pools_collector(pools: tuple[PersonalPool, PersonalPool]) -> None:
    a, _ = pools
    rc, out, err = run_cli(a.home, "q", "-name", f"pool-a@{HOST}")
    assert rc == 0, err
    assert f"-- Schedd: pool-a@{HOST} : <{a.url.removeprefix('https://')}>" in out
    rc, _, err = run_cli(a.home, "q", "-name", "pool-z")
    assert rc == 1 and "no schedd named 'pool-z'" in err and f"pool-a@{HOST}" in err


def test_a_user_without_a_token_of_the_other_pool_is_told_so(
    pools: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    _, b = pools
    # A third home trusting B's CA but holding no token of B.
    c = tmp_path / "c"
    trusted = c / "etc" / "ca" / "trusted.d"
    trusted.mkdir(parents=True)
    shutil.copy(b.home / "etc" / "ca" / "ca.crt", trusted / "pool-b.crt")
    (c / "htgrid.conf").write_text("TRUST_DOMAIN = pool-c\n")
    rc, out, err = run_cli(c, "q", "-name", f"pool-b@{HOST}", "-pool", b.collector)
    assert rc == 1, out
    assert "'pool-b'" in err and "token" in err
