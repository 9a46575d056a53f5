"""A compute entrypoint's configuration (HTCondor-CE's shipped defaults), for `htgrid ce up`.

`ce_config(batch, port)` is the htgrid.conf of a new CE: its daemons (the queue, its own
collector on `port`, the grid manager and the job router), HTCondor-CE's router
defaults (01-ce-router-defaults.conf: the pre- and post-route transforms that turn the
pilot vocabulary into requests, the source constraint, the per-route limits and the
system policy that holds unroutable jobs and removes overdue ones) and one route to the
site's batch system (02-ce-<batch>.conf). The transforms are HTCondor-CE's own text,
so a site's additions written for HTCondor-CE read the same here:

    xcount (or RequestCpus > 1, else default_xcount)    -> RequestCpus
    maxMemory (else default_maxMemory, else 2000 MB)    -> RequestMemory
    maxWallTime min (else BatchRuntime s, else          -> BatchRuntime (seconds)
      default_maxWallTime min, else ROUTED_JOB_MAX_TIME)
    queue (else default_queue)                          -> BatchQueue
    WantWholeNode                                       -> WholeNodes

Where htgrid differs: htgrid.conf is one file, so the defaults are written into it once
(edit them there: a later line of the same name wins); and `$(JobStatus != 3)`, which
HTCondor's configuration leaves as it is, is written `(JobStatus != 3)`.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.queue import JobQueue, JobStatus
from htgrid.router._routes import RouterConfig

__all__ = ["CE_DAEMONS", "CE_DEFAULTS", "CE_PORT", "ce_config", "ce_route", "route_ads"]

#: HTCondor-CE's collector port.
CE_PORT: Final = 9619
CE_DAEMONS: Final = ("MASTER", "SCHEDD", "COLLECTOR", "GRIDMANAGER", "JOB_ROUTER")
#: The batch systems a route names by one word (`batch <word>`, 02-ce-<word>.conf).
BATCH_SYSTEMS: Final = ("slurm", "sge", "pbs", "lsf", "fork")

CE_DEFAULTS: Final = r"""
# ---- HTCondor-CE's job router defaults (01-ce-router-defaults.conf) ----------------
CONDORCE_MAX_JOBS = 10000
GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE = 10000
JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE = 2000
JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE = 10000
JOB_ROUTER_NAME = htcondor-ce
# Only route jobs for either the vanilla or standard universe.
JOB_ROUTER_SOURCE_JOB_CONSTRAINT = target.JobUniverse =?= 5 || target.JobUniverse =?= 1

# Hold jobs not removed that: 1. are not routed and not of a universe the CE takes,
HOLD_CLAUSE_1 = (RoutedBy is null && JobUniverse =!= 1 && JobUniverse =!= 5 && JobUniverse =!= 7 && JobUniverse =!= 12)
HOLD_REASON_1 = "invalid job universe."
# 2. have not been routed and have been idle for 30+ min.
HOLD_CLAUSE_2 = ((JobStatus =?= 1 && time() - EnteredCurrentStatus > 1800) && RoutedToJobId is null && RoutedJob =!= true)
HOLD_REASON_2 = "no matching routes, route job limit, or route failure threshold; see 'HTCondor-CE Troubleshooting Guide'"
SYSTEM_PERIODIC_HOLD = (JobStatus != 3) && ($(HOLD_CLAUSE_1) || $(HOLD_CLAUSE_2))
SYSTEM_PERIODIC_HOLD_REASON = strcat("HTCondor-CE held job due to ", $(HOLD_CLAUSE_1) ? $(HOLD_REASON_1) : $(HOLD_REASON_2))

