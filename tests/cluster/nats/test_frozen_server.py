"""A nats-server frozen (SIGSTOP) for longer than the node TTL under a node that holds
conversations, on a three-server cluster with two in-process cluster-mode nodes.

The node on the frozen server finds its beat unanswered, pings the server, gets no answer,
moves to another server and beats there within the node TTL: the other node never counts it
dead, takes none of its leases, and every turn is answered as in the same batch without the
freeze (``killreport.compare``), no result going unstored.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import pytest

from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import EmbeddedCluster, EmbeddedNats
from tests.actors.killloop import RunRecord, plan_batch
from tests.actors.killreport import Report
from tests.cluster.nats.failover import Batch
from tests.waiting import until

pytestmark = pytest.mark.timeout(300)

PLANS = plan_batch(8, 3)
FROZEN_S = 8.0
"""How long the server stays frozen: many node TTLs."""


@pytest.fixture(scope="module")
def reference(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    """The batch without a fault: one single-mode node on the session's server."""

    async def run() -> RunRecord:
        workdir = tmp_path_factory.mktemp("reference")
        async with Batch(nats_server.url, workdir, PLANS, nodes=1, cluster=False) as batch:
            await batch.submit()
            return await batch.record()

    return asyncio.run(run())


async def test_a_frozen_server_costs_its_node_no_conversation(
    nats_cluster: EmbeddedCluster,
    tmp_path: Path,
    reference: RunRecord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with Batch(nats_cluster.url, tmp_path / "run", PLANS, nodes=2) as batch:
        first, other = batch.nodes
        assert isinstance(first.ownership, ClusterOwnership)
        assert isinstance(other.ownership, ClusterOwnership)
        mine, theirs = first.ownership.leases, other.ownership.leases
        await batch.submit()
        await until(lambda: len(mine.held) >= 2, 60)
        frozen = first.bus.server
        assert frozen

        async def apart() -> bool:
            """The other node on another server (moved there when it shares this one)."""
            if other.bus.server not in ("", frozen):
                return True
            if other.bus.is_connected:
                await other.bus.nc.force_reconnect()
            return False

        await until(apart, 30)
        held = mine.held
        index = nats_cluster.urls.index(frozen)
        pid = nats_cluster.servers[index].pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            await until(lambda: first.bus.server not in ("", frozen), 10)
            moved_after = time.monotonic() - frozen_at
            print(f"\nthe node left the frozen server after {moved_after:.2f} s")
            # frozen for many node TTLs, the node beating through its new server meanwhile
            await until(lambda: mine._last_beat > frozen_at + FROZEN_S, FROZEN_S + 30)
        finally:
            os.kill(pid, signal.SIGCONT)
        print(f"the server thawed after {time.monotonic() - frozen_at:.1f} s")

        record = await batch.record(timeout=120)
        report = Report.of(reference, record)
        print(report.describe())
        assert report.lost == [], report.describe()
        assert report.answered_twice_differently == [], report.describe()
        assert report.mismatches == [], report.describe()
        assert theirs.taken_over == 0
        assert mine.taken_over == 0
        for cid in sorted(held):
            assert await mine.owner(cid) == first.node_id, cid
        assert first.bus.counters["stalled"] >= 1
        assert [r for r in caplog.records if "was not stored" in r.getMessage()] == []
