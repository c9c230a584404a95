"""Failover on a three-server NATS cluster (``EmbeddedCluster``, every stream and bucket with
three replicas), compared with the same batch served without a fault (one single-mode node
on one server, the plainest run: the answers depend on neither the mode nor the servers):

- the JetStream meta leader is SIGKILLed mid-batch under two in-process cluster-mode nodes:
  every turn is answered once with the reference's answer, each conversation's durable copy
  holds its turns in order, once, every block once (and equals the LMDB of the node holding
  it), the leases are still held; the server restarts, rejoins, and a later turn completes;
- a node process is SIGKILLed mid-batch (the kill loop of ``test_kill_loop_cluster`` on the
  cluster): every turn is answered once, nothing lost.

Times from the kill to the next result are printed (``-s``), never asserted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import EmbeddedCluster, EmbeddedNats
from tests.actors.killloop import KillPlan, RunRecord, plan_batch, run_batch
from tests.actors.killreport import Report
from tests.cluster.nats.failover import Batch

pytestmark = pytest.mark.timeout(180)

PLANS = plan_batch(12, 2)


@pytest.fixture(scope="module")
def reference(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    """The batch without a fault: one single-mode node on the session's server."""

    async def run() -> RunRecord:
        workdir = tmp_path_factory.mktemp("reference")
        async with Batch(nats_server.url, workdir, PLANS, nodes=1, cluster=False) as batch:
            await batch.submit()
            return await batch.record()

    record = asyncio.run(run())
    assert all(t.first_result is not None for t in record.traces.values())
    assert all(t.first_result.status == "completed" for t in record.traces.values())  # type: ignore[union-attr]
    return record


def _assert_same_as_reference(reference: RunRecord, run: RunRecord) -> Report:
    """Every turn answered, with the reference's status and answer, never two different
    results, each stored once in submission order (``killreport.compare``). A result may be
    delivered twice, the same: a store whose acknowledgement is lost while the results
    stream elects a new leader is published again (counted, never a second run)."""
    report = Report.of(reference, run)
    print("\n" + report.describe())
    assert report.lost == [], report.describe()
    assert report.answered_twice_differently == [], report.describe()
    assert report.mismatches == [], report.describe()
    return report


async def test_the_meta_leader_killed_mid_batch_loses_no_turn_and_rejoins(
    nats_cluster: EmbeddedCluster, tmp_path: Path, reference: RunRecord
) -> None:
    async with Batch(nats_cluster.url, tmp_path / "run", PLANS, nodes=2) as batch:
        await batch.submit()
        await batch.answered(len(PLANS) // 2)
        leader = nats_cluster.meta_leader()
        assert leader is not None
        nats_cluster.kill(leader)
        killed_at = time.monotonic()
        record = await batch.record(timeout=60)
        done = time.monotonic() - killed_at
        resumed = batch.resumed_after(killed_at)
        print(f"\nmeta leader n{leader} killed: the batch resumed after {resumed:.2f} s")
        print(f"(first result of a turn taken after the kill), all done after {done:.2f} s")
        _assert_same_as_reference(reference, record)

        # The durable copy: every block once, in seq order, equal to the holder's LMDB;
        # every conversation still leased to the node that holds it.
        for node in batch.nodes:
            assert isinstance(node.ownership, ClusterOwnership)
            for cid in node.conversations:
                rebuilt = await node.ownership.durable.rebuild(cid)
                assert rebuilt is not None, cid
                ids = [block["id"] for block in rebuilt[1]]
                assert len(ids) == len(set(ids)), cid
                assert [block["seq"] for block in rebuilt[1]] == list(range(len(ids))), cid
                assert [block["id"] for block in node.store.iter_blocks(cid)] == ids, cid
                assert await node.ownership.leases.owner(cid) == node.node_id, cid
        held = {cid for node in batch.nodes for cid in node.conversations}
        assert held == {conv.conversation_id for conv in PLANS}

        # The killed server comes back on its ports with its store and rejoins.
        nats_cluster.restart(leader)
        await nats_cluster.await_ready(30)
        assert nats_cluster.problems() == []
        stream = await batch.bus.nc.jetstream().stream_info(batch.subjects.turn_stream)
        assert stream.config.num_replicas == 3
        handle = await batch.client.submit(
            "How does clustering and replication work?", conversation_id="after-rejoin"
        )
        result = await handle.wait(30)
        assert result.status == "completed" and result.answer


async def test_a_node_killed_mid_batch_over_the_cluster_loses_no_turn(
    nats_cluster: EmbeddedCluster, tmp_path: Path, reference: RunRecord
) -> None:
    plans = PLANS[:6]
    run = await run_batch(
        nats_cluster.url,
        tmp_path / "killed",
        plans,
        mode="cluster",
        nodes=2,
        kills=KillPlan(kills=1, seed=22),
    )
    report = _assert_same_as_reference(reference, run)
    assert report.kills == 1 and report.kills_mid_turn == 1, report.describe()
