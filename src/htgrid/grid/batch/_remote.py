"""A batch system on another host, reached over SSH, as HTCondor's BOSCO reaches one:

    GridResource = batch slurm [user@]host[:port] [--rgahp-key FILE] [--rgahp-known-hosts FILE]
                   [--rgahp-user NAME] [--rgahp-script COMMAND] [--rgahp-nologin]

The batch GAHP runs on that host (`ssh ... /bin/bash -l -c 'exec htgrid gahp batch'`: the
remote_gahp of HTCondor, which starts the blahp there), so it drives sbatch, squeue and
scancel where they work. Its stdin and stdout are the GAHP protocol's pipes.

Files go as HTCondor's ft-gahp sends them, over the same kind of SSH login: before the
submit, the job's executable, stdin, proxy and TransferInput into a sandbox in the remote
user's home (`.htgrid/sandbox/<tag>`), the submit ad's paths rewritten to point there;
after the batch job ends, its stdout, stderr and TransferOutput back to the submit side
(TransferOutputRemaps applied here), then the sandbox is removed, before the job's exit
is committed (a kill -9 in between comes back to the removal, not to a sandbox left behind).
The files are read and written with the job owner's rights, and ssh runs as the owner
(their keys).

Host keys are always checked (StrictHostKeyChecking=yes: an unknown host or a changed key
fails, nothing is accepted on first use), no password is ever asked (BatchMode), and a
private key readable by others is refused before ssh is run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from htgrid._privsep import Account, as_owner, spawn_identity
from htgrid.classad import ClassAd
from htgrid.grid._errors import GridError, UnsupportedGridJob

__all__ = ["RemoteHost", "Sandbox", "TransferFailed", "remote_submit_ad"]

_DEST = re.compile(
    r"(?:(?P<user>[A-Za-z_][A-Za-z0-9_.-]*)@)?(?P<host>[A-Za-z0-9.-]+)(?::(?P<port>\d+))?"
)
_WITH_VALUE = {"--rgahp-key", "--rgahp-known-hosts", "--rgahp-user", "--rgahp-script"}
#: The remote GAHP when GridResource names none (htgrid installed on the remote host).
DEFAULT_SCRIPT = "htgrid gahp batch"
#: Where the sandboxes live, relative to the remote user's home (the login's cwd).
SANDBOXES = ".htgrid/sandbox"
#: ssh's exit status when the connection itself failed (the remote command's otherwise).
_SSH_FAILED = 255
#: A transfer that takes longer is given up (HTCondor's ft-gahp calls time out in 1 h).
_TRANSFER_TIMEOUT = 3600.0
_STDOUT, _STDERR = "_condor_stdout", "_condor_stderr"


class TransferFailed(GridError):
    """A sandbox transfer failed; `transient` when the connection did (try again)."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True, slots=True)
class RemoteHost:
    """Where a remote batch system is logged into, and how."""

    host: str
    user: str | None = None
    port: int | None = None
    #: The private key ssh presents (--rgahp-key); else ssh's own defaults.
    key: str | None = None
    #: The known_hosts file the host's key is checked against; else ssh's defaults.
    known_hosts: str | None = None
    #: The command that starts the batch GAHP there.
    script: str = DEFAULT_SCRIPT
    #: Whether that command runs in a login shell (the site's profile sets PATH).
    login: bool = True

    @classmethod
    def parse(cls, args: Sequence[str], grid_resource: str) -> RemoteHost:
        """The words after `batch <lrms>`; UnsupportedGridJob naming what is wrong."""
        dest: re.Match[str] | None = None
        options: dict[str, str] = {}
        login = True
        words = list(args)
        while words:
            word = words.pop(0)
            if word in _WITH_VALUE:
                if not words:
                    raise UnsupportedGridJob(
                        f"GridResource {grid_resource!r}: {word} needs a value"
                    )
                options[word] = words.pop(0)
            elif word == "--rgahp-nologin":
                login = False
            elif word in ("--rgahp-nokey", "--rgahp-nopass"):
                options.pop("--rgahp-key", None)
            elif word.startswith("-"):
                raise UnsupportedGridJob(
                    f"GridResource {grid_resource!r}: unknown option {word} (htgrid knows "
                    f"{', '.join(sorted(_WITH_VALUE | {'--rgahp-nologin', '--rgahp-nokey'}))})"
                )
            elif dest is None and (dest := _DEST.fullmatch(word)) is not None:
                continue
            else:
                raise UnsupportedGridJob(
                    f"GridResource {grid_resource!r}: {word!r} is not [user@]host[:port]"
                )
        if dest is None:
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} names no remote host")
        port = dest["port"]
        return cls(
            host=dest["host"],
            user=dest["user"] or options.get("--rgahp-user"),
            port=int(port) if port else None,
            key=options.get("--rgahp-key"),
            known_hosts=options.get("--rgahp-known-hosts"),
            script=options.get("--rgahp-script", DEFAULT_SCRIPT),
            login=login,
        )

    @property
    def name(self) -> str:
        """user@host:port, as messages name it."""
        where = self.host if self.user is None else f"{self.user}@{self.host}"
        return where if self.port is None else f"{where}:{self.port}"

    def ssh(self, command: str) -> list[str]:
        """The ssh command line that runs `command` (a shell line) there."""
        argv = [
            "ssh",
            "-T",
            "-e",
            "none",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "ConnectTimeout=30",
            "-o",
            "ServerAliveInterval=30",
            "-o",
            "ServerAliveCountMax=4",
            "-o",
            "LogLevel=ERROR",
        ]
        if self.key is not None:
            argv += ["-i", self.key, "-o", "IdentitiesOnly=yes"]
        if self.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.user is not None:
            argv += ["-l", self.user]
        return [*argv, "--", self.host, command]

    def gahp_argv(self) -> list[str]:
        """The batch GAHP server there, its protocol on ssh's stdin and stdout."""
        line = f"exec {self.script}"
        return self.ssh(f"/bin/bash -l -c {shlex.quote(line)}" if self.login else line)

    def key_problem(self) -> str | None:
        """Why ssh would not use the private key named, if it would not (blocking)."""
        if self.key is None:
            return None
        path = os.path.expanduser(self.key)
        try:
            info = os.stat(path)
        except OSError as err:
            return f"cannot use the ssh key {self.key}: {err.strerror or err}"
        if not stat.S_ISREG(info.st_mode):
            return f"the ssh key {self.key} is not a file"
        if info.st_mode & 0o077:
            return (
                f"the ssh key {self.key} is open to others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}): ssh refuses it; make it 0600"
            )
        return None


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A remote job's sandbox: files sent before the submit, files fetched after the end."""

    #: Relative to the remote user's home.
    path: str
    #: (name in the sandbox, local path) pairs.
    uploads: tuple[tuple[str, str], ...] = ()
    downloads: tuple[tuple[str, str], ...] = ()


