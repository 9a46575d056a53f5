"""What a script setting up HTCondor-C between two pools uses: `config_val`, `trust`,
`token create -token PATH`, `history -name/-pool` and what `up` says of the collector.

Pool A (the laptop) runs a queue and no collector; pool B (the site) a queue and a
collector on a free port. Both are started with `htgrid up`, as a user would.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509

from htgrid.cli._common import current_user
from htgrid.collector import ScheddNotFound, locate_schedd
from htgrid.pool import KNOBS
from htgrid.testing import PersonalPool, run_cli, wait_for

HOST = socket.gethostname()
SITE = f"site@{HOST}"


@dataclass
class Pools:
    laptop: PersonalPool
    site: PersonalPool
    laptop_up: str  # what `htgrid up` printed
    site_up: str


def _up(pool: PersonalPool) -> str:
    rc, out, err = run_cli(pool.home, "up")
    assert rc == 0, err
    pool.start()  # already running: PersonalPool learns its pid, for the teardown
    return out


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pools]:
    root = tmp_path_factory.mktemp("pool-tools")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HOME", str(root / "user"))  # the user's token directory is scratch
        for name in ("HTGRID_TOKEN", "HTGRID_COLLECTOR_HOST", "HTGRID_TRUST_DOMAIN"):
            env.delenv(name, raising=False)
        laptop = PersonalPool(
            root / "laptop", fsync=False, config={"TRUST_DOMAIN": "laptop.example"}
        )
        site = PersonalPool(
            root / "site",
            fsync=False,
            daemons=("MASTER", "SCHEDD", "COLLECTOR"),
            config={"TRUST_DOMAIN": "site.example", "SCHEDD_NAME": SITE, "SCHEDD_INTERVAL": 1},
        )
        laptop_up, site_up = _up(laptop), _up(site)
        with laptop, site:
            wait_for(lambda: _advertised(site), what="the site's schedd ad")
            yield Pools(laptop, site, laptop_up, site_up)


def _advertised(pool: PersonalPool) -> bool:
    try:
        return locate_schedd(None, pool.collector, home=pool.home) == pool.url
    except ScheddNotFound:
        return False


# -- htgrid up ---------------------------------------------------------------------------


def test_up_says_a_pool_without_a_collector_has_none(pools: Pools) -> None:
    assert "  collector: none (COLLECTOR not in DAEMON_LIST)\n" in pools.laptop_up
    assert "127.0.0.1:0" not in pools.laptop_up
    # A pool with one prints where it listens, not the configured port 0.
    assert f"  collector: {pools.site.collector}\n" in pools.site_up
    assert not pools.site.collector.endswith(":0")


# -- htgrid config_val -------------------------------------------------------------------


def test_config_val_prints_the_running_pools_values(pools: Pools) -> None:
    site = pools.site
    rc, out, err = run_cli(
        site.home, "config_val", "COLLECTOR_HOST", "trust_domain", "SCHEDD_NAME", "DAEMON_LIST"
    )
    assert (rc, err) == (0, "")
    assert out.splitlines() == [site.collector, "site.example", SITE, "MASTER, SCHEDD, COLLECTOR"]
    rc, out, _ = run_cli(site.home, "config_val", "TRUST_DOMAIN_CAFILE")
    assert out.strip() == str(site.home / "etc" / "ca" / "ca.crt")
    assert x509.load_pem_x509_certificate(Path(out.strip()).read_bytes())  # it is the CA
    # The laptop runs no collector: its COLLECTOR_HOST is the file's.
    rc, out, _ = run_cli(pools.laptop.home, "config_val", "COLLECTOR_HOST")
    assert (rc, out) == (0, "127.0.0.1:0\n")


def test_config_val_unknown_knob_is_not_defined(pools: Pools) -> None:
    rc, out, err = run_cli(pools.site.home, "config_val", "TRUST_DOMAIN", "NO_SUCH_KNOB")
    assert rc == 1
    assert out == "site.example\n"  # the defined ones still print
    assert err == "Not defined: NO_SUCH_KNOB\n"


def test_config_val_defaults_file_values_and_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "pool"  # never started: values come from the file and defaults
    home.mkdir()
    (home / "htgrid.conf").write_text(
        'NEGOTIATOR_INTERVAL = 20\nSTARTD_ATTRS = Site\nSite = "attic"\n'
    )
    monkeypatch.setenv("HTGRID_TRUST_DOMAIN", "from-env.example")
    rc, out, err = run_cli(
        home, "config_val", "NEGOTIATOR_INTERVAL", "SCHEDD_INTERVAL", "SITE", "TRUST_DOMAIN"
    )
    assert (rc, err) == (0, "")
    assert out.splitlines() == ["20", "300", '"attic"', "from-env.example"]
    rc, out, _ = run_cli(home, "config_val", "-verbose", "NEGOTIATOR_INTERVAL", "ALIVE_INTERVAL")
    assert out.splitlines() == [
        "NEGOTIATOR_INTERVAL = 20",
        f" # at: {home / 'htgrid.conf'}, line 1",
        "ALIVE_INTERVAL = 60",
        " # at: default",
    ]
    rc, out, _ = run_cli(home, "config_val", "-dump")
    assert rc == 0
    dumped = dict(line.split(" = ", 1) for line in out.splitlines()[1:] if not line.startswith("#"))
    # Every knob htgrid.conf accepts has a value, but those with none by default.
    assert set(KNOBS) - set(dumped) == {
        "DEFAULT_MASTER_SHUTDOWN_SCRIPT",
        "STARTD_NOCLAIM_SHUTDOWN",
        "NETWORK_INTERFACE",  # a node on its own: the address that reaches the collector
        "CCB_ADDRESS",  # a node behind NAT: its broker
        "PRIVATE_NETWORK_NAME",
        "COLLECTOR_AUDIT_LOG",  # none unless set
        "SEC_SCITOKENS_ALLOWED_ISSUERS",  # unset: the issuers the map file names
        "AUTH_SSL_SERVER_CAFILE",  # unset: the pool's CA
        "NETWORK_MAX_PENDING_CONNECTS",  # unset: 80% of the process's file descriptors
        "BATCH_GAHP",  # unset: htgrid gahp batch
        # unset: the node's policy expressions without _VANILLA are used
        *(
            f"{knob}_VANILLA"
            for knob in ("WANT_SUSPEND", "SUSPEND", "CONTINUE", "PREEMPT", "WANT_VACATE", "KILL")
        ),
        "MAXJOBRETIREMENTTIME_VANILLA",
    }
    assert dumped["COLLECTOR_HOST"] == "127.0.0.1:9618"
    assert dumped["SCITOKENS_SERVER_AUDIENCE"] == "127.0.0.1:9618"  # HTCondor-CE's default
    assert dumped["SCHEDD_AUDIT_LOG"] == str(home / "log" / "AuditLog")
    assert dumped["AUTH_SSL_CLIENT_CADIR"] == str(home / "etc" / "ca" / "trusted.d")
    rc, out, _ = run_cli(home, "config_val", "-dump", "INTERVAL")
    assert sorted(line.split(" = ")[0] for line in out.splitlines()[1:]) == [
        "ALIVE_INTERVAL",
        "ANNEX_UPDATE_INTERVAL",
        "CCB_HEARTBEAT_INTERVAL",
        "GRIDMANAGER_COLLECTOR_UPDATE_INTERVAL",
        "GRIDMANAGER_JOB_PROBE_INTERVAL",
        "GRIDMANAGER_RESOURCE_PROBE_INTERVAL",
        "NEGOTIATOR_INTERVAL",
        "NEGOTIATOR_MIN_INTERVAL",
        "PERIODIC_EXPR_INTERVAL",
        "POLLING_INTERVAL",
        "SCHEDD_INTERVAL",
        "UPDATE_INTERVAL",
    ]


def test_config_val_reports_a_broken_file_and_bad_usage(tmp_path: Path) -> None:
    (tmp_path / "htgrid.conf").write_text("QUEUE_FSYNC = true\nNEGOTIATOR_INTERVAL = soon\n")
    rc, _, err = run_cli(tmp_path, "config_val", "QUEUE_FSYNC")
    assert rc == 2
    assert f"{tmp_path / 'htgrid.conf'}:2: NEGOTIATOR_INTERVAL must be a number" in err
    rc, _, err = run_cli(tmp_path, "config_val")
    assert rc == 2 and "-dump" in err


# -- htgrid trust and token create -token PATH -------------------------------------------


def test_trust_add_and_a_token_file_let_the_laptop_reach_the_site(
    pools: Pools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    laptop, site = pools.laptop, pools.site
    where = ["-name", SITE, "-pool", site.collector]
    monkeypatch.chdir(tmp_path)
    rc, ca_file, _ = run_cli(site.home, "config_val", "TRUST_DOMAIN_CAFILE")
    # The token, made on the site, goes to a path relative to here (a laptop home).
    relative = "laptop-tokens/site.example"
    rc, out, err = run_cli(
        site.home, "token", "create", "-identity", f"{current_user()}@site.example",
        "-token", relative,
    )  # fmt: skip
    assert (rc, out, err) == (0, "", "")
    token_file = tmp_path / relative
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    laptop_tokens = laptop.home / "etc" / "tokens.d"
    laptop_tokens.mkdir(parents=True, exist_ok=True)
    os.replace(token_file, laptop_tokens / "site.example")
    try:
        rc, _, err = run_cli(laptop.home, "q", *where)
        assert rc == 1 and "trusted.d" in err  # the site's certificate is not trusted yet

        rc, out, err = run_cli(laptop.home, "trust", "add", "site.example", ca_file.strip())
        assert rc == 0, err
        assert out.startswith("Trusting site.example: ") and "SHA-256 " in out
        trusted = laptop.home / "etc" / "ca" / "trusted.d" / "site.example.crt"
        assert trusted.read_bytes() == (site.home / "etc" / "ca" / "ca.crt").read_bytes()
        rc, out, err = run_cli(laptop.home, "q", *where)
        assert rc == 0, err
        assert f"-- Schedd: {SITE} : <" in out

        rc, out, _ = run_cli(laptop.home, "trust", "list")
        rows = [line.split() for line in out.splitlines()[1:]]
        assert [(r[0], r[-1]) for r in rows] == [
            ("(this", str(laptop.home / "etc" / "ca" / "ca.crt")),
            ("site.example", str(trusted)),
        ]
        assert rows[0][3] != rows[1][2]  # each its own fingerprint

        rc, out, _ = run_cli(laptop.home, "trust", "remove", "site.example")
        assert rc == 0 and not trusted.exists()
        rc, _, err = run_cli(laptop.home, "q", *where)
        assert rc == 1 and "trusted.d" in err  # refused again
    finally:
        (laptop_tokens / "site.example").unlink(missing_ok=True)
        (laptop.home / "etc" / "ca" / "trusted.d" / "site.example.crt").unlink(missing_ok=True)


def test_trust_add_refuses_what_is_not_a_ca_certificate(pools: Pools, tmp_path: Path) -> None:
    laptop, site = pools.laptop, pools.site
    server = site.home / "etc" / "ca" / "server.crt"  # the site's daemons' certificate
    rc, _, err = run_cli(laptop.home, "trust", "add", "site", str(server))
    assert rc == 2
    assert f"{server}: certificate 1" in err and "is not a CA certificate" in err
    (tmp_path / "notes.txt").write_text("hello\n")
    rc, _, err = run_cli(laptop.home, "trust", "add", "site", str(tmp_path / "notes.txt"))
    assert rc == 2 and "holds no PEM certificate" in err
    broken = tmp_path / "broken.crt"
    broken.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    rc, _, err = run_cli(laptop.home, "trust", "add", "site", str(broken))
    assert rc == 2 and f"{broken}: not a readable PEM certificate" in err
    rc, _, err = run_cli(laptop.home, "trust", "add", "site", str(tmp_path / "missing.crt"))
    assert rc == 2 and "missing.crt: cannot read" in err
    ca = site.home / "etc" / "ca" / "ca.crt"
    rc, _, err = run_cli(laptop.home, "trust", "add", "../escape", str(ca))
    assert rc == 2 and "cannot name a trusted CA" in err
    assert not (laptop.home / "etc" / "ca" / "escape.crt").exists()
    assert not list((laptop.home / "etc" / "ca").glob("trusted.d/*"))


def test_trust_remove_of_an_unknown_name_says_what_there_is(pools: Pools) -> None:
    laptop, site = pools.laptop, pools.site
    rc, _, err = run_cli(laptop.home, "trust", "add", "other", str(site.home / "etc/ca/ca.crt"))
    assert rc == 0, err
    try:
        rc, _, err = run_cli(laptop.home, "trust", "remove", "nosuch")
        assert rc == 1
        assert "no trusted CA named nosuch" in err and "it has: other" in err
    finally:
        run_cli(laptop.home, "trust", "remove", "other")


def test_token_create_bare_name_and_absolute_path(pools: Pools, tmp_path: Path) -> None:
    site = pools.site
    rc, _, err = run_cli(site.home, "token", "create", "-identity", "bob", "-token", "bob")
    assert rc == 0, err
    bare = Path(os.environ["HOME"]) / ".htgrid" / "tokens.d" / "bob"  # as before
    assert stat.S_IMODE(bare.stat().st_mode) == 0o600
    target = tmp_path / "new" / "dir" / "carol"
    rc, _, err = run_cli(site.home, "token", "create", "-identity", "carol", "-token", str(target))
    assert rc == 0, err
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700
    rc, out, err = run_cli(site.home, "token", "revoke", "-token", str(target))
    assert rc == 0 and out.startswith("Token ") and "revoked" in out, err
    rc, _, err = run_cli(site.home, "token", "create", "-identity", "x", "-token", str(tmp_path))
    assert rc == 2 and "is a directory" in err


# -- htgrid history -name/-pool ----------------------------------------------------------


def test_history_of_another_pools_schedd(pools: Pools, tmp_path: Path) -> None:
    laptop, site = pools.laptop, pools.site
    rc, ca_file, _ = run_cli(site.home, "config_val", "TRUST_DOMAIN_CAFILE")
    rc, _, err = run_cli(laptop.home, "trust", "add", "site.example", ca_file.strip())
    assert rc == 0, err
    tokens = laptop.home / "etc" / "tokens.d"
    token = site.token(f"{current_user()}@site.example")
    try:
        tokens.mkdir(parents=True, exist_ok=True)
        (tokens / "site.example").write_text(token + "\n")
        (tmp_path / "job.sub").write_text("universe = local\nexecutable = /bin/true\nqueue\n")
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            rc, out, err = run_cli(site.home, "submit", "job.sub")
        finally:
            os.chdir(cwd)
        assert rc == 0, err
        cluster = out.strip().rsplit(" ", 1)[-1].rstrip(".")
        with site.client() as schedd:
            wait_for(lambda: schedd.history(f"ClusterId == {cluster}"), what="the job's end")
        where = ["-name", SITE, "-pool", site.collector]
        rc, out, err = run_cli(laptop.home, "history", *where, "-af", "ClusterId", "ExitCode")
        assert (rc, err) == (0, "")
        assert f"{cluster} 0" in out.splitlines()
        rc, out, _ = run_cli(laptop.home, "history", "-af", "ClusterId")  # the laptop's own
        assert f"{cluster}" not in out.splitlines()
        rc, _, err = run_cli(laptop.home, "history", "-name", "nosuch", "-pool", site.collector)
        assert rc == 1 and "no schedd named 'nosuch'" in err
    finally:
        (tokens / "site.example").unlink(missing_ok=True)
        run_cli(laptop.home, "trust", "remove", "site.example")
