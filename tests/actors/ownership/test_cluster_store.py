"""Conversations across nodes on a real nats-server: KV leases and the JetStream durable copy."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from actline import messages
from actline.actors.errors import CopyBroken, HeadConflict
from actline.actors.ownership.durable import JetStreamCopy, Rebuilt, adopt, merge_rounds
from actline.actors.ownership.leases import KvLeases
from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import Bus, EmbeddedNats, KvBucket
from actline.messages import Subjects
from actline.storage import Store
from actline.storage.layout import pack, unpack
from actline.storage.rounds import PersistedRound
from actline.timeline import Block, SourceRow, Timeline
from actline.timeline.blocks import NOTE, TOOL_RESULT
from actline.timeline.snapshot import plan_key, source_key, split
from tests.timeline.builders import Build, words
from tests.waiting import until

CID = "conv:1"  # a ':' is valid in ids but not in KV keys


@pytest.fixture
async def other_bus(nats_server: EmbeddedNats, subject_names: Subjects) -> AsyncIterator[Bus]:
    """A second connection under the same prefix: another node."""
    connection = await Bus.connect(nats_server.url, subject_names=subject_names)
    try:
        yield connection
    finally:
        await connection.close()


async def leases(bus: Bus, node: str) -> KvLeases:
    held = KvLeases(bus, node)
    await held.start()
    return held


async def durable(bus: Bus, writer: str) -> JetStreamCopy:
    copy = JetStreamCopy(bus, writer=writer)
    await copy.start()
    return copy


# --- leases ---------------------------------------------------------------------------------


async def test_one_node_holds_a_conversation_until_it_releases_it(bus: Bus, other_bus: Bus) -> None:
    a, b = await leases(bus, "node-a"), await leases(other_bus, "node-b")
    assert a.bucket == bus.subjects.leases_bucket
    assert await a.acquire(CID)
    assert await a.acquire(CID)  # already ours: renewed
    assert not await b.acquire(CID)
    assert await b.owner(CID) == "node-a"
    assert await a.renew(CID)
    assert a.held == {CID} and b.held == set()
    await a.release(CID)
    assert a.held == set() and await b.owner(CID) is None
    assert await b.acquire(CID)  # over the delete marker A left
    assert await a.owner(CID) == "node-b"
    assert not await a.renew(CID)
    await a.release(CID)  # not ours: a no-op that leaves B's lease alone
    assert await b.owner(CID) == "node-b"


async def test_a_lease_lasts_while_its_node_beats_with_no_renewal(bus: Bus, other_bus: Bus) -> None:
    """No KV traffic keeps a lease: it holds for as long as its node beats (here several
    node TTLs), however many conversations the node holds."""
    a, b = await leases(bus, "node-a"), await leases(other_bus, "node-b")
    assert await a.acquire(CID)
    revision = a._revisions[CID]
    assert a._beat_revision is not None
    beats = a._beat_revision + 3 * 4  # three node TTLs of beats

    async def a_beat_on() -> bool:
        assert not await b.acquire(CID)
        return a._beat_revision is not None and a._beat_revision >= beats

    await until(a_beat_on, 20)
    assert await a.recheck() == [] and not a.lapsed
    entry = await a._entry(CID)
    assert entry == ("node-a", revision)  # never rewritten meanwhile
    assert a.held == {CID} and await b.owner(CID) == "node-a"


async def test_a_renewal_whose_answer_was_lost_keeps_the_lease(bus: Bus, other_bus: Bus) -> None:
    """An update that went through while its caller timed out moved the revision: the next
    renewal finds this process's own write and keeps the lease (nobody took it)."""
    a, b = await leases(bus, "node-a"), await leases(other_bus, "node-b")
    assert await a.acquire(CID)
    key = bus.subjects.kv_key(CID)
    await a._bucket().update(key, a._value(), last=a._revisions[CID])  # answer "lost"
    assert await a.renew(CID) and a.held == {CID}
    assert not await b.acquire(CID)


async def test_a_restarted_node_takes_its_own_live_lease_back(bus: Bus) -> None:
    before = await leases(bus, "node-a")
    assert await before.acquire(CID)
    after = await leases(bus, "node-a")  # same node id, new process
    assert await after.acquire(CID)
    assert not await before.renew(CID)
    assert await after.renew(CID)