def sandbox_of(tag: str) -> str:
    """The sandbox of the submission `tag`, relative to the remote home."""
    return f"{SANDBOXES}/{tag}"


def remote_submit_ad(out: ClassAd, tag: str) -> tuple[str, Sandbox]:
    """The submit ad `out` (every path the submit side's) for the remote GAHP, its paths
    in the sandbox, and the sandbox's transfers."""
    iwd = out.get("Iwd")
    local_iwd = iwd if isinstance(iwd, str) else "/"
    here = _Here(local_iwd)
    uploads: dict[str, str] = {}

    def send(path: str) -> str:
        local = here.path(path.rstrip("/"))
        name = PurePosixPath(local).name
        uploads.setdefault(name, local)
        return name

    cmd = out.get("Cmd")
    if isinstance(cmd, str) and out.get("StageCmd") is not False:
        out["Cmd"] = send(cmd)
    for attr in ("In", "x509UserProxy"):
        value = out.get(attr)
        if isinstance(value, str) and value and value != os.devnull:
            out[attr] = send(value)
    inputs = _items(out.get("TransferInput"))
    if inputs:
        out["TransferInput"] = ",".join(
            item if "://" in item else send(item) + ("/" if item.endswith("/") else "")
            for item in inputs
        )
    remaps = _remaps(out.get("TransferOutputRemaps"))
    if "TransferOutputRemaps" in out:
        del out["TransferOutputRemaps"]
    downloads: list[tuple[str, str]] = []
    # /dev/null (a submit file's default) is the remote host's own.
    stdout, stderr = (_file(out.get(attr)) for attr in ("Out", "Err"))
    if stdout is not None:
        out["Out"] = _STDOUT
        downloads.append((_STDOUT, here.path(remaps.get(_STDOUT, stdout))))
    if stderr is not None:
        if stderr == stdout:
            out["Err"] = _STDOUT
        else:
            out["Err"] = _STDERR
            downloads.append((_STDERR, here.path(remaps.get(_STDERR, stderr))))
    outputs = _items(out.get("TransferOutput"))
    for name in outputs:
        base = PurePosixPath(name.rstrip("/")).name
        downloads.append((base, here.path(remaps.get(name, remaps.get(base, base)))))
    sandbox = sandbox_of(tag)
    out["Iwd"] = sandbox
    return repr(out), Sandbox(sandbox, tuple(uploads.items()), tuple(downloads))


@dataclass(frozen=True, slots=True)
class _Here:
    iwd: str

    def path(self, path: str) -> str:
        return os.path.normpath(os.path.join(self.iwd, os.path.expanduser(path)))


def _file(value: object) -> str | None:
    return value if isinstance(value, str) and value and value != os.devnull else None


def _items(value: object) -> list[str]:
    if not isinstance(value, str):
        return []
    return [item.strip() for item in value.split(",") if item.strip()]


