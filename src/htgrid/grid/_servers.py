"""The grid manager's GAHP servers, one per key: its own, and those run as a job's owner.

HTCondor runs a grid manager per user; here one grid manager runs every user's jobs, and
the GAHP servers of a job run as another user are that user's: keyed by the owner, run
as the owner, with their records (GAHP_TEMP) and tokens in the owner's directories.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from htgrid._privsep import JOB_UMASK, Account, owned_dir, spawn_identity
from htgrid.client import user_token_dir
from htgrid.gahp import Clock
from htgrid.gahp.client import GahpProcess, spawn_subprocess
from htgrid.grid._config import GridManagerConfig
from htgrid.grid._gahps import GahpHandle, GahpPids
from htgrid.grid._gridtype import GahpFactory

__all__ = ["GahpServers"]


@dataclass(eq=False)
class GahpServers:
    """The GAHP servers started so far (`handles`, by key), each started on first use."""

    #: The records of this process's own servers.
    temp: Path
    #: Where each owner's servers keep theirs (a directory per owner).
    owners_temp: Path
    _: KW_ONLY
    clock: Clock
    config: GridManagerConfig
    pids: GahpPids
    handles: dict[str, GahpHandle] = field(default_factory=dict)

    def retune(self, config: GridManagerConfig) -> None:
        """New settings (a reconfig): for each server started from now on, a restarted
        one too, BATCH_GAHP's command among them (a resource's own bound on requests in
        flight is kept)."""
        old, self.config = self.config, config
        for handle in self.handles.values():
            pending = handle.config.max_pending_requests
            handle.config = dataclasses.replace(config, max_pending_requests=pending)
            if handle.argv == old.batch_gahp:  # the batch GAHP's (BATCH_GAHP): its next start
                handle.argv = config.batch_gahp

    def factory(self, owner: Account | None) -> GahpFactory:
        """The servers of jobs run as `owner` (None: as this process's own user)."""
        return self._own if owner is None else functools.partial(self._owners, owner)

    async def close(self) -> None:
        for handle in self.handles.values():
            await handle.close()

    def _own(self, key: str, argv: Sequence[str]) -> GahpHandle:
        handle = self.handles.get(key)
        if handle is None:
            env = dict(os.environ)
            # The GAHP keeps its job records there (HTCondor's GAHP_TEMP): they must
            # outlive the server and this grid manager.
            env["GAHP_TEMP"] = str(self.temp)
            # It writes the jobs' files (their output staged back): with a job's umask.
            spawn = functools.partial(spawn_subprocess, umask=JOB_UMASK)
            handle = GahpHandle(
                key, argv, env, clock=self.clock, config=self.config, pids=self.pids, spawn=spawn
            )
            self.handles[key] = handle
        return handle

    def _owners(self, owner: Account, key: str, argv: Sequence[str]) -> GahpHandle:
        """The GAHP server `key` of `owner`'s jobs, run as `owner`: what it reads (the
        credential files its jobs name) and runs (their batch jobs) is the owner's. Its
        records (GAHP_TEMP) are in a directory of the owner's."""
        key = f"{key}#{owner.name}"
        handle = self.handles.get(key)
        if handle is None:
            temp = self.owners_temp / owner.name
            env = dict(os.environ, GAHP_TEMP=str(temp), HOME=owner.home)
            env.update(USER=owner.name, LOGNAME=owner.name)
            # The GAHP finds the owner's tokens in the owner's home, not the grid manager's.
            mine, theirs = str(user_token_dir()), str(Path(owner.home) / ".htgrid" / "tokens.d")
            argv = [theirs if word == mine else word for word in argv]

            async def spawn(argv: Sequence[str], env: Mapping[str, str] | None) -> GahpProcess:
                await asyncio.to_thread(_owned_temp, temp, owner)
                return await spawn_subprocess(argv, env, umask=JOB_UMASK, **spawn_identity(owner))

            handle = GahpHandle(
                key,
                argv,
                env,
                clock=self.clock,
                config=self.config,
                pids=self.pids,
                spawn=spawn,
                owner=owner,
            )
            self.handles[key] = handle
        return handle


def _owned_temp(temp: Path, owner: Account) -> None:
    """`temp`, an owner's GAHP records directory (0700, the owner's), made if missing;
    its parent passable (0711) and the grid manager's."""
    owned_dir(temp.parent, None, 0o711)
    owned_dir(temp, owner)
