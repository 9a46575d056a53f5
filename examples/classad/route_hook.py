#!/usr/bin/env python3
"""A job-router translate hook, written for HTCondor's classad2 bindings.

The job router runs it (`<KEYWORD>_HOOK_TRANSLATE_JOB`) for a job a route matched, with
the route on stdin as JobRoute::RouteDescription gives it (one line, new syntax:
`[ Name = "Slurm_Short"; TargetUniverse = 9; GridResource = "batch slurm" ]`), a line
`------`, and the job ad (old syntax); it prints the job to route, which the route's own
transform (JOB_ROUTER_ROUTE_<name>) then edits. What a route's jobs get at this site is
kept here, by route name. It runs on htgrid unchanged but for the import below; with the
official bindings it is `import classad2 as classad`.
"""

import sys

import htgrid.classad as classad

#: Per route (JOB_ROUTER_ROUTE_NAMES): the batch queue, the least memory (MiB) a job is
#: given, and the longest it may run (minutes).
SITE = {
    "Slurm_Short": {"Queue": "short", "MinMemory": 2048, "MaxWallTime": 120},
    "Slurm_Long": {"Queue": "long", "MinMemory": 4096, "MaxWallTime": 2880},
}


def transform(route, job):
    """Send the job to its route's batch queue and fit its request to the route's limits."""
    name = route["Name"]
    limits = SITE.get(name)
    if limits is None:
        return job  # a route this site sets nothing for: the job as it came
    job["BatchQueue"] = limits["Queue"]
    memory = job.eval("RequestMemory")
    if memory is classad.Value.Undefined or memory < limits["MinMemory"]:
        job["RequestMemory"] = limits["MinMemory"]
    job["BatchRuntime"] = classad.ExprTree(f"{limits['MaxWallTime']} * 60")
    job["Requirements"] = classad.ExprTree(f"({job.lookup('Requirements')}) && TARGET.HasDocker")
    job["SiteRoute"] = name  # (RoutedBy is the router's own: its name)
    job["RoutedTo"] = route.eval("GridResource")
    job["OriginalOwner"] = job["Owner"]
    job["RouteTags"] = [name, "routed"]
    if "x509userproxy" in job:
        del job["x509userproxy"]
    return job


def main():
    route_text, _, job_text = sys.stdin.read().partition("\n------\n")
    route = classad.parseOne(route_text, classad.ParserType.New)
    job = classad.parseOne(job_text, classad.ParserType.Old)
    sys.stdout.write(transform(route, job).printOld())
    return 0


if __name__ == "__main__":
    sys.exit(main())
