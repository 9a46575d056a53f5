"""A remote batch system over SSH for tests (`batch slurm user@host`, as BOSCO reaches one).

The login node is .ci/sshd-up.sh's sshd on 127.0.0.22:2222 (user boscotest, root's test
key, its host key in the known_hosts file the script writes); the batch system behind it
is the Slurm of .ci/slurm-up.sh on this machine. htgrid is "installed" there as
`condor_remote_cluster --add` installs the blahp: this checkout's package copied into the
remote user's home, with a script that starts its batch GAHP. `remote_slurm_missing`
says what of it is not here.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import htgrid

SSHD = Path(os.environ.get("HTGRID_SSHD_DIR", "/var/tmp/htgrid-sshd"))
KEY = SSHD / "client" / "id_ed25519"
KNOWN_HOSTS = SSHD / "client" / "known_hosts"
USER = os.environ.get("HTGRID_SSHD_USER", "boscotest")
HOST = f"{os.environ.get('HTGRID_SSHD_ADDR', '127.0.0.22')}:{os.environ.get('HTGRID_SSHD_PORT', '2222')}"


def ssh_probe() -> list[str]:
    """A command line that logs in as the test user (exit status 0 if it could)."""
    host, port = HOST.rsplit(":", 1)
    argv = ["ssh", "-T", "-i", str(KEY), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
    argv += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={KNOWN_HOSTS}"]
    return [*argv, "-p", port, "-l", USER, "--", host, "true"]


def _ssh_ok() -> bool:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return False
    if not KEY.exists() or not KNOWN_HOSTS.exists():
        return False
    return run_there("echo in") == "in\n"


def _slurm_up() -> bool:
    # A busy slurmctld may time a query out (its own 10 s): ask a few times.
    for _ in range(3):
        try:
            done = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return any(
                state.strip("*~#") in ("idle", "mixed", "allocated")
                for state in done.stdout.split()
            )
    return False


def run_there(command: str) -> str | None:
    """`command`'s stdout as the remote user (None if it failed)."""
    try:
        done = subprocess.run(
            [*ssh_probe()[:-1], command], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def remote_slurm_missing() -> str | None:
    """What of the sshd and Slurm of the CI scripts is not up here (None: both are)."""
    missing = [name for name, up in (("the sshd", _ssh_ok), ("Slurm", _slurm_up)) if not up()]
    return " and ".join(missing) or None


def install_remote_gahp() -> str:
    """This checkout's htgrid copied to the remote user's home; the path of the script
    that starts its batch GAHP there."""
    source = Path(htgrid.__file__).parent
    account = pwd.getpwnam(USER)
    where = (
        Path(account.pw_dir) / ".htgrid-test" / hashlib.sha1(str(source).encode()).hexdigest()[:12]
    )
    target = where / "htgrid"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    script = where / "batch_gahp"
    script.write_text(
        "#!/bin/sh\n"
        f"PYTHONPATH={where} exec /usr/bin/python3 -m htgrid.cli._gahp batch "
        '--status-max-age 0.2 --status-window 0.05 "$@"\n'
    )
    script.chmod(0o755)
    for path in [where.parent, where, *where.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)
    return str(script)


def grid_resource(script: str, *, known_hosts: Path = KNOWN_HOSTS, key: Path = KEY) -> str:
    """`batch slurm boscotest@127.0.0.22:2222 ...` with the test key and known_hosts."""
    return (
        f"batch slurm {USER}@{HOST} --rgahp-key {key} --rgahp-known-hosts {known_hosts} "
        f"--rgahp-script {script} --rgahp-nologin"
    )


def sandbox_exists(tag: str) -> bool:
    return (Path(pwd.getpwnam(USER).pw_dir) / ".htgrid" / "sandbox" / tag).exists()
