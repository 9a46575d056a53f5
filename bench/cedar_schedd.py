"""`htcondor2.Schedd` over CEDAR against htgrid's HTTPS API on the same schedd and port:
a query of 10,000 jobs and the submit of a 1,000-proc cluster.

    python bench/cedar_schedd.py [--jobs 10000] [--procs 1000] [--rounds 3]

A personal pool (the queue only) as root, whose client is the official bindings
(htcondor==25.14.1; TOKEN, AES-GCM as `use security:recommended` asks) or htgrid's
`ScheddClient.remote` (HTTPS, JSON, the same token). In the same run, alternating:

1. every attribute of --jobs held jobs (`Schedd.query()` / `ScheddClient.query()`), until
   they are Python objects in the client;
2. a cluster of --procs held procs of `/bin/true $(Process)`: `Schedd.submit(Submit,
   count=N)` (the bindings expand the submit description) against htgrid's own submit
   language making the same ads (`SubmitDescription.jobs`) and one `submit_new`.

Printed: the median of each and the ratio CEDAR / HTTPS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import htcondor2  # the official bindings first, as their manual says

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.net.security import SecurityConfig
from htgrid.submit import SubmitDescription
from htgrid.testing import PersonalPool

SRC = str(Path(__file__).resolve().parents[1] / "src")
_IDS = {"clusterid", "procid"}


def split(jobs: list[ClassAd]) -> tuple[ClassAd, list[ClassAd]]:
    """The cluster ad and each proc's own attributes (those differing from proc 0's)."""
    first = jobs[0]
    cluster = ClassAd({k: first[k] for k in first if k.lower() not in _IDS})
    procs = []
    for ad in jobs:
        own = ClassAd()
        for k in ad:
            if k.lower() not in _IDS and (
                k not in cluster or str(ad.lookup(k)) != str(cluster.lookup(k))
            ):
                own[k] = ad[k]
        procs.append(own)
    return cluster, procs


def timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--procs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = SRC
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with PersonalPool(root / "pool", fsync=False) as pool:
            return run(args, root, pool)


def run(args: argparse.Namespace, root: Path, pool: PersonalPool) -> int:
    domain = SecurityConfig.load(pool.home).trust_domain
    token = pool.token(f"root@{domain}")
    tokens = root / "tokens"
    tokens.mkdir(mode=0o700)
    (tokens / "root").write_text(token + "\n")
    (tokens / "root").chmod(0o600)
    address = pool.url.removeprefix("https://")
    (root / "condor_config").write_text(
        "use security:recommended\n"
        f"SEC_TOKEN_DIRECTORY = {tokens}\nSEC_CLIENT_AUTHENTICATION_METHODS = TOKEN\n"
    )
    os.environ["CONDOR_CONFIG"] = str(root / "condor_config")
    htcondor2.reload_config()
    location = htcondor2.classad.ClassAd(
        {"MyAddress": f"<{address}?noUDP>", "CondorVersion": "$CondorVersion: 25.0.0 x $"}
    )
    schedd = htcondor2.Schedd(location)
    https = ScheddClient.remote(pool.url, home=pool.home, token=token, timeout=600)
    text = "executable = /bin/true\narguments = $(Process)\nhold = true\n"

    def https_submit(count: int) -> int:
        desc = SubmitDescription.from_text(text + f"queue {count}\n", cwd=str(root))
        cluster = https.reserve_cluster()
        jobs = desc.jobs(cluster, owner="root", qdate=int(time.time()))
        cluster_ad, procs = split([job.ad for job in jobs])
        cluster_ad["Owner"] = "root"  # the daemon fills it in from the token otherwise
        return len(https.submit(cluster, cluster_ad, procs))

    def cedar_submit(count: int) -> int:
        return schedd.submit(htcondor2.Submit(text), count=count).num_procs()

    for start in range(0, args.jobs, 5000):
        https_submit(min(5000, args.jobs - start))
    assert len(schedd.query()) == args.jobs == len(https.query())
    times: dict[str, list[float]] = {k: [] for k in ("q-cedar", "q-https", "s-cedar", "s-https")}
    for _ in range(args.rounds):
        times["q-cedar"].append(timed(schedd.query))
        times["q-https"].append(timed(https.query))
        times["s-cedar"].append(timed(lambda: cedar_submit(args.procs)))
        times["s-https"].append(timed(lambda: https_submit(args.procs)))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"median of {args.rounds} rounds each:")
    print(f"  query of {args.jobs} jobs: CEDAR {med['q-cedar']:.3f} s, HTTPS "
          f"{med['q-https']:.3f} s, CEDAR/HTTPS {med['q-cedar'] / med['q-https']:.2f}")  # fmt: skip
    print(f"  submit of {args.procs} procs: CEDAR {med['s-cedar']:.3f} s, HTTPS "
          f"{med['s-https']:.3f} s, CEDAR/HTTPS {med['s-cedar'] / med['s-https']:.2f}")  # fmt: skip
    https.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