def _remaps(value: object) -> dict[str, str]:
    if not isinstance(value, str):
        return {}
    pairs = (item.split("=", 1) for item in value.split(";") if "=" in item)
    return {name.strip(): dest.strip() for name, dest in pairs}


# ---- the transfers (blocking: run them in a thread) ----------------------------------------


@dataclass(frozen=True, slots=True)
class Login:
    """Who logs in: the environment ssh gets (HOME: whose keys) and the job's owner."""

    env: Mapping[str, str]
    owner: Account | None = None


def upload(remote: RemoteHost, sandbox: Sandbox, login: Login) -> None:
    """Send the sandbox's inputs (read as the owner); TransferFailed if that fails."""
    path = shlex.quote(sandbox.path)
    command = f"mkdir -p -- {path} && cd -- {path} && tar -xf -"
    what = "send the input files to"
    with _ssh(remote, command, login, what, stdin=subprocess.PIPE) as process:
        assert process.stdin is not None
        try:
            with as_owner(login.owner), _tar_to(process.stdin) as tar:
                for name, local in sandbox.uploads:
                    try:
                        tar.add(local, arcname=name)
                    except BrokenPipeError:
                        raise
                    except OSError as err:
                        raise TransferFailed(
                            f"Cannot send input file {local} to {remote.name}: "
                            f"{err.strerror or err}",
                            transient=False,
                        ) from err
        except BrokenPipeError:
            pass  # the far end gave up: its exit status and stderr say why


def download(remote: RemoteHost, sandbox: Sandbox, login: Login) -> None:
    """Fetch the sandbox's outputs (written as the owner); TransferFailed if that fails."""
    if not sandbox.downloads:
        return
    names = " ".join(shlex.quote(name) for name, _ in sandbox.downloads)
    command = f"cd -- {shlex.quote(sandbox.path)} && tar -cf - -- {names}"
    dests = dict(sandbox.downloads)
    what = "fetch the output files from"
    with _ssh(remote, command, login, what, stdout=subprocess.PIPE) as process:
        assert process.stdout is not None
        with as_owner(login.owner):
            try:
                _untar(process.stdout, dests)
            except (OSError, tarfile.TarError) as err:
                process.kill()
                message = getattr(err, "strerror", None) or err
                raise TransferFailed(
                    f"Failed to transfer output files from {remote.name}: {message}",
                    transient=isinstance(err, tarfile.TarError),
                ) from err


def destroy(remote: RemoteHost, sandbox: str, login: Login) -> None:
    """Remove a sandbox there; TransferFailed if that fails."""
    with _ssh(remote, f"rm -rf -- {shlex.quote(sandbox)}", login, "remove the sandbox at"):
        pass


@contextlib.contextmanager
def _ssh(
    remote: RemoteHost,
    command: str,
    login: Login,
    what: str,
    *,
    stdin: int | None = subprocess.DEVNULL,
    stdout: int | None = subprocess.DEVNULL,
) -> Iterator[subprocess.Popen[bytes]]:
    """ssh running `command` there, as the owner; waited for (killed if late) on exit,
    TransferFailed (saying it could not `what` the host, and why) if it failed."""
    problem = remote.key_problem()
    if problem is not None:
        raise TransferFailed(problem, transient=False)
    with tempfile.TemporaryFile() as errors:
        try:
            process = subprocess.Popen(
                remote.ssh(command),
                stdin=stdin,
                stdout=stdout,
                stderr=errors,
                env=dict(login.env),
                close_fds=True,
                **spawn_identity(login.owner),
            )
        except OSError as err:
            raise TransferFailed(f"cannot run ssh: {err.strerror or err}", transient=False) from err
        try:
            yield process
        finally:
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            try:
                process.wait(_TRANSFER_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _check(process, errors, remote, what)


def _check(
    process: subprocess.Popen[bytes], errors: IO[bytes], remote: RemoteHost, what: str
) -> None:
    if process.returncode == 0:
        return
    errors.seek(0)
    lines = errors.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
    why = "; ".join(lines[-3:]) or f"exit status {process.returncode}"
    raise TransferFailed(
        f"Cannot {what} {remote.name}: {why}", transient=process.returncode in (_SSH_FAILED, -9)
    )


def _tar_to(stream: IO[bytes]) -> tarfile.TarFile:
    return tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT, dereference=True)


def _untar(stream: IO[bytes], dests: Mapping[str, str]) -> None:
    """Write the members named in `dests` (a directory's below it) to their destinations:
    files by a temporary name then renamed, nothing outside them, no links."""
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not parts or parts[0] not in dests or ".." in parts or member.name.startswith("/"):
                continue
            target = Path(dests[parts[0]], *parts[1:])
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                source = tar.extractfile(member)
                assert source is not None  # a regular file has contents
                _write(source, target, member.mode)


def _write(source: IO[bytes], target: Path, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        os.chmod(tmp, stat.S_IMODE(mode) & 0o777 | stat.S_IRUSR | stat.S_IWUSR)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
