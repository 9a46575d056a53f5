"""`htcondor2.Collector.query` of machine ads over CEDAR against the same query through
htgrid's HTTPS API, in the same run, from the same collector process and port.

    python bench/cedar_query.py [--ads 10000] [--rounds 5]

A collector of a scratch pool (its own process) is given --ads machine ads of ~45
attributes each (as an execute node's slots carry). Then, alternating, --rounds times
each: every ad fetched by the official bindings (htcondor==25.14.1, CEDAR, TOKEN
authentication, AES-GCM as `use security:recommended` asks) and by htgrid's own
`CollectorClient` (HTTPS, JSON); and the same with a projection of 3 attributes. Times
are until the ads are Python objects in the client (classad2 ads / htgrid ClassAds).

Printed: the median time of each and the ratio CEDAR / HTTPS (target <= 1.0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import htcondor2  # the official bindings first, as their manual says

from htgrid.classad import ClassAd, ExprTree
from htgrid.collector import CollectorClient
from htgrid.net.security import SecurityConfig, daemon_token
from htgrid.testing import wait_for
from htgrid.testing.collector import pool_home, user_token

SRC = str(Path(__file__).resolve().parents[1] / "src")


def machine(i: int) -> ClassAd:
    node = f"node{i // 16:04d}.bench.test"
    ad = ClassAd(
        {
            "MyType": "Machine",
            "Name": f"slot{i % 16 + 1}@{node}",
            "Machine": node,
            "MyAddress": f"<10.0.{i // 4096}.{i % 250}:9618?noUDP>",
            "Arch": "X86_64",
            "OpSys": "LINUX",
            "OpSysAndVer": "AlmaLinux9",
            "Cpus": 1 + i % 8,
            "Memory": 2048 * (1 + i % 4),
            "Disk": 10_000_000,
            "Gpus": i % 2,
            "State": "Unclaimed" if i % 3 else "Claimed",
            "Activity": "Idle" if i % 3 else "Busy",
            "LoadAvg": (i % 100) / 100,
            "KeyboardIdle": 1000 + i,
            "TotalSlots": 16,
            "SlotType": "Partitionable",
            "StartdIpAddr": f"<10.0.0.{i % 250}:9618>",
            "CondorVersion": "$CondorVersion: 25.0.0 2025-01-01 BuildID: bench $",
            "CondorPlatform": "$CondorPlatform: x86_64_AlmaLinux9 $",
            "HasFileTransfer": True,
            "HasDocker": i % 5 == 0,
            "UidDomain": "bench.test",
            "FileSystemDomain": "bench.test",
            "TotalCpus": 128,
            "TotalMemory": 512_000,
            "DetectedCpus": 128,
            "DetectedMemory": 515_000,
            "Mips": 30_000,
            "KFlops": 2_000_000,
            "ClockDay": 6,
            "ClockMin": 1000,
            "DaemonStartTime": 1_790_000_000,
            "UpdateSequenceNumber": 1,
            "UpdateInterval": 3600,
            "ClassAdLifetime": 36_000,
            "JobStarts": i % 17,
            "RecentJobStarts": i % 3,
            "IsWakeAble": False,
            "NumPids": 0,
            "ConsoleIdle": 5000,
            "Site": f"site{i % 7}",
            "GLIDEIN_Site": f"T2_BENCH_{i % 7}",
        }
    )
    ad["Requirements"] = ExprTree("START && (TARGET.RequestCpus <= Cpus)")
    ad["Start"] = ExprTree('KeyboardIdle > 15 * 60 || TARGET.Owner =?= "bench"')
    ad["Rank"] = ExprTree("0.0")
    return ad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ads", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = pool_home(root / "pool", "bench.test")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        address = f"127.0.0.1:{port}"
        env = dict(os.environ, PYTHONPATH=SRC)
        command = [sys.executable, "-m", "htgrid.collector", "--home", str(home)]
        with open(root / "CollectorLog", "wb") as log:
            process = subprocess.Popen(
                [*command, "--port", str(port)], env=env, stdout=log, stderr=log
            )
        try:
            return run(args, root, home, address)
        finally:
            process.terminate()
            process.wait()


def run(args: argparse.Namespace, root: Path, home: Path, address: str) -> int:
    async def fill() -> None:
        async with CollectorClient(address, home=home, daemon=True, timeout=120) as client:
            ads = [machine(i) for i in range(args.ads)]
            for start in range(0, len(ads), 1000):
                await client.advertise("UPDATE_STARTD_AD", ads[start : start + 1000])

    def reachable() -> bool:
        try:
            socket.create_connection(tuple(address.split(":")), timeout=1).close()  # type: ignore[arg-type]
        except OSError:
            return False
        return True

    wait_for(reachable, timeout=60)
    asyncio.run(fill())
    tokens = root / "tokens"
    tokens.mkdir(mode=0o700)
    (tokens / "bench").write_text(user_token(home, "bench") + "\n")
    (tokens / "bench").chmod(0o600)
    config = root / "condor_config"
    config.write_text(
        f"COLLECTOR_HOST = {address}\nuse security:recommended\n"
        f"SEC_TOKEN_DIRECTORY = {tokens}\nSEC_CLIENT_AUTHENTICATION_METHODS = TOKEN\n"
    )
    os.environ["CONDOR_CONFIG"] = str(config)
    htcondor2.reload_config()
    assert daemon_token(SecurityConfig.load(home))
    collector = htcondor2.Collector(address)
    projection = ["Name", "Cpus", "Memory"]

    def cedar(proj: list[str]) -> int:
        return len(collector.query(htcondor2.AdTypes.Startd, projection=proj))

    async def https_query(proj: list[str]) -> int:
        async with CollectorClient(address, home=home, daemon=True, timeout=120) as client:
            return len(await client.query("Machine", projection=proj or None))

    def https(proj: list[str]) -> int:
        return asyncio.run(https_query(proj))

    assert cedar([]) == args.ads == https([]), "the two protocols must see every ad"
    times: dict[str, list[float]] = {"cedar": [], "https": [], "cedar3": [], "https3": []}
    for _ in range(args.rounds):
        for name, fn, proj in (
            ("cedar", cedar, []),
            ("https", https, []),
            ("cedar3", cedar, projection),
            ("https3", https, projection),
        ):
            began = time.perf_counter()
            fn(proj)
            times[name].append(time.perf_counter() - began)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.ads} machine ads, median of {args.rounds} rounds each:")
    print(f"  all attributes: CEDAR {med['cedar']:.3f} s, HTTPS {med['https']:.3f} s, "
          f"CEDAR/HTTPS {med['cedar'] / med['https']:.2f}")  # fmt: skip
    print(f"  3 attributes:   CEDAR {med['cedar3']:.3f} s, HTTPS {med['https3']:.3f} s, "
          f"CEDAR/HTTPS {med['cedar3'] / med['https3']:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