# Remove jobs on hold for longer than 24 hrs,
REMOVE_CLAUSE_1 = (JobStatus == 5 && time() - EnteredCurrentStatus > 3600*24)
REMOVE_REASON_1 = "being in the hold state for 24 hours."
# routed jobs that have already started once (ENABLE_JOB_RETRIES = true lets them retry),
ENABLE_JOB_RETRIES = false
REMOVE_CLAUSE_2 = ((!isUndefined(RoutedtoJobId) && $(ENABLE_JOB_RETRIES) =!= True) && ((JobStatus == 1 && NumJobStarts == 1) || (NumJobStarts > 1)))
REMOVE_REASON_2 = "disabled job retries"
# completed jobs that have been so for over 30 days,
COMPLETED_JOB_EXPIRATION = 30
REMOVE_CLAUSE_3 = (JobStatus == 4 && time() - EnteredCurrentStatus > $(COMPLETED_JOB_EXPIRATION)*3600*24)
REMOVE_REASON_3 = strcat("job completed over ", $(COMPLETED_JOB_EXPIRATION), " days ago.")
# and jobs past their configured or requested max wall time.
REMOVE_CLAUSE_4 = (JobUniverse == 5 && JobStatus == 2 && (time() - JobCurrentStartDate) > (maxWalltime is undefined ? (BatchRuntime is undefined ? $(ROUTED_JOB_MAX_TIME)*60 : BatchRuntime) : maxWalltime*60))
REMOVE_REASON_4 = strcat("job exceeded allowed walltime: ", maxWalltime is undefined ? (BatchRuntime is undefined ? $(ROUTED_JOB_MAX_TIME)*60 : BatchRuntime) : maxWalltime*60, " minutes.")
SYSTEM_PERIODIC_REMOVE = $(REMOVE_CLAUSE_1) || $(REMOVE_CLAUSE_2) || $(REMOVE_CLAUSE_3) || $(REMOVE_CLAUSE_4)
DEFAULT_REMOVE_REASON = "input files missing."
SYSTEM_PERIODIC_REMOVE_REASON = strcat("CE job removed by SYSTEM_PERIODIC_REMOVE due to ", $(REMOVE_CLAUSE_1) ? $(REMOVE_REASON_1) : $(REMOVE_CLAUSE_2) ? $(REMOVE_REASON_2) : $(REMOVE_CLAUSE_3) ? $(REMOVE_REASON_3) : $(REMOVE_CLAUSE_4) ? $(REMOVE_REASON_4) : $(DEFAULT_REMOVE_REASON))
# The longest a job may run, in minutes (72 hours).
ROUTED_JOB_MAX_TIME = 4320

JOB_ROUTER_PRE_ROUTE_TRANSFORM_NAMES = Base Cleanup OrigRequests
JOB_ROUTER_POST_ROUTE_TRANSFORM_NAMES = WholeNode Cpus Gpus Memory Queue BatchRuntime CERequirements OnExitHold

JOB_ROUTER_TRANSFORM_Base @=jrt
    # Always set the following routed job attributes
    SET RoutedJob                  True
    # Older Condor-C jobs don't add this requirement for GPU jobs and
    # startds don't add a check if GPU detection is not enabled.
    EVALMACRO test_requirements_true unparse(Requirements)=="true"
    if $(test_requirements_true)
        SET Requirements           (RequestGpus?:0) >= (TARGET.Gpus?:0)
    endif
@jrt

JOB_ROUTER_TRANSFORM_Cleanup @=jrt
    # If the batch job is removed then the CE would resubmit it: avoid that
    DELETE PeriodicRemove
    DELETE TotalSubmitProcs
@jrt

JOB_ROUTER_TRANSFORM_OrigRequests @=jrt
    # The AuthToken* attributes can't be sent on to the destination: renamed
    RENAME /^AuthToken.*$/          orig_\0
    # Copy original, incoming job attributes for use in post transforms
    COPY /^OnExitHold.*$/          orig_\0
    COPY BatchRuntime              orig_BatchRuntime
    COPY environment               orig_environment
    # the BLAHP uses WholeNodes=true for the same thing that we use WantWholeNode=true
    COPY WantWholeNode             WholeNodes
@jrt

JOB_ROUTER_TRANSFORM_WholeNode @=jrt
    # Whole node requests against HTCondor pools (TargetUniverse 5) when the source job
    # says 'WantWholeNode = True'
    EVALMACRO test_want_whole_node $(MY.WantWholeNode:False) && $(TargetUniverse)==5
@jrt

