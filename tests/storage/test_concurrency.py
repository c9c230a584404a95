"""Concurrency: readers on MVCC snapshots next to writers, in threads and in processes.

Threads share the one ``Store`` of this process; processes are workers
(``tests/storage/worker.py``) that open the environment themselves. Steps are
handed over with semaphores, events and stdin/stdout lines, never with sleeps.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lmdb
import pytest

from actline.storage import Store
from actline.storage import reads as reads_module
from actline.timeline import Timeline
from tests.storage.worker import (
    SCRATCH_DB,
    SMALL_MAP,
    Worker,
    add_turn,
    check_whole,
    held_key,
    reader_pids,
)

CID = "c1"
WAIT = 30.0
"""Upper bound on a hand-over between threads; reaching it is a failure, not a pause."""


def seeded(store: Store, turns: int, cid: str = CID) -> Timeline:
    """A conversation of ``turns`` worker turns, one persist each."""
    tl = Timeline(cid)
    for n in range(1, turns + 1):
        add_turn(tl, n)
        store.persist(tl)
    return tl


def seeded_from(store: Store, tl: Timeline, first: int, last: int) -> None:
    """Append turns ``first..last`` to ``tl``, one persist each."""
    for n in range(first, last + 1):
        add_turn(tl, n)
        store.persist(tl)


def seed(store_dir: Path, turns: int, cid: str = CID) -> None:
    """Seed in this process and close again, before any worker opens the environment."""
    with Store(store_dir, map_size=SMALL_MAP) as store:
        seeded(store, turns, cid)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1) as executor:
        yield executor


class CuedWriter:
    """A writer thread that commits one turn per ``step`` (and stops at ``stop``)."""

    def __init__(self, pool: ThreadPoolExecutor, store: Store, tl: Timeline, turns: int) -> None:
        self.go, self.done = threading.Semaphore(0), threading.Semaphore(0)
        self.stopped = False
        self.future = pool.submit(self._write, store, tl, turns)

    def _write(self, store: Store, tl: Timeline, turns: int) -> list[int]:
        revisions = []
        for _ in range(turns):
            if not self.go.acquire(timeout=WAIT):
                raise TimeoutError("the reader never released the writer")
            if self.stopped:
                break
            add_turn(tl, len(tl.turn_ids()) + 1)
            revisions.append(store.persist(tl))
            self.done.release()
        return revisions

    def step(self) -> None:
        """Let the writer commit one turn and wait until it did."""
        self.go.release()
        if not self.done.acquire(timeout=WAIT):
            self.future.result(timeout=0)  # raises what stopped the writer, if anything
            raise AssertionError("the writer did not commit while a reader was open")

    def stop(self) -> None:
        self.stopped = True
        self.go.release()


def read_while_appending(store: Store, tl: Timeline, pool: ThreadPoolExecutor) -> None:
    """Iterate the conversation; after each block read, the writer thread commits a turn."""
    turns = 6
    header = store.header(CID)
    assert header is not None
    writer = CuedWriter(pool, store, tl, turns)
    seqs = []
    try:
        for block in store.iter_blocks(CID):
            seqs.append(block["seq"])
            if len(seqs) <= turns:
                writer.step()
    finally:
        writer.stop()
    assert seqs == list(range(header["stored_seq"]))
    revision = header["revision"]
    assert writer.future.result(timeout=WAIT) == list(range(revision + 1, revision + turns + 1))
    assert check_whole(store, CID) == revision + turns


# -- threads sharing one Store ----------------------------------------------------------------


def test_a_reader_thread_sees_one_snapshot_while_a_writer_thread_appends(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    with Store(tmp_path) as store:
        tl = seeded(store, 3)
        read_while_appending(store, tl, pool)


def test_a_reader_thread_keeps_its_snapshot_while_a_writer_thread_grows_the_map(
    tmp_path: Path, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path, map_size=SMALL_MAP) as store:
        tl = seeded(store, 2)
        header = store.header(CID)
        assert header is not None
        start = store.map_size
        growing = threading.Event()
        grow = store._grow

        def signalled_grow() -> None:
            growing.set()
            grow()

        monkeypatch.setattr(store, "_grow", signalled_grow)
        blocks = store.iter_blocks(CID)
        seqs = [next(blocks)["seq"]]
        # Turns 3, 6 and 9 are large: the writer must grow the map while the reader is open.
        writer = pool.submit(seeded_from, store, tl, 3, 9)
        assert growing.wait(WAIT), "the writer did not need to grow the map"
        # The reader goes on without waiting for the writer (which may wait for it).
        seqs += [block["seq"] for block in blocks]
        assert seqs == list(range(header["stored_seq"]))
        writer.result(timeout=WAIT)
        assert store.map_size > start
        assert check_whole(store, CID) == 9


def test_a_load_sees_the_header_and_the_blocks_of_one_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor
) -> None:
    with Store(tmp_path) as store:
        tl = seeded(store, 2)
        real_unpack = reads_module.unpack
        committed: list[int] = []

        def header_then_a_commit(data: bytes | memoryview) -> Any:
            # Pins what another writer may do at any time: commit a turn right after this
            # reader unpacked the header, while it has not read the blocks yet.
            value = real_unpack(data)
            if not committed:
                committed.append(1)
                pool.submit(seeded_from, store, tl, 3, 3).result(timeout=WAIT)
            return value

        monkeypatch.setattr(reads_module, "unpack", header_then_a_commit)
        loaded = store.load(CID)
        monkeypatch.setattr(reads_module, "unpack", real_unpack)
        assert committed
        assert loaded.revision == 2  # the reader's snapshot predates the commit
        assert len(loaded.timeline) == loaded.header["stored_seq"]
        assert loaded.timeline.snapshot()["next_seq"] == loaded.header["next_seq"]
        assert check_whole(store, CID) == 3


def outgrow(store: Store, key: bytes) -> None:
    """Write one value as large as the whole map: the map must grow (in this thread)."""
    start = store.map_size
    store.write(lambda txn: txn.put(key, bytes(start), db=store.db[SCRATCH_DB]))
    assert store.map_size > start


def test_an_iteration_handed_from_one_thread_to_another_leaves_both_able_to_grow_the_map(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    with Store(tmp_path, map_size=SMALL_MAP) as store:
        seeded(store, 2)
        outgrow(store, b"test/before")  # growing works before the hand-over
        header = store.header(CID)
        assert header is not None
        blocks = store.iter_blocks(CID)
        first = pool.submit(next, blocks).result(timeout=WAIT)  # started on the pool's thread
        seqs = [first["seq"], *(block["seq"] for block in blocks)]  # finished on this one
        assert seqs == list(range(header["stored_seq"]))
        outgrow(store, b"test/main")
        pool.submit(outgrow, store, b"test/pool").result(timeout=WAIT)


def test_a_reader_thread_is_not_blocked_by_an_open_write_transaction(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    with Store(tmp_path) as store:
        seeded(store, 3)
        header = store.header(CID)
        assert header is not None
        inside, release = threading.Event(), threading.Event()
        key = held_key(0)

        def hold(txn: lmdb.Transaction) -> None:
            txn.put(key, b"", db=store.db[SCRATCH_DB])
            inside.set()
            if not release.wait(WAIT):
                raise TimeoutError("the reader never released the write transaction")

        writer = pool.submit(store.write, hold)
        assert inside.wait(WAIT)
        try:
            assert store.header(CID) == header
            assert len(list(store.iter_blocks(CID))) == header["stored_seq"]
            assert store.load(CID).revision == header["revision"]
            assert store.read(lambda txn: txn.get(key, db=store.db[SCRATCH_DB])) is None
            assert not writer.done()
        finally:
            release.set()
        writer.result(timeout=WAIT)
        assert store.read(lambda txn: txn.get(key, db=store.db[SCRATCH_DB])) == b""


def test_two_threads_writing_different_conversations_through_one_store_both_finish_whole(
    tmp_path: Path,
) -> None:
    turns = 9
    with Store(tmp_path) as store, ThreadPoolExecutor(max_workers=2) as pool:
        writers = [pool.submit(seeded, store, turns, cid) for cid in ("left", "right")]
        for writer in writers:
            writer.result(timeout=WAIT)
        assert check_whole(store, "left") == turns
        assert check_whole(store, "right") == turns


def test_two_threads_growing_the_map_while_writing_different_conversations_both_finish(
    tmp_path: Path,
) -> None:
    # A race, not a pinned interleaving: one writer grows the map while the other is in
    # (or beginning) its write transaction. Four rounds make a miss unlikely.
    turns = 9  # turns 3, 6 and 9 are large: both writers grow the map
    for attempt in range(4):
        with (
            Store(tmp_path / f"store-{attempt}", map_size=SMALL_MAP) as store,
            ThreadPoolExecutor(max_workers=2) as pool,
        ):
            writers = [pool.submit(seeded, store, turns, cid) for cid in ("left", "right")]
            for writer in writers:
                writer.result(timeout=WAIT)
            assert check_whole(store, "left") == turns
            assert check_whole(store, "right") == turns
            assert store.map_size > SMALL_MAP


# -- separate processes -----------------------------------------------------------------------


def test_a_reader_process_sees_one_snapshot_while_a_writer_process_appends(
    tmp_path: Path,
) -> None:
    store_dir = tmp_path / "store"
    seed(store_dir, 3)
    with (
        Worker("read", store_dir, CID, "--step", log_dir=tmp_path) as reader,
        Worker("append", store_dir, CID, "--step", "--turns", 6, log_dir=tmp_path) as writer,
    ):
        assert reader.line() == "opened"
        stored_seq = int(reader.expect("reading"))
        assert writer.line() == "opened"
        start_map = int(writer.expect("ready").split()[1])
        map_sizes = []
        seqs = None
        for step in range(stored_seq + 6):
            if step < 6:  # the writer commits a turn between two blocks of the reader
                writer.send()
                revision, map_size = map(int, writer.line().split())
                assert revision == 4 + step
                map_sizes.append(map_size)
            reader.send()
            line = reader.line()
            if line.startswith("read "):
                seqs = json.loads(line.removeprefix("read "))
                break
        assert writer.finish() == ["done"]
        assert reader.finish() == []
    assert seqs == list(range(stored_seq))
    assert max(map_sizes) > start_map, "the writer did not grow the map under the reader"
    with Store(store_dir, map_size=SMALL_MAP) as store:
        assert check_whole(store, CID) == 9


def test_a_reader_process_is_not_blocked_by_a_write_transaction_of_another_process(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "store") as store:
        seeded(store, 3)
        header = store.header(CID)
        assert header is not None
        # Opened before the worker holds the write lock: opening runs write transactions.
        with Worker("hold-write", tmp_path / "store", log_dir=tmp_path) as writer:
            assert writer.line() == "holding"
            key = held_key(writer.pid)
            assert store.header(CID) == header
            assert len(list(store.iter_blocks(CID))) == header["stored_seq"]
            assert store.load(CID).revision == header["revision"]
            assert store.read(lambda txn: txn.get(key, db=store.db[SCRATCH_DB])) is None
            writer.send()
            assert writer.finish() == ["committed"]
        assert store.read(lambda txn: txn.get(key, db=store.db[SCRATCH_DB])) == b""


def test_blocks_iterate_in_a_process_whose_map_another_process_grew(tmp_path: Path) -> None:
    with Store(tmp_path / "store", map_size=SMALL_MAP) as store:
        seeded(store, 1)
        start = store.map_size
        with Worker("append", tmp_path / "store", CID, "--turns", 8, log_dir=tmp_path) as writer:
            lines = writer.finish()
        assert lines[-1] == "done"
        assert int(lines[-2].split()[1]) > start, "the writer did not grow the map"
        seqs = [b["seq"] for b in store.iter_blocks(CID)]
        header = store.header(CID)
        assert header is not None
        assert seqs == list(range(header["stored_seq"]))


def test_two_processes_writing_different_conversations_both_finish_whole(
    tmp_path: Path,
) -> None:
    store_dir = tmp_path / "store"
    turns = 15
    with (
        Worker("append", store_dir, "left", "--wait-go", "--turns", turns, log_dir=tmp_path) as a,
        Worker("append", store_dir, "right", "--wait-go", "--turns", turns, log_dir=tmp_path) as b,
    ):
        for writer in (a, b):
            assert writer.line() == "opened"
            assert writer.expect("ready").split()[0] == "0"
        a.send()
        b.send()
        reports = [a.finish(), b.finish()]
    for lines in reports:
        assert lines[-1] == "done"
        assert [int(line.split()[0]) for line in lines[:-1]] == list(range(1, turns + 1))
    with Store(store_dir, map_size=SMALL_MAP) as store:
        assert check_whole(store, "left") == turns
        assert check_whole(store, "right") == turns
        assert store.map_size > SMALL_MAP


def test_a_killed_reader_leaves_a_stale_slot_that_the_next_open_clears(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    seed(store_dir, 2)
    # The keeper holds the environment open, so that the next open does not reset the lock
    # file (which would drop every slot whatever reader_check does).
    with Worker("keep", store_dir, log_dir=tmp_path) as keeper:
        assert keeper.line() == "opened"
        with Worker("read", store_dir, CID, log_dir=tmp_path) as reader:
            assert reader.line() == "opened"
            reader.expect("reading")
            keeper.send()
            assert reader.pid in json.loads(keeper.expect("readers"))
            reader.kill()
        keeper.send()
        assert reader.pid in json.loads(keeper.expect("readers")), "no stale slot was left"
        with Store(store_dir, map_size=SMALL_MAP) as store:
            assert reader.pid not in reader_pids(store.env)
            assert store.env.reader_check() == 0
            assert check_whole(store, CID) == 2
        keeper.send()
        assert reader.pid not in json.loads(keeper.expect("readers"))
