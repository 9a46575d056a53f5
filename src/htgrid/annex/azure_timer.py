"""The annex's lease on Azure, every minute: the timer function `htgrid annex setup
--cloud azure` deploys to its function app (Azure Functions, Python, the v1 model: this
file is `htgrid_annex_lease/__init__.py`, azure_runbook.py beside it, and function.json
a timerTrigger at "0 * * * * *"). Standard library only, as the runbook.

Automation runs a schedule no more often than hourly, and starts a job minutes late at
times, so the runbook alone cannot end an annex within a minute of its lease. Each
minute this function reads every annex's lease (the lease schedules `annex create` makes
before any scale set, and `extend` moves: the annexes' only record) and

* ends each annex whose lease has passed (azure_runbook.enforce: its scale sets with
  their VMs, NICs and disks, its identities' role assignments, its Key Vault secrets,
  then its schedules: the lease removes itself last, so a failed step is tried again);
* in a lease's last minute waits for its end and ends it then, not up to a minute late
  (bounded by the invocation's budget, as the Lambda function's wait);
* ends a scale set no lease rules once the lease on its tag has passed;
* deletes the annexes' VMs that shut themselves down without deleting themselves
  (Azure keeps them allocated, and billed);
* gives a live annex's Spot scale set back the capacity Azure evicted (policy Delete:
  the VM is gone and the set one smaller), to the target on its `htgrid:Capacity` tag,
  which falls as its VMs shut themselves down (a Spot node leaves its deletion to this
  timer, so that going idle is told apart from an eviction);
* writes into the setup's vault the lease and token `extend` wrote in a user's own
  vault, for an annex made before its user had one (its nodes read the setup's vault).

App settings: HTGRID_ANNEX_PLACE (the lease event's place: subscription, group,
account, vault, ARM's address); the app's managed identity (IDENTITY_ENDPOINT,
IDENTITY_HEADER) holds the lease runbook's role. Nothing is kept between runs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from . import azure_runbook as rb

__all__ = ["FUNCTION", "MAX_WAIT", "SCHEDULE", "function_json", "main", "tick"]

#: The function's name (its folder in the app's package).
FUNCTION = "htgrid_annex_lease"
#: NCRONTAB (with seconds): at second 0 of every minute.
SCHEDULE = "0 * * * * *"
#: The most one run waits for a lease's end: the timer fires again a minute later.
MAX_WAIT = 60.0


def function_json() -> dict[str, Any]:
    """The function's function.json (its timer binding)."""
    return {
        "scriptFile": "__init__.py",
        "bindings": [
            {
                "name": "timer",
                "type": "timerTrigger",
                "direction": "in",
                "schedule": SCHEDULE,
                "runOnStartup": False,
                "useMonitor": True,
            }
        ],
    }


def _wait_until(end: float, clock: Callable[[], float], sleep: Callable[[float], None],
                budget: float) -> None:  # fmt: skip
    """Sleep until `end` if it is within `budget` seconds (a sleep may return a little
    early by the wall clock: sleep on, a little)."""
    left = end - clock()
    waited = 0.0
    while left > 0 and waited + left <= budget + 1:
        step = max(left, 0.01)
        sleep(step)
        waited += step
        left = end - clock()


def tick(arm: rb.Arm, clock: Callable[[], float] = time.time,
         sleep: Callable[[float], None] = time.sleep, budget: float = MAX_WAIT) -> dict[str, Any]:  # fmt: skip
    """One run of the timer: what it ended, as a dict (the function logs it)."""
    started = clock()
    latest: dict[str, float] = {}
    for _, annex, end in rb.leases(arm):
        latest[annex] = max(end, latest.get(annex, end))
    ended: list[dict[str, Any]] = []
    for annex, end in sorted(latest.items(), key=lambda item: item[1]):
        if end > clock():
            _wait_until(end, clock, sleep, budget - (clock() - started))
        if end <= clock():
            ended.append(rb.enforce(arm, annex, end, clock()))
    live = {annex for annex, end in latest.items() if end > clock()}
    unruled: list[str] = []
    stopped: list[str] = []
    restored: dict[str, int] = {}
    for annex, vmss in rb.scale_sets(arm):
        tags = vmss.get("tags") or {}
        if annex not in latest and _number(tags.get(rb.LEASE_TAG)) <= clock():
            unruled.append(rb.end_scale_set(arm, vmss))
            continue
        gone, asked = rb.tend(arm, vmss, restore=annex in live)
        stopped += gone
        if asked:
            restored[str(vmss["name"])] = asked
    followed = rb.follow_moved(arm, live)
    return {"ended": ended, "unruled": unruled, "stopped": stopped, "restored": restored,
            "followed": followed}  # fmt: skip


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0  # a tag no one can read: its lease is long gone


def main(timer: object = None) -> None:
    """The Functions worker's entry, once a minute."""
    place = rb.Place.of(json.loads(os.environ["HTGRID_ANNEX_PLACE"]))
    tokens: dict[str, str] = {}

    def token(resource: str) -> str:
        if resource not in tokens:
            tokens[resource] = rb.identity_token(resource + "/")
        return tokens[resource]

    done = tick(rb.Arm(place, token))
    logging.getLogger(FUNCTION).info("%s", json.dumps(done, sort_keys=True))
