"""The JetStream durable copy on a real nats-server: rounds published and rebuilt, split when
large, and writers that race on one head."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from actline import messages
from actline.actors.errors import CopyBroken, HeadConflict
from actline.actors.ownership.durable import Rebuilt
from actline.bus import Bus
from actline.storage.layout import pack, unpack
from actline.timeline import Block, Timeline
from actline.timeline.blocks import NOTE, TOOL_RESULT
from actline.timeline.snapshot import source_key
from tests.actors.ownership.copies import (
    CID,
    Writer,
    all_rows,
    assert_same_rows,
    cite,
    dicts,
    durable,
)
from tests.timeline.builders import Build, words

# --- the durable copy -----------------------------------------------------------------------


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


def test_cluster_errors_pickle() -> None:
    for error in (HeadConflict("c1", 3, 5, "node-b"), CopyBroken("c1", 7, "gone")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert vars(again) == vars(error)