JOB_ROUTER_TRANSFORM_Cpus @=jrt
    # RequestCpus: 1. 'xcount' from the source job, 2. its RequestCpus if > 1,
    # 3. default_xcount from the route, 4. 1
    if defined MY.xcount
        EVALSET RequestCpus xcount
    else
        EVALMACRO test_RequestCpus ($(MY.RequestCpus:0)) > 1
        if $(test_RequestCpus)
            # RequestCpus already correct
        else
            EVALSET RequestCpus $(default_xcount:1)
        endif
    endif
    EVALSET remote_SMPGranularity  xcount ?: ($(default_xcount:1))
    COPY    remote_SMPGranularity  remote_NodeNumber
    SET JobIsRunning           (JobStatus =!= 1) && (JobStatus =!= 5)
    if $(test_want_whole_node)
        SET JOB_GLIDEIN_Cpus       "$$([TotalCpus ?: JobCpus])"
        SET GlideinCpusIsGood      int(MATCH_EXP_JOB_GLIDEIN_Cpus ?: "0") isnt error
        SET JobIsRunning           $(MY.JobIsRunning) && GlideinCpusIsGood
        COPY RequestCpus           OriginalCpus
        SET JobCpus                JobIsRunning ? int(MATCH_EXP_JOB_GLIDEIN_Cpus) : OriginalCpus
        SET RequestCpus            TARGET.TotalCpus ?: JobCpus
    endif
@jrt

JOB_ROUTER_TRANSFORM_Gpus @=jrt
    # A whole node job that requests GPUs gets every GPU of the machine it lands on
    REQUIREMENTS RequestGpus isnt undefined
    if $(test_want_whole_node)
        SET JOB_GLIDEIN_GPUs       "$$([TotalGPUs ?: JobGPUs])"
        SET GlideinGPUsIsGood      int(MATCH_EXP_JOB_GLIDEIN_GPUs ?: "0") isnt error
        COPY RequestGPUs           OriginalGPUs
        SET JobGPUs                JobIsRunning ? int(MATCH_EXP_JOB_GLIDEIN_GPUs) : OriginalGPUs
        SET RequestGPUs            ((TARGET.TotalGPUs ?: 0) > 0) ? TotalGPUs: JobGPUs
    endif
@jrt

JOB_ROUTER_TRANSFORM_Memory @=jrt
    # RequestMemory: 1. 'maxMemory' from the source job, 2. default_maxMemory from the
    # route, 3. 2000
    EVALSET RequestMemory maxMemory ?: ($(default_maxMemory:2000))
    SET JobMemory RequestMemory
    if $(test_want_whole_node)
        SET JOB_GLIDEIN_Memory     "$$(TotalMemory:0)"
        COPY RequestMemory OriginalMemory
        COPY RequestMemory remote_OriginalMemory
        SET JobMemory              JobIsRunning ? int(MATCH_EXP_JOB_GLIDEIN_Memory)*95/100 : OriginalMemory
        SET RequestMemory          TARGET.TotalMemory*95/100 ?: JobMemory
    endif
@jrt

JOB_ROUTER_TRANSFORM_Queue @=jrt
    # BatchQueue, unless set: 1. 'queue' from the source job, 2. 'default_queue' from
    # the route, 3. ""
    REQUIREMENTS BatchQueue is undefined
    if defined MY.queue
       EVALSET BatchQueue MY.queue
    else
       EVALSET BatchQueue "$(default_queue)"
    endif
@jrt

JOB_ROUTER_TRANSFORM_BatchRuntime @=jrt
    # BatchRuntime (seconds): 1. 'maxWallTime' (minutes) from the source job, 2. its
    # 'BatchRuntime' (seconds), 3. 'default_maxWallTime' (minutes) from the route,
    # 4. ROUTED_JOB_MAX_TIME (minutes)
    if defined MY.maxWallTime
        EVALSET BatchRuntime 60*maxWallTime
    elif defined MY.orig_BatchRuntime
        # do nothing, BatchRuntime already set
    elif defined default_maxWallTime
        EVALSET BatchRuntime 60*$(default_maxWallTime)
    else
        EVALSET BatchRuntime 60*$(ROUTED_JOB_MAX_TIME:4320)
    endif
@jrt

JOB_ROUTER_TRANSFORM_CERequirements @=jrt
    SET CondorCE 1
    if defined MY.default_CERequirements
        SET CERequirements "$(MY.default_CERequirements),CondorCE"
    else
        SET CERequirements "CondorCE"
    endif
@jrt

