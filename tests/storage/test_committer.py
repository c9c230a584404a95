"""Group commit over a real LMDB store: one transaction per loop iteration, each write
rolled back alone when it raises, writes queued behind a thread commit, close, rounds."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import lmdb
import pytest

from actline.storage import SequenceGap, Store
from actline.storage.committer import Committer, CommitterClosed
from actline.storage.committer import stats as committer_stats
from actline.timeline import Block, Timeline
from actline.timeline.blocks import NOTICE
from tests.timeline.builders import Build, words

WAIT_S = 30.0
"""How long a test waits for a condition before it gives up (never a pace)."""


@dataclass
class Group:
    store: Store
    committer: Committer


@contextlib.asynccontextmanager
async def opened(path: Path, *, sync: bool) -> AsyncIterator[Group]:
    store = Store(path, sync=sync)
    committer = Committer(store)
    committer.start()
    try:
        yield Group(store, committer)
    finally:
        committer.close()
        store.close()


@pytest.fixture(params=[True, False], ids=["synced", "unsynced"])
async def group(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Group]:
    async with opened(tmp_path / "db", sync=request.param) as opened_group:
        yield opened_group


@pytest.fixture
async def synced(tmp_path: Path) -> AsyncIterator[Group]:
    """A synced store: a batch commits on the writer thread."""
    async with opened(tmp_path / "db", sync=True) as opened_group:
        yield opened_group


def put(store: Store, key: str, value: bytes = b"v") -> Callable[[lmdb.Transaction], str]:
    """A write function: one row in the vectors table; returns its key."""

    def fn(txn: lmdb.Transaction) -> str:
        txn.put(key.encode(), value, db=store.db["vectors"])
        return key

    return fn


def failing(store: Store, key: str, error: Exception) -> Callable[[lmdb.Transaction], str]:
    """Writes a row, then raises: nothing of it may stay."""

    def fn(txn: lmdb.Transaction) -> str:
        txn.put(key.encode(), b"half", db=store.db["vectors"])
        raise error

    return fn


def stored(store: Store, *keys: str) -> set[str]:
    return set(store.get_vectors(list(keys)))


async def test_a_single_write_commits_and_its_future_gets_the_return_value(group: Group) -> None:
    store, committer = group.store, group.committer
    assert await committer.submit(put(store, "a")) == "a"
    assert stored(store, "a") == {"a"}
    assert (committer.transactions, committer.writes) == (1, 1)


async def test_writes_submitted_in_one_loop_iteration_share_one_transaction(group: Group) -> None:
    store, committer = group.store, group.committer
    futures = [committer.submit(put(store, k)) for k in ("a", "b", "c", "d")]
    assert await asyncio.gather(*futures) == ["a", "b", "c", "d"]
    assert (committer.transactions, committer.writes) == (1, 4)
    assert stored(store, "a", "b", "c", "d") == {"a", "b", "c", "d"}
    # the next iteration's writes are the next transaction
    assert await committer.submit(put(store, "e")) == "e"
    assert (committer.transactions, committer.writes) == (2, 5)


async def test_the_counters_say_where_each_transaction_ran_and_how_long_it_took(
    synced: Group,
) -> None:
    store, committer = synced.store, synced.committer
    assert committer_stats(committer) == {
        "transactions": 0,
        "writes": 0,
        "writes_per_transaction": 0.0,
        "inline": 0,
        "seconds": 0.0,
        "mean_ms": 0.0,
    }
    await committer.submit(put(store, "a"))  # alone: on the event loop
    await asyncio.gather(*(committer.submit(put(store, k)) for k in ("b", "c", "d")))  # thread
    with pytest.raises(ValueError):  # a write that fails alone still commits its transaction
        await committer.submit(failing(store, "e", ValueError("bad row")))
    stats = committer_stats(committer)
    assert (stats["transactions"], stats["writes"], stats["inline"]) == (3, 4, 2)
    assert stats["writes_per_transaction"] == 4 / 3
    assert stats["seconds"] == committer.seconds > 0
    assert stats["mean_ms"] == committer.seconds / 3 * 1e3


@pytest.mark.parametrize(
    "error",
    [ValueError("bad row"), SequenceGap("c1", 0, 5)],
    ids=["ValueError", "SequenceGap"],
)
async def test_a_write_that_raises_fails_alone_and_the_rest_of_its_batch_commits(
    group: Group, error: Exception
) -> None:
    store, committer = group.store, group.committer
    first = committer.submit(put(store, "a"))
    bad = committer.submit(failing(store, "bad", error))
    last = committer.submit(put(store, "c"))
    assert await first == "a" and await last == "c"
    with pytest.raises(type(error)) as caught:
        await bad
    assert caught.value is error
    assert stored(store, "a", "bad", "c") == {"a", "c"}
    assert (committer.transactions, committer.writes) == (1, 2)


async def test_a_store_sequence_gap_fails_only_that_conversations_write(group: Group) -> None:
    store, committer = group.store, group.committer
    tl = Timeline("c1")
    tl.begin_turn("t1", 1.0)
    gap = Block.new(NOTICE, "t1", 2.0, seq=5, text="five")  # c1 has nothing stored: seq 0 next
    wrong = store.append_fn("c1", [gap], tl.snapshot())
    other = Timeline("c2")
    Build(other).turn("t1", "hello")
    right = store.prepare_round(other, turn_records={"t1": {"status": "running", "round": 0}})
    bad = committer.submit(wrong)
    good = committer.submit(right.write)
    assert await good == 1
    with pytest.raises(SequenceGap) as caught:
        await bad
    assert (caught.value.conversation_id, caught.value.expected, caught.value.got) == ("c1", 0, 5)
    assert store.header("c1") is None and store.cursor("c1") == (0, 0)
    assert store.turn_record("c2", "t1") == {"status": "running", "round": 0}
    assert (committer.transactions, committer.writes) == (1, 1)


async def test_a_write_with_a_key_lmdb_refuses_fails_alone(group: Group) -> None:
    """A key longer than LMDB takes is that write's own error, not the map's or the disk's:
    the writes batched with it still commit (the module docstring's promise)."""
    store, committer = group.store, group.committer
    too_long = "k" * (store.env.max_key_size() + 1)
    first = committer.submit(put(store, "a"))
    bad = committer.submit(put(store, too_long))
    last = committer.submit(put(store, "c"))
    outcomes = await asyncio.gather(first, bad, last, return_exceptions=True)
    assert isinstance(outcomes[1], lmdb.Error)
    assert outcomes[0] == "a" and outcomes[2] == "c", outcomes
    assert stored(store, "a", "c") == {"a", "c"}


async def test_a_batch_that_must_grow_the_map_is_retried_whole(tmp_path: Path) -> None:
    store = Store(tmp_path / "db", map_size=64 << 10, sync=False)
    committer = Committer(store)
    committer.start()
    try:
        start = store.map_size
        big = committer.submit(put(store, "big", b"x" * (1 << 20)))
        small = committer.submit(put(store, "small"))
        assert list(await asyncio.gather(big, small)) == ["big", "small"]
        assert store.map_size > start
        assert stored(store, "big", "small") == {"big", "small"}
        assert (committer.transactions, committer.writes) == (1, 2)
    finally:
        committer.close()
        store.close()


async def test_writes_submitted_while_a_thread_commit_is_in_flight_all_commit(
    synced: Group,
) -> None:
    store, committer = synced.store, synced.committer
    entered, release = threading.Event(), threading.Event()

    def held(txn: lmdb.Transaction) -> str:
        txn.put(b"held", b"v", db=store.db["vectors"])
        entered.set()
        if not release.wait(WAIT_S):
            raise TimeoutError("the test never released the writer thread")
        return "held"

    first = [committer.submit(held), *(committer.submit(put(store, k)) for k in ("a1", "a2"))]
    assert await asyncio.to_thread(entered.wait, WAIT_S), "the batch of 3 went to the writer thread"
    behind = [committer.submit(put(store, "b1")), committer.submit(put(store, "b2"))]
    await asyncio.sleep(0)  # one iteration: the new batch is flushed behind the one in flight
    alone = committer.submit(put(store, "c1"))
    await asyncio.sleep(0)
    assert not any(f.done() for f in [*first, *behind, alone])
    release.set()
    results = await asyncio.gather(*first, *behind, alone)
    assert results == ["held", "a1", "a2", "b1", "b2", "c1"]
    keys = ("held", "a1", "a2", "b1", "b2", "c1")
    assert stored(store, *keys) == set(keys)
    # the first batch, then everything that waited for it as one batch
    assert (committer.transactions, committer.writes) == (2, 6)


async def test_close_commits_what_is_queued_and_later_submits_fail(group: Group) -> None:
    store, committer = group.store, group.committer
    queued = [committer.submit(put(store, "a")), committer.submit(put(store, "b"))]
    committer.close()  # before the loop ran the flush
    assert all(f.done() for f in queued)
    assert [f.result() for f in queued] == ["a", "b"]
    assert stored(store, "a", "b") == {"a", "b"}
    with pytest.raises(CommitterClosed):
        committer.submit(put(store, "late"))
    committer.close()  # a second close is a no-op
    await asyncio.sleep(0)  # the flush scheduled before close finds nothing
    assert (committer.transactions, committer.writes) == (1, 2)
    assert stored(store, "late") == set()


async def test_close_while_a_thread_commit_is_in_flight_commits_everything(
    synced: Group,
) -> None:
    store, committer = synced.store, synced.committer
    entered, release = threading.Event(), threading.Event()

    def held(txn: lmdb.Transaction) -> str:
        entered.set()
        if not release.wait(WAIT_S):
            raise TimeoutError("the test never released the writer thread")
        txn.put(b"held", b"v", db=store.db["vectors"])
        return "held"

    first = [committer.submit(held), committer.submit(put(store, "a1"))]
    assert await asyncio.to_thread(entered.wait, WAIT_S)
    behind = committer.submit(put(store, "b1"))
    await asyncio.sleep(0)  # flushed: waits behind the thread commit
    queued = committer.submit(put(store, "c1"))  # not flushed yet
    release.set()
    committer.close()
    assert await asyncio.gather(*first, behind, queued) == ["held", "a1", "b1", "c1"]
    assert stored(store, "held", "a1", "b1", "c1") == {"held", "a1", "b1", "c1"}


def test_a_committer_that_was_not_started_refuses_writes(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        with pytest.raises(CommitterClosed):
            Committer(store).submit(put(store, "a"))


async def test_a_timeline_round_prepared_by_the_store_persists_and_loads_back(
    group: Group,
) -> None:
    store, committer = group.store, group.committer
    b = Build(Timeline("c1"))
    b.turn("t1", "what are the plans?")
    b.rounds(2, size=30, prefix="r1x")
    prepared = store.prepare_round(b.tl, turn_records={"t1": {"status": "running", "round": 1}})
    revision = await committer.submit(prepared.write)
    assert revision == 1
    assert prepared.done(revision).revision == 1
    assert store.turn_record("c1", "t1") == {"status": "running", "round": 1}

    b.rounds(1, size=30, prefix="r2x")
    b.completion(words(5))
    second = store.prepare_round(b.tl, turn_records={"t1": {"status": "completed"}})
    new = [blk.seq for blk in second.round.blocks]
    assert new == list(range(len(prepared.round.blocks), len(b.tl)))  # only what is new
    assert await committer.submit(second.write) == 2

    loaded = store.load("c1")
    assert loaded.revision == 2
    assert [x.to_dict() for x in loaded.timeline.blocks] == [x.to_dict() for x in b.tl.blocks]
    assert store.turn_record("c1", "t1") == {"status": "completed"}
    assert store.turn_log("c1", "t1")["blocks_count"] == len(b.tl)


async def test_a_timeline_knows_how_far_its_own_commits_stored_it(group: Group) -> None:
    """After a commit the next round is packed without reading the store's cursor; a
    write that finds the store moved on (another writer) fails alone with ``SequenceGap``,
    and its undo makes the next round ask the store again."""
    store, committer = group.store, group.committer
    b = Build(Timeline("c1"))
    b.turn("t1", "what are the plans?")
    b.rounds(1, size=20)
    assert b.tl.stored_seq is None  # a timeline that never committed asks the store
    prepared = store.prepare_round(b.tl)
    prepared.done(await committer.submit(prepared.write))
    assert b.tl.stored_seq == len(b.tl) == store.cursor("c1")[1]

    b.rounds(1, size=20, prefix="r2x")
    second = store.prepare_round(b.tl)
    first_seq = len(prepared.round.blocks)
    assert [x.seq for x in second.round.blocks] == list(range(first_seq, len(b.tl)))
    second.done(await committer.submit(second.write))
    assert b.tl.stored_seq == len(b.tl) == store.cursor("c1")[1]

    elsewhere = Block.new(NOTICE, "t1", 9.0, seq=len(b.tl), text="written by another node")
    store.append_turn("c1", [elsewhere], b.tl.snapshot())
    b.rounds(1, size=10, prefix="r3x")
    stale = store.prepare_round(b.tl)
    mine = len(b.tl) - len(stale.round.blocks)  # the seq its first new block has
    with pytest.raises(SequenceGap) as gap:
        await committer.submit(stale.write)
    assert (gap.value.expected, gap.value.got) == (mine + 1, mine)
    stale.undo()
    assert b.tl.stored_seq is None
    assert store.cursor("c1")[1] == mine + 1  # nothing of it was written


async def test_rounds_of_two_conversations_commit_in_one_transaction(group: Group) -> None:
    store, committer = group.store, group.committer
    timelines = []
    for cid in ("c1", "c2"):
        b = Build(Timeline(cid))
        b.turn("t1", f"question of {cid}")
        b.rounds(1, size=20)
        timelines.append(b.tl)
    prepared = [store.prepare_round(tl) for tl in timelines]
    revisions = await asyncio.gather(*(committer.submit(p.write) for p in prepared))
    assert revisions == [1, 1]
    assert (committer.transactions, committer.writes) == (1, 2)
    for tl in timelines:
        loaded = store.load(tl.conversation_id).timeline
        assert [x.to_dict() for x in loaded.blocks] == [x.to_dict() for x in tl.blocks]
