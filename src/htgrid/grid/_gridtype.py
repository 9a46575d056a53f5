"""Grid types plug in here: one `GridType` value per type, chosen by GridResource's first word.

A type lives in its own folder (grid/batch, grid/condor, ...) with its state Enum and
transition table, its Resource subclass (ping, bulk status), its GridJob subclass (the
actions), its GridResource and GridJobId formats, and declares itself with a GridType
value listed in `_registry.GRID_TYPES`:

* `name` and `aliases`: the first words of GridResource it answers to;
* `parse_resource`: GridResource read into the type's resource name (its `key` names
  the one Resource object shared by the jobs there);
* `gahp`: the GAHP server a resource talks to, its key and command line;
* `credential`: the job's own credential that server presents (condor: ScitokensFile),
  if the type has one: jobs with different ones get resources and servers of their own;
* `resource` and `new_job`: the Resource and GridJob classes;
* `remote` and `active_lines`: how `htgrid q -better-analyze` names the job's remote
  part (GridJobId) and what more it says of a submitted job.

Nothing outside a type's folder names the type.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from htgrid._privsep import Account, PrivilegeError, as_owner
from htgrid.classad import ClassAd
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._gridids import ResourceName
from htgrid.grid._job import GridJob
from htgrid.grid._resource import Resource
from htgrid.grid._task import Services
from htgrid.queue import JobId

__all__ = ["GahpCredential", "GahpFactory", "GridType", "Remote", "fixed_gahp"]

#: Gives the (shared) GAHP server for a key, started with `argv` when first used.
GahpFactory = Callable[[str, Sequence[str]], GahpHandle]


N = TypeVar("N", bound=ResourceName)


@dataclass(frozen=True, slots=True)
class Remote:
    """A job's GridJobId as explanations name it: the idempotency key, and the remote id."""

    key: str
    remote_id: str | None
    #: "batch job" or "instance"; "tag" or "client token"; who reports the status.
    noun: str
    key_noun: str
    reporter: str


@dataclass(frozen=True, slots=True)
class GahpCredential:
    """A job's own credential file, which its GAHP server presents (started with `argv`)."""

    path: str
    argv: tuple[str, ...]

    def unreadable(self, owner: Account | None) -> str | None:
        """Why `owner` (None: this process's user) cannot read the file, if it cannot:
        its GAHP server, run as the owner, would present no token at all. Blocking."""
        try:
            with as_owner(owner):
                os.close(os.open(self.path, os.O_RDONLY | os.O_CLOEXEC))
        except (OSError, PrivilegeError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            return f"cannot read the credential {self.path}: {why}"
        return None


def _no_lines(ad: ClassAd) -> list[str]:
    return []


def _no_credential(ad: ClassAd) -> GahpCredential | None:
    return None


@dataclass(frozen=True, slots=True)
class GridType(Generic[N]):
    """How the grid manager runs the jobs of one grid type."""

    #: The first word of GridResource (after alias folding, see _registry.grid_type_of).
    name: str
    #: GridResource -> the type's resource name; UnsupportedGridJob if this grid manager
    #: cannot run it.
    parse_resource: Callable[[str], N]
    #: The GAHP server of a resource: its key (one server per key) and command line.
    gahp: Callable[[N, Services], tuple[str, Sequence[str]]]
    #: Build the resource for a GridResource read (its GAHP server given).
    resource: Callable[[N, GahpHandle, Services], Resource[Any, N]]
    #: Build a job object for an adopted job ad.
    new_job: Callable[[JobId, ClassAd, Any, Services], GridJob[Any, Any]]
    #: The job ad's GridJobId as explanations name it (None: nothing submitted yet).
    remote: Callable[[ClassAd], Remote | None]
    #: More first words of GridResource that mean this type (legacy names).
    aliases: frozenset[str] = frozenset()
    #: What an explanation adds for a job with a remote id, not held, removed or done.
    active_lines: Callable[[ClassAd], list[str]] = _no_lines
    #: The job's own credential its GAHP server presents, if any (HTCondor keys the
    #: resource and the server by it: a job cannot borrow another job's).
    credential: Callable[[ClassAd], GahpCredential | None] = _no_credential

    def resource_key(self, grid_resource: str) -> str:
        """The name of the resource a GridResource names; UnsupportedGridJob if bad."""
        return self.parse_resource(grid_resource).key

    def new_resource(
        self,
        key: str,
        gahps: GahpFactory,
        services: Services,
        credential: GahpCredential | None = None,
    ) -> Resource[Any, N]:
        """The resource named `key`, with its GAHP server from `gahps` (the one presenting
        `credential`, if given)."""
        name = self.parse_resource(key)
        gahp_key, argv = self.gahp(name, services)
        if credential is not None:
            gahp_key, argv = f"{gahp_key}#{credential.path}", [*argv, *credential.argv]
        return self.resource(name, gahps(gahp_key, argv), services)


def fixed_gahp(
    key: str, argv: Sequence[str]
) -> Callable[[Any, Services], tuple[str, Sequence[str]]]:
    """One GAHP server for every resource of a type: `argv`, under `key`."""
    command = tuple(argv)
    return lambda name, services: (key, command)
