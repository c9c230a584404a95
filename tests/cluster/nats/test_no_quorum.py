"""A three-server NATS cluster (every stream and bucket on three replicas) that loses two
servers mid-batch, under two in-process cluster-mode nodes:

- once the servers say JetStream has no quorum, a client's submit and a client's wait on a
  turn submitted before each raise ``NoQuorum`` within their 10 s budget, saying what to do
  and that submitted turns are kept;
- the nodes log the outage in a few lines (its start, its cause, its end), with no traceback
  and nothing about streams being deleted;
- once the servers are back, every turn submitted before is answered, as in the same batch
  without the outage (``killreport.compare``), and the turn the client waited on too.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from actline.bus import EmbeddedCluster, EmbeddedNats, NoQuorum
from tests.actors.killloop import RunRecord, plan_batch
from tests.actors.killreport import Report
from tests.cluster.nats.failover import Batch
from tests.waiting import until

pytestmark = pytest.mark.timeout(300)

PLANS = plan_batch(8, 3)
BUDGET_S = 10.0
"""How long a client call may take to say that the cluster has no quorum."""
OUTAGE_LOGGERS = (
    "actline.bus.conditions",
    "actline.bus.healing",
    "actline.bus.jetstream.healer",
    "actline.actors.ownership.leases",
    "actline.actors.ownership.ownership",
)
"""The loggers of the loops that retry while JetStream is out: the node beat, the turn
queue's pulls, the durable copy, the healer."""
LEASE_CHECKS = ("lease check of ", "checked ")
"""``KvLeases.recheck``'s lines, one per lease and pass, after the servers are back: not
counted."""


def _outage_lines(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [
        r
        for r in records
        if r.name in OUTAGE_LOGGERS and not r.getMessage().startswith(LEASE_CHECKS)
    ]


@pytest.fixture(scope="module")
def reference(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    """The batch without a fault: one single-mode node on the session's server."""

    async def run() -> RunRecord:
        workdir = tmp_path_factory.mktemp("reference")
        async with Batch(nats_server.url, workdir, PLANS, nodes=1, cluster=False) as batch:
            await batch.submit()
            return await batch.record()

    return asyncio.run(run())


async def test_two_servers_down_tell_the_client_no_quorum_and_lose_no_turn(
    nats_cluster: EmbeddedCluster,
    tmp_path: Path,
    reference: RunRecord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with Batch(nats_cluster.url, tmp_path / "run", PLANS, nodes=2) as batch:
        await batch.submit()
        await batch.answered(len(PLANS))
        # the two servers the client is not on: it hears every event of the batch
        kept = nats_cluster.urls.index(batch.bus.server)
        down = [index for index in range(3) if index != kept]
        caplog.clear()
        for index in down:
            nats_cluster.kill(index)

        # Both nodes hear it from the server that is left.
        await until(lambda: all(node.bus.conditions.no_quorum for node in batch.nodes), 60)

        with pytest.raises(NoQuorum) as submitted:
            async with asyncio.timeout(BUDGET_S):
                await batch.client.submit("How do backups work?", conversation_id="nq-late")
        message = str(submitted.value)
        assert "the NATS cluster has no JetStream quorum" in message
        assert "fewer than a majority of its servers answer" in message
        assert "bring the stopped NATS servers back" in message
        assert "may not be stored: submit it again then with the same turn id" in message

        waiting = batch.client.pending  # submitted before: they wait for the servers
        assert waiting, "every turn was answered before the servers went down"
        handle = waiting[0]
        with pytest.raises(NoQuorum) as waited:
            async with asyncio.timeout(BUDGET_S):
                await handle.wait(timeout=60)
        assert f"turn {handle.turn_id} is kept and runs once" in str(waited.value)

        outage = _outage_lines(caplog.records)
        print("\n" + "\n".join(f"{r.name}: {r.getMessage()[:160]}" for r in outage))
        assert [r for r in outage if r.exc_info] == []
        assert [r for r in caplog.records if "deleted?" in r.getMessage()] == []
        # one per connection that retried: each node's, and the client's submits
        connections = len(batch.nodes) + 1
        starts = [r for r in outage if r.getMessage().startswith("JetStream has no quorum: ")]
        assert len(batch.nodes) <= len(starts) <= connections, starts
        assert len(outage) <= 6 * connections, [r.getMessage() for r in outage]

        for index in down:
            nats_cluster.restart(index)
        await nats_cluster.await_ready(60)
        await until(lambda: not any(node.bus.conditions.no_quorum for node in batch.nodes), 60)
        back = [r for r in caplog.records if r.getMessage().startswith("JetStream has quorum")]
        assert len(batch.nodes) <= len(back) <= connections, [r.getMessage() for r in back]
        assert "back after" in back[0].getMessage()

        record = await batch.record(timeout=120)
        after = _outage_lines(caplog.records)
        print("\n" + "\n".join(f"{r.name}: {r.getMessage()[:160]}" for r in after))
        assert [r for r in after if r.exc_info] == []
        assert len(after) <= 10 * connections, [r.getMessage() for r in after]
        report = Report.of(reference, record)
        print("\n" + report.describe())
        assert report.lost == [], report.describe()
        assert report.answered_twice_differently == [], report.describe()
        assert report.mismatches == [], report.describe()
        result = await handle.wait(timeout=60)
        assert result.status == "completed"
