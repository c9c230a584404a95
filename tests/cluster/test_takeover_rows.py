"""A takeover in cluster mode on a real nats-server keeps the conversation's header rows: node a
runs a turn that cites knowledge sources and makes a plan, stops gracefully (its lease is
released), and node b runs the next turn of the conversation from the durable copy with the
same sources pool (same SIDs and URLs, new sources numbered after them) and plans."""

from __future__ import annotations

from pathlib import Path

from actline.actors import Node
from actline.actors.client.client import Client
from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import Bus, EmbeddedNats
from actline.timeline import Timeline

from .harness import start

CID = "c-rows"


def pool(tl: Timeline) -> list[tuple[int, str, str]]:
    return [(row.sid, row.url, row.title) for row in tl.sources.rows()]


def plans(tl: Timeline) -> list[dict[str, object]]:
    return [plan.to_dict() for plan in tl.plans.plans()]


async def test_a_takeover_keeps_the_sources_pool_and_plans(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    a = await start(fresh_nats.url, tmp_path, "a")
    client_bus = await Bus.connect(fresh_nats.url)
    client = Client(client_bus)
    b: Node | None = None
    a_stopped = False
    try:
        first = await client.submit(
            "What does the Team tier cost and how is it billed?", conversation_id=CID
        )
        result = await first.wait(60)
        assert result.status == "completed", result.error
        tl_a = a.conversations[CID].tl
        pool_a, plans_a, next_sid_a = pool(tl_a), plans(tl_a), tl_a.sources.next_sid
        assert pool_a, "the first turn cited no knowledge source"
        assert all(url.startswith("https://") for _, url, _ in pool_a)
        assert plans_a, "the first turn made no plan"

        await a.stop()  # graceful: a's lease on the conversation is released
        await a.bus.close()
        a_stopped = True
        b = await start(fresh_nats.url, tmp_path, "b")
        assert isinstance(b.ownership, ClusterOwnership)
        assert await b.ownership.leases.owner(CID) is None

        # The durable copy alone (what b adopts) holds a's pool and plans.
        copy = await b.ownership.durable.read(CID)
        assert copy is not None
        restored = Timeline.restore(copy.snapshot, copy.blocks, rows=copy.rows)
        assert pool(restored) == pool_a
        assert restored.sources.next_sid == next_sid_a
        assert plans(restored) == plans_a

        second = await client.submit(
            "What are the rate limits per cluster?", conversation_id=CID, turn_id="turn-on-b"
        )
        result = await second.wait(60)
        assert result.status == "completed", result.error
        assert await b.ownership.leases.owner(CID) == "b"
        tl_b = b.conversations[CID].tl
        assert tl_b.turn_ids()[-1] == "turn-on-b" and len(tl_b.turn_ids()) == 2
        # a's rows kept their SIDs and URLs on b; b's new sources come after them.
        by_sid = {sid: url for sid, url, _ in pool(tl_b)}
        assert {sid: by_sid.get(sid) for sid, _, _ in pool_a} == {
            sid: url for sid, url, _ in pool_a
        }
        added = by_sid.keys() - {sid for sid, _, _ in pool_a}
        assert added and all(sid >= next_sid_a for sid in added)
        assert len(set(by_sid.values())) == len(by_sid)  # no source twice
        # a's plans are all there, in creation order, ahead of any plan b made.
        ids_b = [plan["plan_id"] for plan in plans(tl_b)]
        assert ids_b[: len(plans_a)] == [plan["plan_id"] for plan in plans_a]
        # b's store and the durable copy agree on the rows after b's turn.
        copy = await b.ownership.durable.read(CID)
        assert copy is not None
        assert copy.rows == b.store.header_rows(CID)
        assert pool(b.store.load(CID).timeline) == pool(tl_b)
    finally:
        await client.close()
        await client_bus.close()
        if b is not None:
            await b.stop()
            await b.bus.close()
        if not a_stopped:
            await a.stop()
            await a.bus.close()
