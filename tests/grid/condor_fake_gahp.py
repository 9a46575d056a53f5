"""A scripted condor GAHP for the grid manager's condor tests: the remote schedd is a real
htgrid JobQueue in a directory, and the test plays its execute side.

    python condor_fake_gahp.py --state DIR [anything the real GAHP takes, ignored]

* `DIR/queue`: the remote queue (the test opens it too: job_started, job_exited...).
* `DIR/spool/<c>/<p>/`: the remote sandboxes (STAGE_IN copies the input there).
* `DIR/requests.log`: one line per request, `<command> <n jobs>` (what reached "B").
* `DIR/control/<file>` steers failures: `down` (every command fails as the GAHP does when
  the schedd cannot be reached), `submit-refused` (submits fail with "Permission denied"),
  `submit-crash` (the submit reaches the queue, then the server dies before answering),
  `stage-out-fail`, `stage-in-too-large` and `stage-out-too-large` (the GAHP's refusal of a
  sandbox over the remote MAX_TRANSFER_*_MB), `status-busy` (status queries other than the
  ping's fail, the schedd still answering: no news about any job), `stage-out-slow` (a
  stage-out waits while the file is there), `update-down` (updates fail as when the
  schedd cannot be reached: the rest works), `update-hang` (an update never gets through:
  the server writes its pid to `DIR/control/hung.pid` and waits, for the test to kill it).
* A job that leaves the remote queue takes its sandbox along (the schedd's spool sweep).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.gahp import Call, Command, GahpServer, GahpVersion
from htgrid.queue import Identity, InvalidTransition, JobAction, JobNotFound, JobQueue

ADMIN = Identity("condor", admin=True)
DOWN = "Failed to connect to schedd remote@test: connection refused"


class FakeSchedd:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.control = state / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.queue = JobQueue.open(state / "queue", fsync=False)

    def _log(self, command: str, count: int = 1) -> None:
        with open(self.state / "requests.log", "a", encoding="ascii") as out:
            out.write(f"{command} {count}\n")

    def _flag(self, name: str) -> bool:
        return (self.control / name).exists()

    async def submit(self, call: Call) -> Sequence[str]:
        self._log(call.command)
        if self._flag("down"):
            return ("F", "NULL", DOWN)
        if self._flag("submit-refused"):
            return ("F", "NULL", "Permission denied")
        ad = ClassAd(call.args[1])
        ad["Owner"] = "alice"
        cluster = self.queue.submit(ADMIN, ad, 1)
        if self._flag("submit-crash"):
            (self.control / "submit-crash").unlink()
            os._exit(9)  # the submit got there; its answer never does
        return ("S", f"{cluster}.0", "NULL")

    async def status(self, call: Call) -> Sequence[str]:
        if self._flag("down"):
            self._log(call.command)
            return ("F", DOWN, "0")
        if self._flag("status-busy") and call.args[1] != "False":
            self._log(call.command)
            return ("F", "Error: the schedd is too busy to answer queries", "0")
        ads = self.queue.query(call.args[1])
        self._log(call.command, len(ads))
        now = int(time.time())
        texts = []
        for ad in ads:
            ad["ServerTime"] = now
            texts.append(repr(ad))
        return ("S", "NULL", str(len(texts)), *texts)

    async def act(self, call: Call) -> Sequence[str]:
        self._log(call.command)
        if self._flag("down"):
            return ("F", DOWN)
        action = {
            "CONDOR_JOB_REMOVE": JobAction.Remove,
            "CONDOR_JOB_HOLD": JobAction.Hold,
            "CONDOR_JOB_RELEASE": JobAction.Release,
        }[call.command]
        try:
            done = self.queue.act(action, call.args[1], ADMIN, call.args[2])
        except JobNotFound:
            return ("F", "Job not found")
        except InvalidTransition:
            return ("F", "Already done")
        return ("S", "NULL") if done else ("F", "Already done")

    async def update(self, call: Call) -> Sequence[str]:
        self._log(call.command)
        if self._flag("down") or self._flag("update-down"):
            return ("F", DOWN)
        if self._flag("update-hang"):
            (self.state / "control" / "hung.pid").write_text(str(os.getpid()))
            await asyncio.Event().wait()
        attrs = ClassAd(call.args[2])
        try:
            for name in attrs:
                self.queue.update(call.args[1], {name: attrs[name]})
            ad = self.queue.get(call.args[1])
            if ad.get("LeaveJobInQueue") is False and ad.get("JobStatus") == 4:
                self.queue.destroy(call.args[1])
                shutil.rmtree(self.state / "spool" / call.args[1].replace(".", "/"))
        except JobNotFound:
            return ("F", "Job not found")
        return ("S", "NULL")

    def sandbox(self, job_id: str) -> Path:
        cluster, proc = job_id.split(".")
        path = self.state / "spool" / cluster / proc
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def stage_in(self, call: Call) -> Sequence[str]:
        self._log(call.command)
        if self._flag("down"):
            return ("F", DOWN)
        if self._flag("stage-in-too-large"):
            # Its text would read as transient too ("GAHP"): the prefix must win.
            return ("F", "Transfer input too large: the GAHP sent 3 MB, MAX_TRANSFER_INPUT_MB = 1")
        ad = ClassAd(call.args[1])
        job_id = f"{ad['ClusterId']}.{ad['ProcId']}"
        box = self.sandbox(job_id)
        names = []
        if ad.get("TransferExecutable") is not False:
            names.append(ad["Cmd"])
        if ad.get("In") not in (None, "", "/dev/null"):
            names.append(ad["In"])
        names += [n for n in str(ad.get("TransferInput") or "").split(",") if n]
        for name in names:
            shutil.copy(name, box / os.path.basename(name))
        try:
            self.queue.act(JobAction.Release, job_id, ADMIN, "Data files spooled")
            self.queue.update(job_id, {"Iwd": str(box), "StageInFinish": int(time.time())})
        except JobNotFound:
            return ("F", "Job not found")
        return ("S", "NULL")

    async def stage_out(self, call: Call) -> Sequence[str]:
        self._log(call.command)
        if self._flag("down"):
            return ("F", DOWN)
        if self._flag("stage-out-fail"):
            return ("F", "Error receiving files: disk full")
        if self._flag("stage-out-too-large"):
            return ("F", "Transfer output too large: 5 MB for the GAHP, MAX_TRANSFER_OUTPUT_MB = 1")
        while self._flag("stage-out-slow"):
            await asyncio.sleep(0.05)
        try:
            ad = self.queue.get(call.args[1])
        except JobNotFound:
            return ("F", "Job not found")
        box = self.sandbox(call.args[1])
        for attr in ("Out", "Err"):
            target = ad.get(f"SUBMIT_{attr}")
            if isinstance(target, str) and (box / str(ad[attr])).exists():
                tmp = target + ".part"
                shutil.copy(box / str(ad[attr]), tmp)
                os.replace(tmp, target)
        self.queue.update(call.args[1], {"StageOutFinish": int(time.time())})
        return ("S", "NULL")

    async def lease(self, call: Call) -> Sequence[str]:
        count = int(call.args[1])
        self._log(call.command, count)
        if self._flag("down"):
            return ("F", DOWN, "NULL")
        pairs = call.args[2:]
        done = []
        for index in range(count):
            job_id, expiration = pairs[2 * index], int(pairs[2 * index + 1])
            try:
                self.queue.update(job_id, {"JobLeaseExpiration": expiration})
            except JobNotFound:
                continue
            done.append(job_id)
        return ("S", "NULL", ",".join(done) or "NULL")

    def server(self) -> GahpServer:
        commands = [
            Command("CONDOR_JOB_SUBMIT", 2, self.submit),
            Command("CONDOR_JOB_STATUS_CONSTRAINED", 2, self.status),
            Command("CONDOR_JOB_REMOVE", 3, self.act),
            Command("CONDOR_JOB_HOLD", 3, self.act),
            Command("CONDOR_JOB_RELEASE", 3, self.act),
            Command("CONDOR_JOB_UPDATE", 3, self.update),
            Command("CONDOR_JOB_STAGE_IN", 2, self.stage_in),
            Command("CONDOR_JOB_STAGE_OUT", 2, self.stage_out),
            Command("CONDOR_JOB_UPDATE_LEASE", 2, self.lease, variadic=True),
        ]
        return GahpServer(GahpVersion("2.0.1", datetime.date(2005, 6, 27), "Fake GAHP"), commands)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, required=True)
    args, _ = parser.parse_known_args(argv)
    asyncio.run(FakeSchedd(args.state).server().serve_stdio())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
