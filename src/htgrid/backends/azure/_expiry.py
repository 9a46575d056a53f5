"""Expiry that Azure itself enforces, so a VM or scale set stops at its time without htgrid.

`schedule=` on a create arranges, inside Azure, an action at that time; nothing in htgrid
has to be running then:

* A VM gets an auto-shutdown schedule, `Microsoft.DevTestLab/schedules/
  shutdown-computevm-<vm>` (the resource the portal's "Auto-shutdown" blade makes, for any
  VM, no DevTest Lab needed). Azure's scheduler deallocates the VM at that UTC time of
  day: compute billing stops and the job's machine is gone; the grid manager then sees
  `PowerState/deallocated`, counts the job done and deletes the VM. Such a schedule
  repeats daily, so it would fire early for an expiry more than 24 hours away: those are
  refused. The disks and IP stay until AZURE_VM_DELETE (the VM's `htgrid-expiry` tag
  names the time for any reaper).
* A scale set gets an autoscale setting, `Microsoft.Insights/autoscalesettings/
  <name>-expiry`, with a fixed-date profile that holds capacity at 0 from the expiry on:
  Azure Monitor deletes every instance then, at any distance in the future. Its default
  profile (0 to 1000 instances, no rules) leaves manual scaling alone before that.

Both are plain ARM resources made through the generic resources API (no extra SDK).
"""

from __future__ import annotations

import datetime
from typing import Any

from htgrid.backends.azure._args import EXPIRY_TAG, OWNER_TAG
from htgrid.backends.azure._arm import provider_id
from htgrid.backends.azure._errors import AzureArgumentError
from htgrid.backends.azure._session import Session

__all__ = [
    "AUTOSCALE_API",
    "SCHEDULE_API",
    "autoscale_body",
    "autoscale_id",
    "check_vm_expiry",
    "install_scale_set_expiry",
    "install_vm_shutdown",
    "schedule_id",
    "shutdown_schedule_body",
]

SCHEDULE_API = "2018-09-15"
AUTOSCALE_API = "2022-10-01"
_DAY = datetime.timedelta(hours=24)
_MAX_INSTANCES = "1000"
# A fixed-date profile needs an end; far enough that the scale set is long gone by then.
_HOLD_FOR = datetime.timedelta(days=3650)


def expiry_tag(moment: datetime.datetime) -> dict[str, str]:
    """The tag that records an expiry."""
    return {EXPIRY_TAG: moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def check_vm_expiry(moment: datetime.datetime, now: datetime.datetime) -> None:
    """Refuse an expiry a daily schedule cannot enforce (past, or a day or more away)."""
    if moment <= now:
        raise AzureArgumentError(f"schedule {moment:%Y-%m-%d %H:%M} UTC is in the past")
    if moment - now >= _DAY:
        raise AzureArgumentError(
            "a VM's schedule must be less than 24 hours ahead: its auto-shutdown schedule "
            "repeats daily and would stop the VM early (scale sets take any time)"
        )


def schedule_id(session: Session, group: str, vm_name: str) -> str:
    return provider_id(
        session, group, f"Microsoft.DevTestLab/schedules/shutdown-computevm-{vm_name}"
    )


def shutdown_schedule_body(
    vm_id: str, location: str, moment: datetime.datetime, owner: str
) -> dict[str, Any]:
    """An auto-shutdown schedule for one VM at `moment`'s UTC time of day."""
    return {
        "location": location,
        "tags": {OWNER_TAG: owner, **expiry_tag(moment)},
        "properties": {
            "status": "Enabled",
            "taskType": "ComputeVmShutdownTask",
            "dailyRecurrence": {"time": moment.astimezone(datetime.UTC).strftime("%H%M")},
            "timeZoneId": "UTC",
            "notificationSettings": {"status": "Disabled", "timeInMinutes": 30},
            "targetResourceId": vm_id,
        },
    }


def install_vm_shutdown(
    session: Session, group: str, name: str, vm_id: str, location: str, moment: datetime.datetime
) -> None:
    """Create (or move) the VM's auto-shutdown schedule."""
    body = shutdown_schedule_body(vm_id, location, moment, name)
    session.resource.resources.begin_create_or_update_by_id(
        schedule_id(session, group, name), body, api_version=SCHEDULE_API
    ).result()


def autoscale_id(session: Session, group: str, name: str) -> str:
    return provider_id(session, group, f"Microsoft.Insights/autoscalesettings/{name}-expiry")


def autoscale_body(
    vmss_id: str, location: str, moment: datetime.datetime, owner: str
) -> dict[str, Any]:
    """An autoscale setting that scales the scale set to zero from `moment` on."""
    start = moment.astimezone(datetime.UTC)
    zero = {"minimum": "0", "maximum": "0", "default": "0"}
    return {
        "location": location,
        "tags": {OWNER_TAG: owner, **expiry_tag(moment)},
        "properties": {
            "name": f"{owner}-expiry",
            "enabled": True,
            "targetResourceUri": vmss_id,
            "profiles": [
                {
                    "name": "htgrid-before-expiry",
                    # No rules and default 0: autoscale only keeps the count in range, so
                    # AZURE_VMSS_SCALE's manual sizes stand until the expiry.
                    "capacity": {"minimum": "0", "maximum": _MAX_INSTANCES, "default": "0"},
                    "rules": [],
                },
                {
                    "name": "htgrid-expired",
                    "capacity": zero,
                    "rules": [],
                    "fixedDate": {
                        "timeZone": "UTC",
                        "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "end": (start + _HOLD_FOR).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    },
                },
            ],
        },
    }


def install_scale_set_expiry(
    session: Session,
    group: str,
    name: str,
    vmss_id: str,
    location: str,
    moment: datetime.datetime,
) -> None:
    """Create (or move) the scale set's expiry autoscale setting."""
    body = autoscale_body(vmss_id, location, moment, name)
    session.resource.resources.begin_create_or_update_by_id(
        autoscale_id(session, group, name), body, api_version=AUTOSCALE_API
    ).result()
