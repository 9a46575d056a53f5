"""GAHP requests per second through a pipe, against a bare line echo over the same pipe.

    python bench/gahp_pipe.py [--requests N] [--window W]

Both runs use the same client loop: it writes W request lines at once, reads what comes
back with the GAHP codec (LineSplitter + decode_fields), and repeats until N requests are
done. The echo server (the limit: read, write back, nothing else) returns each line as
is. The GAHP server is htgrid's GahpServer with one null command: each request gets its
`S` return line, its handler runs as a task, and the client collects the result lines
with RESULTS. The ratio GAHP / echo is printed; the target is at least 0.5. A third line
shows GahpClient (the asyncio client, 50 requests in flight, as the grid manager) for
information. Runs alternate and the median ratio is reported (the machine's load varies).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from htgrid.gahp import (
    Call,
    Command,
    GahpClient,
    GahpServer,
    GahpVersion,
    LineSplitter,
    decode_fields,
    encode_request,
)

TARGET = 0.5


# ---- the servers ----------------------------------------------------------------------------


def serve_echo() -> None:
    """Bytes in, the same bytes out."""
    while data := os.read(0, 1 << 18):
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]


async def null(call: Call) -> Sequence[str]:
    return ()


def serve_gahp() -> None:
    version = GahpVersion("0.0.0", datetime.date(2026, 1, 1), "bench GAHP")
    server = GahpServer(version, [Command("NULL", 0, null, workers=1 << 30)])
    asyncio.run(server.serve_stdio())


# ---- the client loop ------------------------------------------------------------------------


class Pipe:
    """A server process and the codec on our side."""

    def __init__(self, mode: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        assert self.process.stdin and self.process.stdout
        self.stdin = self.process.stdin.fileno()
        self.stdout = self.process.stdout.fileno()
        self.splitter = LineSplitter()
        self.ready: list[bytes] = []

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.stdin, view) :]

    def lines(self, count: int) -> list[list[str]]:
        got: list[list[str]] = []
        while len(got) < count:
            # The server may already have sent more than `count` lines: keep those.
            want = count - len(got)
            if not self.ready:
                self.splitter.feed(os.read(self.stdout, 1 << 18))
                self.ready.extend(self.splitter.lines())
            got.extend(decode_fields(line) for line in self.ready[:want])
            del self.ready[:want]
        return got

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait()


def requests(first: int, count: int) -> bytes:
    return b"".join(encode_request("NULL", (), first + n) for n in range(count))


def run_echo(total: int, window: int) -> float:
    pipe = Pipe("echo")
    start = time.perf_counter()
    done = 0
    while done < total:
        batch = min(window, total - done)
        pipe.write(requests(done + 1, batch))
        assert pipe.lines(batch)[-1][1] == str(done + batch)
        done += batch
    elapsed = time.perf_counter() - start
    pipe.close()
    return total / elapsed


def run_gahp(total: int, window: int) -> float:
    pipe = Pipe("gahp")
    pipe.lines(1)  # the banner
    start = time.perf_counter()
    done = 0
    while done < total:
        batch = min(window, total - done)
        pipe.write(requests(done + 1, batch))
        assert all(reply == ["S"] for reply in pipe.lines(batch))
        collected = 0
        while collected < batch:
            pipe.write(encode_request("RESULTS"))
            head = pipe.lines(1)[0]
            results = pipe.lines(int(head[1]))
            collected += len(results)
        done += batch
    elapsed = time.perf_counter() - start
    pipe.close()
    return total / elapsed


def run_client(total: int) -> float:
    async def main() -> float:
        client = await GahpClient.start([sys.executable, __file__, "--serve", "gahp"])
        start = time.perf_counter()
        await asyncio.gather(*(client.call("NULL") for _ in range(total)))
        elapsed = time.perf_counter() - start
        await client.close()
        return total / elapsed

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--serve", choices=["echo", "gahp"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "echo":
        serve_echo()
        return
    if args.serve == "gahp":
        serve_gahp()
        return
    # Echo and GAHP runs alternate and the median of their ratios is reported, so a
    # change in the machine's load during the run does not favour either side.
    echos, gahps, ratios = [], [], []
    for _ in range(args.repeat):
        echos.append(run_echo(args.requests, args.window))
        gahps.append(run_gahp(args.requests, args.window))
        ratios.append(gahps[-1] / echos[-1])
    client = max(run_client(args.requests // 5) for _ in range(2))
    ratio = statistics.median(ratios)
    print(f"line echo (the limit)          {max(echos):12,.0f} lines/s")
    print(f"GAHP codec + null command      {max(gahps):12,.0f} requests/s")
    print(f"ratio GAHP / echo (median)     {ratio:12.2f}   (target >= {TARGET})")
    print(f"GahpClient, 50 in flight       {client:12,.0f} requests/s  (information)")
    if ratio < TARGET:
        sys.exit(1)


if __name__ == "__main__":
    main()