JOB_ROUTER_TRANSFORM_OnExitHold @=jrt
    # only if the route specified a minimum walltime
    REQUIREMENTS minWalltime isnt undefined
    SET CondorCE_OnExitHold            RemoteWallClockTime < 60*minWallTime
    SET CondorCE_OnExitHoldSubcode     IfThenElse(CondorCE_OnExitHold ?: False, 42, 1)
    SET CondorCE_OnExitHoldReason      IfThenElse(CondorCE_OnExitHold ?: False, "The job's wall clock time is less than the minimum specified by the job ($(MY.minWalltime)) min", "Job held for unknown reason.")
    if defined MY.orig_OnExitHold
        SET OnExitHold                  (orig_OnExitHold ?: False) || CondorCE_OnExitHold
        SET OnExitHoldSubcode           IfThenElse(orig_OnExitHold ?: False, orig_OnExitHoldSubcode, CondorCE_OnExitHoldSubcode)
        SET OnExitHoldReason            IfThenElse(orig_OnExitHold ?: False, orig_OnExitHoldReason, CondorCE_OnExitHoldReason)
    else
        SET OnExitHold                  CondorCE_OnExitHold
        SET OnExitHoldSubcode           CondorCE_OnExitHoldSubcode
        SET OnExitHoldReason            CondorCE_OnExitHoldReason
    endif
@jrt
"""


def ce_route(batch: str) -> str:
    """The route of 02-ce-<batch>.conf: `batch` is a batch system's name (slurm, sge,
    pbs, lsf, fork) or a whole grid resource (`condor SCHEDD POOL` for another pool)."""
    word = batch.strip()
    if word.lower() in BATCH_SYSTEMS:
        name = {"sge": "SGE_Cluster", "fork": "Local_Fork"}.get(
            word.lower(), f"{word.capitalize()}_Cluster"
        )
        resource = f"batch {word.lower()}"
    else:
        name, resource = "Condor_Pool", word
    return (
        f"\n# ---- the route to the site's batch system (02-ce-*.conf) ----\n"
        f"JOB_ROUTER_ROUTE_NAMES = {name}\n"
        f"JOB_ROUTER_ROUTE_{name} @=jrt\n"
        f"  TargetUniverse = 9\n"
        f'  GridResource = "{resource}"\n'
        f"@jrt\n"
    )


def ce_config(batch: str, port: int = CE_PORT, *, host: str = "localhost") -> str:
    """The htgrid.conf of a new CE routing to `batch` whose collector listens on `port`."""
    return (
        "# A compute entrypoint (`htgrid ce up`): HTCondor-CE's defaults follow; a later\n"
        "# line of the same name replaces an earlier one.\n"
        f"DAEMON_LIST = {', '.join(CE_DAEMONS)}\n"
        f"COLLECTOR_HOST = 127.0.0.1:{port}\n"
        f"SCHEDD_NAME = ce@{host}\n"
        f"TRUST_DOMAIN = ce.{host}\n" + CE_DEFAULTS + ce_route(batch)
    )


def route_ads(queue: JobQueue, config: RouterConfig) -> list[ClassAd]:
    """Each route of `config` with its limits and its routed jobs by state, as the CE
    advertises them (`JobRouterRoutes` of its schedd ad) for grid matchmaking."""
    counts: Counter[tuple[str, int]] = Counter()
    routed = queue.query(
        f"RoutedBy == {quote(config.name)} && RoutedFromJobId isnt undefined",
        ["RouteName", "JobStatus"],
    )
    for ad in routed:
        status = ad.get("JobStatus")
        counts[
            (str(ad.get("RouteName", "")).lower(), status if isinstance(status, int) else 0)
        ] += 1
    out = []
    for route in config.routes:
        key = route.name.lower()
        ad = ClassAd(
            {
                "Name": route.name,
                "TargetUniverse": route.target_universe,
                "MaxJobs": route.max_jobs,
                "MaxIdleJobs": route.max_idle_jobs,
                "FailureRateThreshold": route.failure_rate_threshold,
                "RoutedJobs": sum(n for (name, _), n in counts.items() if name == key),
                "IdleJobs": counts[(key, int(JobStatus.IDLE))],
                "RunningJobs": counts[(key, int(JobStatus.RUNNING))],
                "HeldJobs": counts[(key, int(JobStatus.HELD))],
            }
        )
        if route.grid_resource:
            ad["GridResource"] = route.grid_resource
        if route.requirements:
            ad["Requirements"] = ExprTree(route.requirements)
        out.append(ad)
    return out
