"""EC2 GAHP against moto: VM start throughput, and what a status poll costs.

    python bench/ec2_vms.py [--vms 500] [--repeat 3] [--workers 10]

1. Start N VMs (default 500) through `htgrid gahp ec2`, driven by htgrid's GahpClient as
   the grid manager drives a GAHP (50 requests in flight, each with its own client
   token), and compare with a plain boto3 loop starting the same N instances (ImageId,
   InstanceType, ClientToken) one after the other. Both talk to the same moto server, a
   separate process, reset before every run. Target: GAHP time / loop time <= 1.5.
   The GAHP does more per VM than the loop: it tags the instance with its token and first
   looks the token up (lookups of concurrent starts share one DescribeInstances).
2. With 10 and with N VMs running, poll EC2_VM_STATUS_ALL a few times and count the AWS
   calls each poll made (the GAHP's STATISTICS, NumDistinctRequests). Target: one per
   poll, whatever the number of VMs. For scale, a plain boto3 DescribeInstances of the
   same VMs alternates with the polls (medians shown; moto renders tagged instances
   slowly, so most of a poll is moto).

Times are the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]

from htgrid.gahp import GahpClient

TARGET = 1.5
REGION = "us-east-1"
AMI = {
    "ami_id": "ami-0a1b2c3d4e5f60718",
    "state": "available",
    "public": True,
    "owner_id": "801119661308",
    "image_location": "amazon/htgrid-bench",
    "root_device_type": "ebs",
    "root_device_name": "/dev/sda1",
    "description": "htgrid bench image",
    "image_type": "machine",
    "architecture": "x86_64",
    "name": "htgrid-bench-linux",
    "virtualization_type": "hvm",
    "hypervisor": "xen",
}


class Moto:
    """moto_server in its own process on a free loopback port."""

    def __init__(self, scratch: Path) -> None:
        amis = scratch / "amis.json"
        amis.write_text(json.dumps([AMI]))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "MOTO_AMIS_PATH": str(amis)}
        self.process = subprocess.Popen(
            ["moto_server", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self.reset()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def start_args(target: tuple[str, str, str], token: str) -> list[str]:
    """EC2_VM_START's arguments: an AMI, an instance type and a client token."""
    ami = str(AMI["ami_id"])
    fixed = [ami, "NULL", "NULL", "NULL", "m5.large", "NULL", "NULL", "NULL", token]
    return [*target, *fixed, "NULL", "NULL", "NULL", "1", "NULL", "NULL", "NULL"]


