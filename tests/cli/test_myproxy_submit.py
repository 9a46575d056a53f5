"""`htgrid submit -p`: the MyProxy password is read from stdin (asked on a terminal without
echo), sent with the jobs, and kept by the schedd apart from the queue (0600, for the grid
manager), as HTCondor's schedd kept SPOOL/mpp.<cluster>.<proc>: never in the job ad, the
queue's files or the daemon's logs, never editable, gone once the job has left."""

from __future__ import annotations

import io
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.cli import main
from htgrid.errors import HTGridError
from htgrid.net import Jobs
from htgrid.queue import JobId
from htgrid.testing import PersonalPool, run_cli, wait_for

PASSWORD = "mp-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    with PersonalPool(tmp_path_factory.mktemp("pool"), periodic_interval=0.3, fsync=False) as p:
        yield p


def _submit(pool: PersonalPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobId:
    sub = tmp_path / "job.sub"
    sub.write_text(
        "universe = grid\ngrid_resource = batch fork\nexecutable = /bin/true\n"
        "MyProxyHost = myproxy.example.org:7512\nMyProxyCredentialName = grid\n"
        "MyProxyRefreshThreshold = 600\nMyProxyNewProxyLifetime = 2 * 60\nqueue\n"
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    status, out, err = run_cli(pool.home, "submit", "-p", str(sub))
    assert status == 0, err
    assert PASSWORD not in out + err
    cluster = int(out.rsplit("cluster ", 1)[1].rstrip(".\n"))
    return JobId(cluster, 0)


def test_the_password_is_kept_apart_from_the_queue_and_never_shown(
    pool: PersonalPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _submit(pool, tmp_path, monkeypatch)
    with pool.client() as schedd:
        ad = schedd.get(job)
        assert "MyProxyPassword" not in ad
        assert ad["MyProxyPasswordExists"] is True
        assert ad["MyProxyHost"] == "myproxy.example.org:7512"
        assert ad["MyProxyCredentialName"] == "grid"
        assert ad["MyProxyRefreshThreshold"] == 600
        assert ad.eval("MyProxyNewProxyLifetime") == 120
        # condor_qedit could not set it either (HTCondor 9.12's schedd refused it).
        with pytest.raises(HTGridError, match="MyProxyPassword"):
            schedd.edit(Jobs.of([job]), {"MyProxyPassword": '"guess"'})
    kept = pool.home / "spool" / "myproxy" / f"{job.cluster}.{job.proc}"
    assert kept.read_text() == PASSWORD
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    for path in pool.home.rglob("*"):
        if path.is_file() and path != kept:
            assert PASSWORD.encode() not in path.read_bytes(), path
    # Gone with the job (the daemon's periodic sweep of the spool).
    assert run_cli(pool.home, "rm", str(job))[0] == 0
    wait_for(lambda: not kept.exists(), 20, what="the password to be removed")


def test_a_password_given_on_the_command_line_is_refused_unseen(
    pool: PersonalPool, tmp_path: Path
) -> None:
    sub = tmp_path / "job.sub"
    sub.write_text("executable = /bin/true\nqueue\n")
    # condor_submit's form: the password on the command line, where `ps` shows it.
    status, out, err = run_cli(pool.home, "submit", "-password", PASSWORD, str(sub))
    assert status == 2
    assert "takes no value" in err
    assert PASSWORD not in out + err


def test_on_a_terminal_the_password_is_asked_without_echo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def getpass(prompt: str = "") -> str:  # getpass turns the terminal's echo off
        asked.append(prompt)
        return PASSWORD

    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("getpass.getpass", getpass)
    sub = tmp_path / "job.sub"
    sub.write_text("universe = grid\ngrid_resource = batch fork\nexecutable = /bin/true\nqueue\n")
    assert main(["submit", "-p", str(sub), "-dry-run", "-"]) == 0
    out, err = capsys.readouterr()
    assert asked == ["Enter MyProxy password: "]
    assert PASSWORD not in out + err  # not in the ads a dry run prints either
