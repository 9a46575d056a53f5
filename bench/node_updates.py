"""One execute node's collector update: bytes sent and CPU, with N dynamic slots.

    PYTHONPATH=$PWD/src python bench/node_updates.py [--slots 10 100] [--updates 200] [--tls]

A node (its Startd's update, as the advertise loop makes it) and a collector app in
one process, over httpx's ASGI transport (no sockets). Two cases, each after a first
update that the collector took: nothing changed but the clock (a pool of long jobs,
every UPDATE_INTERVAL), and one dynamic slot's activity changed (a short job started
or ended). Per update: the requests, the bytes of their bodies, the node's CPU (its
side of the update, without the collector's) and the collector's. Runs on code before
the refreshes too (the Startd's `_advertise`), to compare.

`--tls`: the collector a real one of a pool (TLS, tokens) in a thread of this process,
the node's CPU its own thread's (the update as a node makes it, connection and all);
the requests, bytes and the collector's CPU are not counted then.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from htgrid.classad import ClassAd
from htgrid.collector import AdStore, CollectorClient
from htgrid.collector.app import create_app
from htgrid.startd import ClaimState, Resources, StartdConfig
from htgrid.startd._ads import AdContext
from htgrid.startd._claims import Slots
from htgrid.startd._daemon import Startd
from htgrid.startd._machine import MachineInfo
from htgrid.testing.collector import collector_thread, pool_home


class _Counted(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests = 0
        self.bytes = 0
        self.cpu = 0.0  # in the collector (its app and its store's thread)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        self.requests += 1
        self.bytes += len(body)
        start = time.process_time()
        response = await self.inner.handle_async_request(request)
        await response.aread()
        self.cpu += time.process_time() - start
        return response


def _node(home: Path, slots: int) -> tuple[Startd, Any]:
    have = Resources(slots + 1, 1000 * (slots + 1), 1_000_000 * (slots + 1))
    machine = MachineInfo("node.bench", "X86_64", "LINUX", "AlmaLinux", 9, 902, "Alma", have, have)
    config = StartdConfig.load(home)
    startd = Startd(config, pool="collector.bench", machine=machine)
    startd._slots = Slots(machine.offered, machine.hostname)
    startd._ctx = AdContext(config, machine, "<127.0.0.2:9618>", startd.started)
    # A node of another host advertises its TLS certificate (a P-256 one is ~700 bytes).
    body = "".join(chr(65 + (i * 7) % 26) for i in range(560))
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    startd.ctx.certificate = "\n".join(
        ["-----BEGIN CERTIFICATE-----", *lines, "-----END CERTIFICATE-----", ""]
    )
    for n in range(slots):
        job = ClassAd({"ClusterId": n, "ProcId": 0, "User": "u@bench", "Owner": "u"})
        claim = startd.slots.carve(f"{n:030d}", Resources(1, 1000, 1_000_000), job, "s@x", 60)
        claim.move(ClaimState.STARTING, time.time())
        claim.move(ClaimState.RUNNING, time.time())
    ads = getattr(startd, "_ads", None)
    update = ads.advertise if ads is not None else startd._advertise  # code of before
    return startd, update


async def _measure(slots: int, updates: int, change: bool, tls: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        home = Path(tmp)
        wire = _Counted(httpx.ASGITransport(app=create_app(AdStore())))
        if tls:
            pool_home(home, "bench.test")
            address = stack.enter_context(collector_thread(home))
            client = CollectorClient(address, home=home, daemon=True)
        else:
            (home / "htgrid.conf").write_text("")
            client = CollectorClient("collector.bench", transport=wire, home=home)
        startd, update = _node(home, slots)
        # Over TLS the collector is a thread of this process: the node's CPU is its own
        # thread's. In-process the collector's app runs in this thread (`wire.cpu`) and
        # its store in another, both counted in the process's time, then taken off.
        clock = time.thread_time if tls else time.process_time
        async with client:
            await update(client)  # the first: every ad whole
            claim = next(iter(startd.slots.claims.values()))
            node, bytes_, collector = [], [], []
            wire.requests = 0
            for i in range(updates):
                if change and i % 2 == 0:  # the job ended: Idle
                    claim.move(ClaimState.ENDED, time.time() + i)
                elif change:  # the next job started on the claim: Busy
                    claim.move(ClaimState.CLAIMED, time.time() + i)
                    claim.move(ClaimState.STARTING, time.time() + i)
                wire.bytes, wire.cpu = 0, 0.0
                start = clock()
                await update(client)
                spent = clock() - start
                node.append(spent - wire.cpu)
                collector.append(wire.cpu)
                bytes_.append(wire.bytes)
            return {
                "requests": wire.requests / updates,
                "bytes": statistics.median(bytes_),
                "node_ms": statistics.median(node) * 1000,
                "collector_ms": statistics.median(collector) * 1000,
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--tls", action="store_true", help="to a real collector, over TLS")
    args = parser.parse_args()
    print("| dynamic slots | case | requests | bytes sent | node CPU ms | collector CPU ms |")
    print("|---|---|---|---|---|---|")
    for slots in args.slots:
        for change in (False, True):
            r = asyncio.run(_measure(slots, args.updates, change, args.tls))
            case = "one slot changed" if change else "nothing changed"
            if args.tls:
                print(f"| {slots} | {case} | - | - | {r['node_ms']:.2f} | - |")
                continue
            print(
                f"| {slots} | {case} | {r['requests']:.0f} | {r['bytes']:,.0f} | "
                f"{r['node_ms']:.2f} | {r['collector_ms']:.2f} |"
            )


if __name__ == "__main__":
    main()
