#!/usr/bin/env python3
"""A job-router translate hook, written for HTCondor's classad2 bindings.

HTCondor-CE's job router runs a hook like this with the route ad and the job ad on stdin
(old syntax, separated by a line of dashes) and reads the changed job ad from stdout.
It runs on htgrid unchanged but for the import below; with the official bindings it is
`import classad2 as classad`.
"""

import sys

import htgrid.classad as classad


def transform(route, job):
    """Send the job to the route's batch queue and fit its request to the route's limits."""
    job["GridResource"] = "batch " + route.eval("BatchSystem")
    job["BatchQueue"] = route["Queue"]
    memory = job.eval("RequestMemory")
    floor = route.eval("MinMemory")
    if memory is classad.Value.Undefined or memory < floor:
        job["RequestMemory"] = floor
    job["BatchRuntime"] = classad.ExprTree(f"{route['MaxWallTime']} * 60")
    job["Requirements"] = classad.ExprTree(f"({job.lookup('Requirements')}) && TARGET.HasDocker")
    job["RoutedBy"] = route["Name"]
    job["OriginalOwner"] = job["Owner"]
    job["RouteTags"] = [route["Name"], "routed"]
    if "x509userproxy" in job:
        del job["x509userproxy"]
    return job


def main():
    text = sys.stdin.read()
    route_text, _, job_text = text.partition("------\n")
    route = classad.parseOne(route_text, classad.ParserType.Old)
    job = classad.parseOne(job_text, classad.ParserType.Old)
    sys.stdout.write(transform(route, job).printOld())
    return 0


if __name__ == "__main__":
    sys.exit(main())
