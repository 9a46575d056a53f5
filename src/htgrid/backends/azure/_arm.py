"""Small ARM helpers the VM and scale-set operations share (run in worker threads).

SDK results are new-style models: mappings over the REST JSON. They are read here with
their REST names (`properties`, `vmId`...), which is what the ARM documentation shows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import AzureError as AzureCoreError
from azure.core.exceptions import ResourceNotFoundError

from htgrid.backends.azure._args import OWNER_TAG
from htgrid.backends.azure._errors import AzureError
from htgrid.backends.azure._session import Session

__all__ = [
    "Placement",
    "dig",
    "ensure_group",
    "get_or_none",
    "owned_by",
    "place",
    "provider_id",
    "quietly",
    "split_id",
]

log = logging.getLogger("htgrid.backends.azure")


@dataclass(frozen=True, slots=True)
class Placement:
    """The resource group a VM or scale set lives in, and whether it was made for it alone."""

    group: str
    #: A group named after the VM (HTCondor's layout), created and deleted with it.
    owned: bool


def place(session: Session, name: str, group: str | None) -> Placement:
    """Where a new VM goes: the request's group, the auth file's, else its own group."""
    if group:
        return Placement(group, False)
    if session.default_resource_group:
        return Placement(session.default_resource_group, False)
    return Placement(name, True)


def group_of(session: Session, name: str, group: str | None) -> str:
    """The resource group of an existing VM named by a request."""
    return group or session.default_resource_group or name


def dig(body: Any, *path: str) -> Any:
    """`body[path[0]][path[1]]...`, or None where a level is missing."""
    for part in path:
        if not isinstance(body, Mapping):
            return None
        body = body.get(part)
    return body


def provider_id(session: Session, group: str, path: str) -> str:
    """`/subscriptions/<s>/resourceGroups/<g>/providers/<path>`."""
    return f"/subscriptions/{session.subscription}/resourceGroups/{group}/providers/{path}"


def split_id(resource_id: str) -> tuple[str, str]:
    """The resource group and the last name of an ARM resource id."""
    parts = resource_id.strip("/").split("/")
    lowered = [part.lower() for part in parts]
    try:
        group = parts[lowered.index("resourcegroups") + 1]
    except (ValueError, IndexError):
        group = ""
    return group, parts[-1]


def owned_by(resource: Any, name: str) -> bool:
    """Whether the GAHP created `resource` for the VM or scale set `name`."""
    tags = dig(resource, "tags") or {}
    return bool(tags.get(OWNER_TAG) == name)


def get_or_none(getter: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`getter(...)`, or None when Azure says the resource (or its group) does not exist."""
    try:
        return getter(*args, **kwargs)
    except ResourceNotFoundError:
        return None


def quietly(what: str, action: Callable[[], Any]) -> None:
    """Best-effort clean-up: log a failure instead of hiding the error being handled."""
    try:
        action()
    except (AzureCoreError, AzureError) as err:
        log.warning("clean-up step %s failed: %s", what, err)


def ensure_group(session: Session, placement: Placement, location: str, name: str) -> None:
    """Create the resource group if needed; a group of the VM's own carries its owner tag."""
    groups = session.resource.resource_groups
    if placement.owned:
        groups.create_or_update(placement.group, {"location": location, "tags": {OWNER_TAG: name}})
    elif not groups.check_existence(placement.group):
        groups.create_or_update(placement.group, {"location": location})


def delete_group_if_owned(session: Session, group: str, name: str) -> bool:
    """Delete the group made for `name` alone (tag checked: never a user's group)."""
    if group.lower() != name.lower():
        return False
    found = get_or_none(session.resource.resource_groups.get, group)
    if found is None or not owned_by(found, name):
        return False
    session.resource.resource_groups.begin_delete(group).result()
    return True