async def test_a_lease_bucket_made_with_a_ttl_by_an_older_version_loses_it(bus: Bus) -> None:
    older = await KvBucket.open(bus, name=bus.subjects.leases_bucket, ttl_s=4.0)
    assert older.ttl_s == 4.0
    a = await leases(bus, "node-a")
    assert a._kv is not None and a._kv.ttl_s is None
    assert await a._kv.status_ttl() is None  # the server's config, not only ours
    assert await a.acquire(CID)


# --- the durable copy -----------------------------------------------------------------------


class Writer:
    """A conversation persisted round by round the way a node does it: the round's new and
    rewritten blocks, the small header and the header rows that changed."""

    def __init__(self, copy: JetStreamCopy, tl: Timeline) -> None:
        self.copy = copy
        self.tl = tl
        self.stored = 0
        self.expect: int | None = None

    async def round(self, records: dict[str, dict[str, Any]] | None = None) -> int:
        new = list(self.tl.blocks_since(self.stored))
        updated = [b for b in self.tl.take_restyled() if 0 <= b.seq < self.stored]
        header = {**self.tl.snapshot(), "boundary_seq": self.tl.boundary_seq}
        self.expect = await self.copy.publish_round(
            self.tl.conversation_id,
            new,
            updated,
            header,
            expect=self.expect,
            records=records,
            rows=self.tl.take_row_changes(),
        )
        self.stored += len(new)
        return self.expect


def dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    """Block dicts in seq order as the wire gives them back (msgpack round trip)."""
    return [unpack(pack(b.to_dict())) for b in sorted(blocks, key=lambda b: b.seq)]


def cite(build: Build, *names: str, title: str = "") -> None:
    """Sources a tool found: a new URL gets the next SID, a known one merges (a longer title
    wins and the row changes)."""
    build.tl.sources.add_rows(
        SourceRow(0, url=f"https://docs.example.com/{n}", title=title or f"{n} doc", text=words(5))
        for n in names
    )


def pool(tl: Timeline) -> list[tuple[int, str, str]]:
    return [(row.sid, row.url, row.title) for row in tl.sources.rows()]


def plans(tl: Timeline) -> tuple[str | None, list[dict[str, Any]]]:
    current = tl.plans.current
    return (None if current is None else current.plan_id), [p.to_dict() for p in tl.plans.plans()]


def all_rows(tl: Timeline) -> dict[str, Any]:
    """Every header row of ``tl`` as the wire gives it back."""
    return dict(unpack(pack(split(tl.full_snapshot())[1])))


def assert_same_rows(got: Timeline, want: Timeline) -> None:
    """The same sources pool (SIDs, URLs, titles, next SID) and plans (current one included)."""
    assert pool(want), "the original has no sources: nothing is compared"
    assert pool(got) == pool(want)
    assert [r.to_dict() for r in got.sources.rows()] == [r.to_dict() for r in want.sources.rows()]
    assert got.sources.next_sid == want.sources.next_sid
    assert plans(got) == plans(want)
    assert got.full_snapshot() == unpack(pack(want.full_snapshot()))


async def test_three_rounds_rebuild_with_the_hide_applied(bus: Bus) -> None:
    copy = await durable(bus, "node-a")
    build = Build(Timeline(CID))
    writer = Writer(copy, build.tl)
    build.turn("t1", "first question")
    build.tool("k1", words(30))
    cite(build, "a", "b")
    build.plan(["search", "answer"])
    await writer.round({"t1": {"status": "running", "round": 1}})
    build.completion("first answer")
    build.tl.acknowledge("✓ 1. search", turn_id="t1", ts=build.at(), iteration=1)
    build.turn("t2", "second question")
    cite(build, "c")
    await writer.round({"t1": {"status": "completed"}})
    result = [b for b in build.tl.blocks if b.call_id == "k1" and b.type == TOOL_RESULT]
    assert len(result) == 1
    build.tl.set_hidden(result, "[hidden: k1]")
    build.tool("k2", "small")
    cite(build, "a", title="a doc, with the longer title of a second read")
    last = await writer.round({"t2": {"status": "running", "round": 1}})

    rebuilt = await copy.rebuild(CID)
    assert rebuilt is not None
    header, blocks = rebuilt
    assert blocks == dicts(build.tl.blocks)
    assert [b["seq"] for b in blocks] == list(range(len(build.tl.blocks)))
    hidden = [b for b in blocks if b.get("hidden")]
    assert [(b["id"], b["replacement"]) for b in hidden] == [(result[0].id, "[hidden: k1]")]
    assert header["revision"] == 3 and header["writer"] == "node-a"
    assert header["stored_seq"] == len(build.tl.blocks)
    assert {k: v for k, v in header.items() if k in build.tl.snapshot()} == unpack(
        pack(build.tl.snapshot())
    )
    assert "sources" not in header and "plans" not in header  # rows, not in the head
    full = await copy.read(CID)
    assert isinstance(full, Rebuilt) and full.kv_revision == last
    assert full.rows == all_rows(build.tl)
    assert full.rows[source_key(1)]["title"] == "a doc, with the longer title of a second read"
    restored = Timeline.restore(full.snapshot, full.blocks, rows=full.rows)
    assert_same_rows(restored, build.tl)
    assert [b.to_dict() for b in restored] == [unpack(pack(b.to_dict())) for b in build.tl]
    assert full.records == {
        "t1": {"status": "completed"},
        "t2": {"status": "running", "round": 1},
    }
    assert await copy.head(CID) == (header, last)
    assert await copy.rebuild("never-written") is None


