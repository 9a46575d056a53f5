"""The annex's lease against moto: how long after its end an annex's instances are
terminated.

    python bench/annex_lease.py [--instances 20,100] [--phases 0.5,15,30,45,59.5]

EventBridge fires the annex's rule once a minute, at a phase of its own. For each phase
(seconds before the lease's end of the last firing before it) an annex of N instances is
made in a moto server in this process, and the lease function (the shipped handler, run
in-process with the event its rule sends) is invoked at that firing and the next. The
clock is injected: a wait for the lease's end passes at once, but the function's own
work (listing, cancelling, terminating in moto) takes its real time. The figure is the
time from the lease's end to TerminateInstances having returned, the worst over the
phases; without the wait (an invocation with no time left to wait) it would be the
next firing's, up to a minute later.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import httpx
from moto.server import ThreadedMotoServer  # type: ignore[import-untyped]

from htgrid.annex import Annexes, AnnexSpec, AwsAnnexes, setup
from htgrid.annex import lease_function as lf
from htgrid.net.security import SecurityConfig, ensure_pool_security

REGION = "us-east-1"


class _Context:
    """Lambda's context of an invocation just begun (the function's whole timeout left)."""

    def get_remaining_time_in_millis(self) -> int:
        return lf.FUNCTION_TIMEOUT * 1000


def _one(home: Path, endpoint: str, count: int, before: float) -> tuple[float, float]:
    httpx.post(f"{endpoint}/moto-api/reset", timeout=120).raise_for_status()
    setup(AwsAnnexes(REGION))
    skew = [0.0]

    def clock() -> float:
        return time.time() + skew[0]

    def sleep(seconds: float) -> None:
        skew[0] += seconds

    made = Annexes(AwsAnnexes(REGION, clock=clock), home, pool="127.0.0.1:9618").create(
        AnnexSpec("bench", count=count, lifetime=3600, image_ids=("ami-12c6146b",))
    )
    session = boto3.session.Session(region_name=REGION)
    clients: dict[str, Any] = {}

    terminated: list[float] = []

    def client(service: str) -> Any:
        made = clients.setdefault(service, session.client(service))
        if service == "ec2" and not terminated:
            made.meta.events.register(
                "after-call.ec2.TerminateInstances", lambda **_: terminated.append(clock())
            )
            terminated.append(0.0)  # registered
        return made

    event = {"htgrid": "annex-lease", "AnnexName": "bench",
             "LeaseExpiration": int(made.lease_end)}  # fmt: skip
    end = float(event["LeaseExpiration"])
    skew[0] = end - before - time.time()
    done = lf.handler(event, _Context(), clock=clock, clients=client, sleep=sleep)
    if not done.get("expired"):  # no wait possible: the next minute's firing
        skew[0] += 60
        done = lf.handler(event, _Context(), clock=clock, clients=client, sleep=sleep)
    assert len(done["terminated"]) == count, done
    return terminated[-1] - end, clock() - end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", default="20,100")
    parser.add_argument("--phases", default="0.5,15,30,45,59.5")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing",
                      AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION)  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            ensure_pool_security(SecurityConfig.load(home))
            os.environ["HTGRID_HOME"] = str(home)
            for count in (int(n) for n in args.instances.split(",")):
                runs = [_one(home, endpoint, count, float(p)) for p in args.phases.split(",")]
                delays, ends = [r[0] for r in runs], [r[1] for r in runs]
                print(
                    f"{count:4d} instances: TerminateInstances returned {min(delays):.2f}-"
                    f"{max(delays):.2f} s after the lease's end, the function done "
                    f"{min(ends):.2f}-{max(ends):.2f} s after (phases {args.phases} s before)"
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
