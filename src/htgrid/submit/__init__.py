"""HTCondor's submit description language: submit files in, job ads out.

    desc = SubmitDescription.from_file("job.sub")
    for job in desc.jobs(42, owner="alice", qdate=1_700_000_000):
        print(job.proc_id, job.ad["Cmd"])

    cluster = desc.procs(42, owner="alice", qdate=1_700_000_000)   # as condor_submit sends
    cluster.cluster_ad                  # proc 0's ad: what the procs share
    for proc in cluster:                # built one at a time, as asked for
        print(proc.proc_id, proc.own)   # what the proc has of its own ($(Process)...)

Everything condor_submit reads from its surroundings is passed in: the cluster
id, the owner, the submit time, the submit directory, the environment (for
`getenv` and `$ENV()`), and a `SubmitConfig` standing for the HTCondor
configuration. `include : cmd |` and `queue ... from cmd |` run commands, as
condor_submit does.

`SubmitError` loads with the package, the language when first asked for: a command
that only talks to a daemon needs the error class, not the language (~25 ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand
from htgrid.submit._errors import SubmitError

if TYPE_CHECKING:
    from htgrid.submit._argsenv import split_v2_raw
    from htgrid.submit._config import SubmitConfig
    from htgrid.submit._description import (
        ClusterProcs,
        Job,
        ProcAd,
        SubmitDescription,
        dry_run_chunks,
        dry_run_text,
    )
    from htgrid.submit._transform import Transform, TransformMacros, TransformStep

#: Where each other name lives, loaded when first asked for.
_LAZY: Final = {
    "SubmitConfig": "_config",
    "ClusterProcs": "_description",
    "Job": "_description",
    "ProcAd": "_description",
    "SubmitDescription": "_description",
    "dry_run_chunks": "_description",
    "dry_run_text": "_description",
    "split_v2_raw": "_argsenv",
    "Transform": "_transform",
    "TransformMacros": "_transform",
    "TransformStep": "_transform",
}


__getattr__ = on_demand(__name__, _LAZY)


__all__ = [
    "ClusterProcs",
    "Job",
    "ProcAd",
    "SubmitConfig",
    "SubmitDescription",
    "SubmitError",
    "Transform",
    "TransformMacros",
    "TransformStep",
    "dry_run_chunks",
    "dry_run_text",
    "split_v2_raw",
]