def boto3_loop(moto: Moto, n: int) -> float:
    """Seconds for a plain boto3 loop to start `n` instances."""
    moto.reset()
    client = boto3.client(
        "ec2",
        endpoint_url=moto.url,
        region_name=REGION,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    client.describe_key_pairs()  # connection and client warm, as the GAHP's
    start = time.perf_counter()
    for i in range(n):
        client.run_instances(
            ImageId=AMI["ami_id"],
            MinCount=1,
            MaxCount=1,
            InstanceType="m5.large",
            ClientToken=f"loop-{i:06d}",
        )
    return time.perf_counter() - start


async def gahp_starts(
    moto: Moto, target: tuple[str, str, str], n: int, workers: int
) -> tuple[float, int]:
    """Seconds for the GAHP to start `n` VMs, and the AWS calls it made for them."""
    moto.reset()
    argv = [sys.executable, "-m", "htgrid.backends.ec2", "--max-workers", str(workers)]
    client = await GahpClient.start(argv)
    try:
        await client.call("EC2_VM_SERVER_TYPE", *target)  # client made, as the ping does
        before = int((await client.command("STATISTICS")).args[1])
        start = time.perf_counter()
        answers = await asyncio.gather(
            *(client.call("EC2_VM_START", *start_args(target, f"gahp-{i:06d}")) for i in range(n))
        )
        elapsed = time.perf_counter() - start
        calls = int((await client.command("STATISTICS")).args[1]) - before
    finally:
        await client.close()
    failed = [answer for answer in answers if answer[0] != "0"]
    if failed:
        raise SystemExit(f"{len(failed)} starts failed, e.g. {failed[0]}")
    return elapsed, calls


async def poll_cost(
    moto: Moto, target: tuple[str, str, str], n: int, polls: int
) -> tuple[float, float, float]:
    """(AWS calls per EC2_VM_STATUS_ALL, median seconds per poll, median seconds of a plain
    boto3 DescribeInstances of the same VMs) with `n` VMs running; the two alternate."""
    moto.reset()
    plain = boto3.client(
        "ec2",
        endpoint_url=moto.url,
        region_name=REGION,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    argv = [sys.executable, "-m", "htgrid.backends.ec2"]
    client = await GahpClient.start(argv)
    gahp_times, plain_times = [], []
    try:
        await asyncio.gather(
            *(client.call("EC2_VM_START", *start_args(target, f"poll-{i:06d}")) for i in range(n))
        )
        plain.describe_instances(MaxResults=1000)
        before = int((await client.command("STATISTICS")).args[1])
        for _ in range(polls):
            start = time.perf_counter()
            fields = await client.call("EC2_VM_STATUS_ALL", *target)
            gahp_times.append(time.perf_counter() - start)
            if len(fields) != 1 + 8 * n:
                raise SystemExit(f"STATUS_ALL saw {(len(fields) - 1) // 8} VMs, not {n}")
            start = time.perf_counter()
            plain.describe_instances(MaxResults=1000)
            plain_times.append(time.perf_counter() - start)
        calls = int((await client.command("STATISTICS")).args[1]) - before
    finally:
        await client.close()
    return calls / polls, statistics.median(gahp_times), statistics.median(plain_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=10, help="the GAHP's --max-workers")
    parser.add_argument("--polls", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="htgrid-ec2-bench-") as tmp:
        scratch = Path(tmp)
        (scratch / "access").write_text("bench\n")
        (scratch / "secret").write_text("bench\n")
        moto = Moto(scratch)
        target = (moto.url, str(scratch / "access"), str(scratch / "secret"))
        try:
            loop_times, gahp_times, start_calls = [], [], []
            for _ in range(args.repeat):
                loop_times.append(boto3_loop(moto, args.vms))
                seconds, calls = asyncio.run(gahp_starts(moto, target, args.vms, args.workers))
                gahp_times.append(seconds)
                start_calls.append(calls)
            polls: dict[int, Any] = {}
            for n in sorted({10, args.vms}):
                polls[n] = asyncio.run(poll_cost(moto, target, n, args.polls))
        finally:
            moto.close()

    loop_best, gahp_best = min(loop_times), min(gahp_times)
    ratio = gahp_best / loop_best
    print(f"{args.vms} VM starts against moto (best of {args.repeat}):")
    print(f"  plain boto3 loop      {loop_best:7.2f} s  ({args.vms / loop_best:6.1f} VMs/s)")
    print(
        f"  htgrid gahp ec2       {gahp_best:7.2f} s  ({args.vms / gahp_best:6.1f} VMs/s)"
        f"  ratio {ratio:.2f}  (target <= {TARGET}) {'OK' if ratio <= TARGET else 'MISSED'}"
    )
    lookups = min(start_calls) - args.vms
    print(
        f"  AWS calls by the GAHP {min(start_calls)}: {args.vms} RunInstances + {lookups} lookups"
    )
    print("EC2_VM_STATUS_ALL, AWS calls per poll:")
    for n, (calls, seconds, plain) in polls.items():
        print(
            f"  {n:5d} VMs: {calls:.1f} DescribeInstances per poll, {seconds * 1000:7.1f} ms a poll"
            f" (plain boto3: {plain * 1000:7.1f} ms)"
        )
    flat = all(calls == 1 for calls, _, _ in polls.values())
    print(f"  target: 1, not growing with the VMs: {'OK' if flat else 'MISSED'}")


if __name__ == "__main__":
    main()
