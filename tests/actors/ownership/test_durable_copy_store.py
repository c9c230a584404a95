"""The JetStream durable copy into a node's store: rebuilt copies loaded, diverged copies
replaced, unpublished rounds merged, and the header rows (sources pool, plans) kept whole."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actline.actors.ownership.durable import adopt, merge_rounds
from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import Bus
from actline.storage import Store
from actline.storage.layout import pack, unpack
from actline.storage.rounds import PersistedRound
from actline.timeline import Block, Timeline
from actline.timeline.blocks import NOTE
from actline.timeline.snapshot import plan_key, source_key
from tests.actors.ownership.copies import (
    CID,
    Writer,
    all_rows,
    assert_same_rows,
    cite,
    dicts,
    durable,
    grown,
    plans,
    pool,
)
from tests.timeline.builders import Build, words

# --- into a node's store --------------------------------------------------------------------


async def test_the_rebuilt_copy_loads_from_a_real_store_as_the_original(
    bus: Bus, other_bus: Bus, tmp_path: Path
) -> None:
    a, b = await durable(bus, "node-a"), await durable(other_bus, "node-b")
    build = Build(Timeline(CID))
    expect: int | None = None
    with Store(tmp_path / "node-a") as mine, Store(tmp_path / "node-b") as theirs:

        async def persist(turn: str) -> None:
            nonlocal expect
            done = {turn: {"status": "completed"}}
            persisted = await asyncio.to_thread(mine.persist_round, build.tl, turn_records=done)
            expect = await a.publish_persisted(CID, persisted, expect=expect)

        for turn in ("t1", "t2"):
            grown(build, turn)
            await persist(turn)
        rebuilt = await b.read(CID)
        assert rebuilt is not None
        await asyncio.to_thread(adopt, theirs, CID, rebuilt)
        # Later rounds (a hide among them) land on top of the adopted prefix.
        build.tl.set_hidden([build.tl.blocks[3]], "[hidden]")
        grown(build, "t3")
        await persist("t3")
        rebuilt = await b.read(CID)
        assert rebuilt is not None
        await asyncio.to_thread(adopt, theirs, CID, rebuilt)
        for store in (mine, theirs):
            loaded = store.load(CID)
            assert [x.to_dict() for x in loaded.timeline] == [x.to_dict() for x in build.tl]
            assert loaded.timeline.snapshot() == build.tl.snapshot()
            assert_same_rows(loaded.timeline, build.tl)
            assert store.turn_record(CID, "t3") == {"status": "completed"}
        assert list(theirs.iter_blocks(CID)) == list(mine.iter_blocks(CID))
        assert theirs.header_rows(CID) == mine.header_rows(CID) == all_rows(build.tl)


async def test_a_local_copy_that_diverged_is_replaced_by_the_durable_one(
    bus: Bus, tmp_path: Path
) -> None:
    copy = await durable(bus, "node-a")
    build = Build(Timeline(CID))
    writer = Writer(copy, build.tl)
    grown(build, "t1")
    await writer.round()
    with Store(tmp_path / "node-b") as store:
        rebuilt = await copy.read(CID)
        assert rebuilt is not None
        await asyncio.to_thread(adopt, store, CID, rebuilt)
        # This node wrote a round locally that never made it into the durable copy ...
        local = Timeline.restore(rebuilt.snapshot, rebuilt.blocks, rows=rebuilt.rows)
        assert_same_rows(local, build.tl)
        local.append(Block.new(NOTE, "t1", 2e9, text="lost locally"))
        cite(Build(local), "lost-locally")  # a source only this node's lost round has
        store.persist(local)
        assert source_key(len(pool(build.tl)) + 1) in store.header_rows(CID)
        # ... while the durable copy moved on.
        build.completion("durable")
        cite(build, "durable")
        await writer.round()
        rebuilt = await copy.read(CID)
        assert rebuilt is not None
        await asyncio.to_thread(adopt, store, CID, rebuilt)
        loaded = store.load(CID).timeline
        assert [b.to_dict() for b in loaded] == [b.to_dict() for b in build.tl]
        assert_same_rows(loaded, build.tl)  # the lost round's source is gone with it
        assert store.header_rows(CID) == all_rows(build.tl)


async def test_rounds_that_could_not_be_published_go_out_merged(bus: Bus, tmp_path: Path) -> None:
    copy = await durable(bus, "node-a")
    build = Build(Timeline(CID))
    with Store(tmp_path / "node-a") as store:
        grown(build, "t1")
        first = store.persist_round(build.tl, turn_records={"t1": {"status": "running"}})
        expect = await copy.publish_persisted(CID, first, expect=None)
        backlog = []  # NATS was away for these two rounds
        build.tl.set_hidden([build.tl.blocks[2]], "[hidden early]")
        grown(build, "t2")
        backlog.append(store.persist_round(build.tl, turn_records={"t1": {"status": "done"}}))
        build.tl.set_hidden([build.tl.blocks[-2]], "[hidden late]")  # new in the backlog
        build.completion("more")
        backlog.append(store.persist_round(build.tl, turn_records={"t2": {"status": "done"}}))
        merged = merge_rounds(backlog)
        assert merged.revision == backlog[-1].revision
        await copy.publish_persisted(CID, merged, expect=expect)
        full = await copy.read(CID)
        assert full is not None
        assert full.blocks == list(store.iter_blocks(CID)) == dicts(build.tl.blocks)
        assert full.records == {"t1": {"status": "done"}, "t2": {"status": "done"}}
        assert full.header["revision"] == 2
        assert full.rows == store.header_rows(CID) == all_rows(build.tl)
        assert_same_rows(Timeline.restore(full.snapshot, full.blocks, rows=full.rows), build.tl)
    with pytest.raises(ValueError):
        merge_rounds([])


# --- header rows: the sources pool and plans -----------------------------------------------


async def test_a_pool_that_grows_round_by_round_comes_back_whole(
    bus: Bus, other_bus: Bus, tmp_path: Path
) -> None:
    """Each round ships only the rows it changed; ``read`` merges them along the chain."""
    a, b = await durable(bus, "node-a"), await durable(other_bus, "node-b")
    build = Build(Timeline(CID))
    writer = Writer(a, build.tl)
    build.turn("t1", "what changed in pricing?")
    build.plan(["search", "read", "answer"], plan_id="p1")
    cite(build, "pricing", "tiers")
    await writer.round({"t1": {"status": "running", "round": 1}})
    build.tool("k1", words(20))
    cite(build, "billing")
    cite(build, "pricing", title="pricing doc, enriched by a read")
    build.tl.acknowledge("✓ 1. search", turn_id="t1", ts=build.at(), iteration=1)
    await writer.round({"t1": {"status": "running", "round": 2}})
    build.tool("k2", words(20))
    cite(build, "limits", "quotas")
    build.tl.acknowledge("✓ 2. read\n… 3. answer", turn_id="t1", ts=build.at(), iteration=2)
    await writer.round({"t1": {"status": "running", "round": 3}})
    build.completion("the answer [[S:1]] [[S:3]]")
    build.turn("t2", "and the limits?")
    build.plan(["check limits"], plan_id="p2")  # demotes p1 to open
    cite(build, "support")
    await writer.round({"t1": {"status": "completed"}, "t2": {"status": "running"}})
    assert [sid for sid, _, _ in pool(build.tl)] == [1, 2, 3, 4, 5, 6]
    assert plans(build.tl)[0] == "p2"

    rebuilt = await b.read(CID)
    assert rebuilt is not None
    assert rebuilt.rows == all_rows(build.tl)
    assert rebuilt.rows[source_key(1)]["title"] == "pricing doc, enriched by a read"
    p1 = rebuilt.rows[plan_key("p1")]
    assert (p1["state"], p1["order"], [s["status"] for s in p1["steps"]]) == (
        "open",
        0,
        ["done", "done", "in_progress"],
    )
    restored = Timeline.restore(rebuilt.snapshot, rebuilt.blocks, rows=rebuilt.rows)
    assert_same_rows(restored, build.tl)
    assert restored.take_row_changes() == {}  # what came from the copy is stored already

    with Store(tmp_path / "node-b") as store:
        await asyncio.to_thread(adopt, store, CID, rebuilt)
        loaded = store.load(CID).timeline
        assert_same_rows(loaded, build.tl)
        assert store.header_rows(CID) == all_rows(build.tl)
        # A later round on top of the adopted copy carries its rows in too.
        build.tl.plans.apply("close", turn_id="t2", plan_id="p2")
        cite(build, "roadmap")
        await writer.round()
        again = await b.read(CID)
        assert again is not None
        await asyncio.to_thread(adopt, store, CID, again)
        assert_same_rows(store.load(CID).timeline, build.tl)
        assert plans(store.load(CID).timeline)[0] is None


async def test_merged_rounds_keep_the_latest_row_values(bus: Bus, tmp_path: Path) -> None:
    copy = await durable(bus, "node-a")
    build = Build(Timeline(CID))
    with Store(tmp_path / "node-a") as store:
        build.turn("t1", "first")
        build.plan(["one", "two", "three"], plan_id="p1")
        cite(build, "x", "y")
        first = store.persist_round(build.tl)
        expect = await copy.publish_persisted(CID, first, expect=None)
        backlog: list[PersistedRound] = []  # NATS was away for these three rounds
        for n, (title, ack) in enumerate(
            [("x doc, read once more", "✓ 1."), ("x doc, read once more, and again", "✓ 2.")]
        ):
            build.tool(f"k{n}", words(10))
            cite(build, "x", title=title)
            cite(build, f"new{n}")
            build.tl.acknowledge(ack, turn_id="t1", ts=build.at(), iteration=n + 1)
            backlog.append(store.persist_round(build.tl))
        build.completion("done")
        build.tl.plans.apply("close", turn_id="t1", plan_id="p1")
        backlog.append(store.persist_round(build.tl))
        assert all(one.rows for one in backlog)  # each round changed rows
        assert source_key(1) in backlog[0].rows and source_key(1) in backlog[1].rows
        assert all(plan_key("p1") in one.rows for one in backlog)

        merged = merge_rounds(backlog)
        assert set(merged.rows) == set().union(*(one.rows for one in backlog))
        assert merged.rows[source_key(1)]["title"] == "x doc, read once more, and again"
        p1 = merged.rows[plan_key("p1")]
        assert (p1["state"], p1["revision"]) == ("closed", build.tl.plans.plans()[0].revision)
        assert [s["status"] for s in p1["steps"]] == ["done", "done", "pending"]
        assert unpack(pack(merged.rows)) == {
            k: v for k, v in all_rows(build.tl).items() if k in merged.rows
        }

        await copy.publish_persisted(CID, merged, expect=expect)
        full = await copy.read(CID)
        assert full is not None
        assert full.rows == store.header_rows(CID) == all_rows(build.tl)
        assert_same_rows(Timeline.restore(full.snapshot, full.blocks, rows=full.rows), build.tl)


async def test_a_conversation_never_copied_goes_out_whole_with_its_rows(
    bus: Bus, other_bus: Bus, tmp_path: Path
) -> None:
    """``ClusterOwnership.prepare`` publishes a local-only conversation with every row and
    turn record, and another node's ``prepare`` adopts it, pool and plans included: a turn
    left running there resumes from its checkpoint (its prompt is never written twice)."""
    build = Build(Timeline(CID))
    records = {"t1": {"status": "completed"}, "t2": {"status": "running", "round": 2}}
    with Store(tmp_path / "node-a") as mine, Store(tmp_path / "node-b") as theirs:
        for turn in ("t1", "t2"):
            grown(build, turn)
            mine.persist(build.tl, turn_records={turn: records[turn]})
        a = ClusterOwnership(bus, "node-a")
        b = ClusterOwnership(other_bus, "node-b")
        await a.start()
        await b.start()
        await a.prepare(CID, mine)
        rebuilt = await b.durable.read(CID)
        assert rebuilt is not None
        assert rebuilt.rows == mine.header_rows(CID) == all_rows(build.tl)
        assert rebuilt.records == mine.turn_records(CID) == records
        await b.prepare(CID, theirs)
        assert theirs.turn_records(CID) == records
        loaded = theirs.load(CID).timeline
        assert [x.to_dict() for x in loaded] == [x.to_dict() for x in build.tl]
        assert_same_rows(loaded, build.tl)
