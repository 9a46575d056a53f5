"""A node of another host keeps its unchanged slot ads alive in the collector with
refreshes (over TLS, with its token), and gives a collector killed and restarted,
which lost them, its ads whole again."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.collector import CollectorUnavailable
from htgrid.startd import TLS_CERTIFICATE
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.node import CENTRAL_MANAGER, ExecuteNode
from htgrid.testing.ports import free_port

from .conftest import FAST


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    # A fixed collector port: the node finds the restarted collector where it was.
    config = {**FAST, "COLLECTOR_HOST": f"127.0.0.1:{free_port()}"}
    home = tmp_path_factory.mktemp("pool")
    with PersonalPool(
        home, kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=config
    ) as running:
        yield running


def _slot(node: ExecuteNode) -> ClassAd | None:
    try:
        ads = node.slots()
    except CollectorUnavailable:
        return None  # restarting
    return ads[0] if ads else None


def test_refreshed_ads_live_on_and_a_restarted_collector_gets_them_whole(
    pool: PersonalPool, tmp_path: Path
) -> None:
    with ExecuteNode(
        pool, tmp_path / "node2", "node2", "127.0.0.2", config={"UPDATE_INTERVAL": 1}
    ) as node:
        (first,) = node.joined()
        # Refreshed (the content unchanged): stamped and counted, not sent whole.
        later = wait_for(
            lambda: (ad := _slot(node)) is not None and ad["UpdatesTotal"] >= 4 and ad,
            timeout=60,
            what="three more updates of the slot",
        )
        assert later["UpdateSequenceNumber"] > first["UpdateSequenceNumber"]
        assert later["UpdatesLost"] == 0 and later["LastHeardFrom"] >= first["LastHeardFrom"]
        for name in ("Cpus", "Memory", "MyAddress", TLS_CERTIFICATE, "Start"):
            assert later.lookup(name) == first.lookup(name), name

        pid = pool.child_pid("collector")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the master starts another, which has no ads
        wait_for(
            lambda: pool.child_pid("collector") not in (None, pid),
            timeout=60,
            what="the master to start the collector again",
        )
        # A refresh cannot make an ad: the new collector has the slot's whole ad.
        again = wait_for(
            lambda: (ad := _slot(node)) is not None and ad["UpdatesTotal"] < 4 and ad,
            timeout=60,
            what="the slot in the restarted collector",
        )
        for name in ("Cpus", "Memory", "MyAddress", TLS_CERTIFICATE, "Start", "OpSys"):
            assert again.lookup(name) == first.lookup(name), name
        assert again["DaemonStartTime"] == first["DaemonStartTime"]  # the same node run
        wait_for(
            lambda: (ad := _slot(node)) is not None and ad["UpdatesTotal"] >= 3,
            timeout=60,
            what="the slot refreshed in the restarted collector",
        )
