"""Removing the spool directories of jobs that have left the queue.

A job whose input is spooled (HTCondor-C) keeps its sandbox in `<spool>/<cluster>/<proc>/`,
with `<proc>.input.json` beside it; a job submitted with a MyProxy password keeps it in
`<spool>/myproxy/<cluster>.<proc>`. Once the job has left the queue, whether its output
was fetched or it was removed, nothing reads them again; HTCondor's schedd removes them
as the job leaves. Here the daemon's periodic pass (and its start) removes those of every
job no longer in the queue, so a crash between the job leaving and the removal leaves
nothing behind for good either.

A directory made for a submit that has not committed yet may go too: that job is held
until its input arrives, and the stage-in makes the directory again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from htgrid.pool import myproxy_jobs, myproxy_password_file
from htgrid.queue import JobId
from htgrid.schedd._spool import cut_short_uploads, manifest_path

__all__ = ["remove_spools", "spooled_jobs"]


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


def remove_spools(spool: Path, jobs: Iterable[JobId]) -> int:
    """Remove what `spool` holds for `jobs`, and their cluster's directory once empty; how
    many jobs had something removed."""
    removed = 0
    clusters: set[int] = set()
    for job in jobs:
        sandbox = spool / str(job.cluster) / str(job.proc)
        clusters.add(job.cluster)
        paths = [sandbox, manifest_path(sandbox), *cut_short_uploads(sandbox)]
        paths.append(myproxy_password_file(spool, job.cluster, job.proc))
        hit = False
        for path in paths:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                hit = True
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    hit = True
        removed += hit
    for cluster in clusters:
        with contextlib.suppress(OSError):  # still holds another proc's files
            (spool / str(cluster)).rmdir()
    return removed