async def test_a_round_larger_than_the_max_payload_is_split_and_rebuilt(bus: Bus) -> None:
    copy = await durable(bus, "node-a")
    build = Build(Timeline(CID))
    writer = Writer(copy, build.tl)
    build.turn("t1", "big")
    build.result("k1", "x" * (messages.MAX_PAYLOAD + 100_000))  # one block over the limit
    build.result("k2", "y" * (messages.MAX_PAYLOAD // 2))
    build.completion("done")
    await writer.round()
    current = await copy.head(CID)
    assert current is not None
    parts = current[0]["stream_seq"]  # this prefix's stream holds only this round's parts
    assert parts >= 2
    js = bus.nc.jetstream()
    for seq in range(1, parts + 1):
        msg = await js.get_msg(copy.stream, seq=seq)
        assert msg.data is not None and len(msg.data) <= messages.MAX_PAYLOAD
        part = unpack(msg.data)
        assert (part["part"], part["parts"], part["revision"]) == (seq - 1, parts, 1)
    rebuilt = await copy.rebuild(CID)
    assert rebuilt is not None and rebuilt[1] == dicts(build.tl.blocks)


async def test_two_writers_on_one_head_one_wins_and_the_other_retries_rebased(
    bus: Bus, other_bus: Bus
) -> None:
    a, b = await durable(bus, "node-a"), await durable(other_bus, "node-b")
    base = Build(Timeline(CID))
    base.turn("t1", "shared")
    first = await Writer(a, base.tl).round()
    assert await b.head(CID) is not None  # both now build on `first`

    def branch(text: str) -> list[Block]:
        ts = 1_900_000_000.0
        return [Block.new(NOTE, "t1", ts, text=text, seq=len(base.tl.blocks) + i) for i in (0, 1)]

    mine, theirs = branch("from a"), branch("from b")
    header = {**base.tl.snapshot(), "boundary_seq": 0}
    outcomes = await asyncio.gather(
        a.publish_round(CID, mine, [], header, expect=first),
        b.publish_round(CID, theirs, [], header, expect=first),
        return_exceptions=True,
    )
    conflicts = [o for o in outcomes if isinstance(o, HeadConflict)]
    wins = [o for o in outcomes if isinstance(o, int)]
    assert len(conflicts) == 1 and len(wins) == 1, outcomes
    lost = conflicts[0]
    assert (lost.conversation_id, lost.expected, lost.actual) == (CID, first, wins[0])
    winner_blocks, loser_blocks = (mine, theirs) if outcomes[0] == wins[0] else (theirs, mine)
    loser = b if outcomes[0] == wins[0] else a
    assert lost.owner == ("node-a" if loser is b else "node-b")

    current = await loser.head(CID)
    assert current is not None
    head, revision = current
    rebased = [
        Block.from_dict({**blk.to_dict(), "seq": head["stored_seq"] + i})
        for i, blk in enumerate(loser_blocks)
    ]
    await loser.publish_round(CID, rebased, [], header, expect=revision)

    rebuilt = await a.rebuild(CID)
    assert rebuilt is not None
    blocks = rebuilt[1]
    assert blocks == dicts([*base.tl.blocks, *winner_blocks, *rebased])
    assert len({blk["id"] for blk in blocks}) == len(blocks)  # the losing try is not in it
    info = await bus.nc.jetstream().stream_info(a.stream)
    assert info.state.messages == 4  # first, both tries of round 2, the retry


async def test_a_losing_round_never_retried_is_ignored_by_rebuild(bus: Bus, other_bus: Bus) -> None:
    a, b = await durable(bus, "node-a"), await durable(other_bus, "node-b")
    build = Build(Timeline(CID))
    writer = Writer(a, build.tl)
    build.turn("t1", "one")
    first = await writer.round()
    assert await b.head(CID) is not None
    build.completion("a's second round")
    await writer.round()
    stale = Block.new(NOTE, "t1", 1.0, text="b's lost round", seq=writer.stored - 1)
    with pytest.raises(HeadConflict) as info:  # same revision number as a's round 2
        await b.publish_round(CID, [stale], [], build.tl.snapshot(), expect=first)
    assert info.value.owner == "node-a"
    await bus.nc.jetstream().publish(a.subject(CID), b"not a round")  # skipped with a warning
    build.completion("a's third round")
    await writer.round()
    rebuilt = await b.rebuild(CID)
    assert rebuilt is not None
    assert rebuilt[1] == dicts(build.tl.blocks)
    assert stale.id not in {blk["id"] for blk in rebuilt[1]}


async def test_a_stale_expect_is_refused_before_anything_is_published(
    bus: Bus, other_bus: Bus
) -> None:
    a = await durable(bus, "node-a")
    build = Build(Timeline(CID))
    writer = Writer(a, build.tl)
    build.turn("t1", "one")
    first = await writer.round()
    build.completion("two")
    second = await writer.round()
    late = await durable(other_bus, "node-b")  # knows nothing of the head yet
    before = (await bus.nc.jetstream().stream_info(a.stream)).state.messages
    note = Block.new(NOTE, "t1", 1.0, text="late", seq=writer.stored)
    with pytest.raises(HeadConflict) as info:
        await late.publish_round(CID, [note], [], build.tl.snapshot(), expect=first)
    assert (info.value.expected, info.value.actual) == (first, second)
    with pytest.raises(HeadConflict):  # a first round for a conversation that has a head
        await late.publish_round(CID, [note], [], build.tl.snapshot(), expect=None)
    assert (await bus.nc.jetstream().stream_info(a.stream)).state.messages == before + 1


async def test_a_head_whose_rounds_are_gone_is_reported_broken(bus: Bus) -> None:
    copy = await durable(bus, "node-a")
    build = Build(Timeline(CID))
    build.turn("t1", "one")
    await Writer(copy, build.tl).round()
    await bus.nc.jetstream().purge_stream(copy.stream)
    with pytest.raises(CopyBroken):
        await copy.rebuild(CID)


# --- into a node's store --------------------------------------------------------------------


def grown(build: Build, turn: str) -> None:
    """A turn of two tool rounds that cite sources (one already known, enriched), with a plan
    made in its first round and acknowledged in its last."""
    build.turn(turn, words(20))
    build.plan(["look it up", "answer"], plan_id=f"{turn}-plan")
    build.rounds(2, size=40, prefix=f"{turn}x")
    cite(build, f"{turn}-1", f"{turn}-2")
    cite(build, "shared", title="shared doc" + " (read again)" * len(build.tl.turn_ids()))
    build.tl.acknowledge("✓ 1. looked", turn_id=turn, ts=build.at(), iteration=1)
    build.completion(words(10))


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
    """``ClusterOwnership.prepare`` publishes a local-only conversation with every row, and
    another node's ``prepare`` adopts it, pool and plans included."""
    build = Build(Timeline(CID))
    with Store(tmp_path / "node-a") as mine, Store(tmp_path / "node-b") as theirs:
        for turn in ("t1", "t2"):
            grown(build, turn)
            mine.persist(build.tl)
        a = ClusterOwnership(bus, "node-a")
        b = ClusterOwnership(other_bus, "node-b")
        await a.start()
        await b.start()
        await a.prepare(CID, mine)
        rebuilt = await b.durable.read(CID)
        assert rebuilt is not None
        assert rebuilt.rows == mine.header_rows(CID) == all_rows(build.tl)
        await b.prepare(CID, theirs)
        loaded = theirs.load(CID).timeline
        assert [x.to_dict() for x in loaded] == [x.to_dict() for x in build.tl]
        assert_same_rows(loaded, build.tl)


def test_cluster_errors_pickle() -> None:
    for error in (HeadConflict("c1", 3, 5, "node-b"), CopyBroken("c1", 7, "gone")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert vars(again) == vars(error)
