"""Removing the spool directories of jobs that have left the queue.

A job whose input is spooled (HTCondor-C) keeps its sandbox in `<spool>/<cluster>/<proc>/`,
with `<proc>.input.json` beside it; a job submitted with a MyProxy password keeps it in
`<spool>/myproxy/<cluster>.<proc>`. Once the job has left the queue, whether its output
was fetched or it was removed, nothing reads them again; HTCondor's schedd removes them
as the job leaves. Here the daemon's periodic pass (and its start) removes those of every
job no longer in the queue, so a crash between the job leaving and the removal leaves
nothing behind for good either, and a removal that fails (a file that cannot be removed
yet) is tried again at each pass, the failure said once in the log.

A directory made for a submit that has not committed yet may go too: that job is held
until its input arrives, and the stage-in makes the directory again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Collection, Iterable
from pathlib import Path

from htgrid.pool import myproxy_jobs, myproxy_password_file
from htgrid.queue import JobId
from htgrid.schedd._spool import cut_short_uploads, manifest_path

__all__ = ["SweepFailures", "remove_spools", "spooled_jobs"]

_log = logging.getLogger("htgrid.schedd")


def spooled_jobs(spool: Path) -> set[JobId]:
    """The jobs with something in `spool`: `<cluster>/<proc>`, its manifest, an upload
    a crash cut short (`.<proc>.incoming-*`), or a MyProxy password (`myproxy/`)."""
    found = {JobId(cluster, proc) for cluster, proc in myproxy_jobs(spool)}
    with contextlib.suppress(FileNotFoundError), os.scandir(spool) as clusters:
        for cluster in clusters:
            if not (cluster.name.isdigit() and cluster.is_dir(follow_symlinks=False)):
                continue
            with contextlib.suppress(FileNotFoundError), os.scandir(cluster.path) as entries:
                for entry in entries:
                    proc = _proc_of(entry.name)
                    if proc is not None:
                        found.add(JobId(int(cluster.name), proc))
    return found


def _proc_of(name: str) -> int | None:
    """The proc an entry of a cluster's spool directory belongs to, if any."""
    if name.startswith("."):  # .<proc>.incoming-<hex>
        name = name[1:].partition(".")[0]
    else:
        name = name.removesuffix(".input.json")
    return int(name) if name.isdigit() else None


def remove_spools(spool: Path, jobs: Iterable[JobId]) -> tuple[int, dict[JobId, str]]:
    """Remove what `spool` holds for `jobs`, and their cluster's directory once empty: how
    many jobs had all of it removed, and why not for each job that had some left (a later
    pass tries again: what is left is still found)."""
    removed = 0
    failed: dict[JobId, str] = {}
    clusters: set[int] = set()
    for job in jobs:
        sandbox = spool / str(job.cluster) / str(job.proc)
        clusters.add(job.cluster)
        paths = [sandbox, manifest_path(sandbox), *cut_short_uploads(sandbox)]
        paths.append(myproxy_password_file(spool, job.cluster, job.proc))
        hit, errors = False, []
        for path in paths:
            found, error = _remove(path)
            hit = hit or found
            if error is not None:
                errors.append(error)
        if errors:
            failed[job] = errors[0]
        elif hit:
            removed += 1
    for cluster in clusters:
        with contextlib.suppress(OSError):  # still holds another proc's files
            (spool / str(cluster)).rmdir()
    return removed, failed


def _remove(path: Path) -> tuple[bool, str | None]:
    """Remove a file or a whole directory: whether there was one, and the first error."""
    errors: list[str] = []

    def failed(
        _: object, where: str, info: tuple[type[BaseException], BaseException, object]
    ) -> None:
        if not isinstance(info[1], FileNotFoundError):
            errors.append(f"{where}: {getattr(info[1], 'strerror', None) or info[1]}")

    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, onerror=failed)
        else:
            path.unlink()
    except FileNotFoundError:
        return False, None
    except OSError as exc:
        errors.append(f"{path}: {exc.strerror or exc}")
    return True, errors[0] if errors else None


class SweepFailures:
    """The jobs whose spool files a sweep could not remove, each said once in the log
    (every pass tries again), and again when a later pass removes them."""

    def __init__(self) -> None:
        self._passes: dict[JobId, int] = {}

    def note(self, removed: int, failed: dict[JobId, str], swept: Collection[JobId]) -> None:
        """What one pass over the jobs `swept` did (`remove_spools`'s answer)."""
        if removed:
            _log.info("removed the spool files of %d job(s) no longer in the queue", removed)
        for job in sorted(self._passes.keys() - failed.keys()):
            passes = self._passes.pop(job)
            if job in swept:  # else found in the queue again, or removed by hand
                _log.info(
                    "job %s: its spool files are removed, after %d failed passes", job, passes
                )
        for job, error in failed.items():
            passes = self._passes.get(job, 0) + 1
            self._passes[job] = passes
            if passes == 1:
                _log.warning(
                    "job %s: its spool files cannot be removed (%s): tried again at each "
                    "periodic pass",
                    job,
                    error,
                )
