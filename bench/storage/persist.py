"""Persisting one turn into a prefilled store, sample by sample, and rolling it back.

``prepare`` fills a ``sync=True`` store with a conversation of N blocks and keeps the
unstored turn; ``sample_sync`` takes one sample of every kind (``append_turn`` with the real
header and with a fixed one, ``Store.persist``, each rolled back, and the naive rewrite of
one JSON file); ``sample_nosync`` the same append without the disk flush; ``measure_load``
loads the conversation back."""

from __future__ import annotations

import functools
import gc
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb

from actline.storage import Store
from actline.storage.layout import CURSOR_SUFFIX, block_key, pack, path_key
from actline.timeline import Block, Timeline
from bench.harness import SanityCheckFailed, summary_ms
from bench.storage.conversation import CID, SEED, TURN_BLOCKS, add, build

PREFILL_CHUNK = 5_000
"""Blocks per ``append_turn`` when filling a store."""
NAIVE_BUDGET_S = 20.0
"""A size's naive samples are skipped when their projected total passes this."""
FIXED_BLOCKS = 100
"""The fixed-header rows write the snapshot of a conversation of this many blocks at every size."""
LOAD_BLOCKS = 10_000
LOAD_RUNS = 5


def naive_samples(blocks: int, samples: int) -> int:
    """Naive rewrites to time at a size: all ``samples`` when cheap, 15 at 10,000, 3 at 100,000."""
    return max(3, min(samples, 150_000 // max(1, blocks)))


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@dataclass
class Case:
    """One size: its timeline (stored blocks plus the unstored turn), store and samples."""

    blocks: int
    root: Path
    tl: Timeline
    stored: list[Block]
    turn: list[Block]
    snapshot: dict[str, Any]
    fixed: dict[str, Any] = field(default_factory=dict)
    """The fixed header: the snapshot of the ``FIXED_BLOCKS`` conversation, at every size."""
    store: Store | None = None
    header_raw: bytes = b""
    fixed_raw: bytes = b""
    turnlog_raw: bytes | None = None
    cursor_raw: bytes = b""
    prefill_seconds: float = 0.0
    naive_bytes: int = 0
    naive_skipped: str | None = None
    lmdb: list[float] = field(default_factory=list)
    persist: list[float] = field(default_factory=list)
    lmdb_fixed: list[float] = field(default_factory=list)
    naive: list[float] = field(default_factory=list)
    nosync: list[float] = field(default_factory=list)

    @property
    def turn_id(self) -> str:
        return self.turn[0].turn_id

    @property
    def turnlog_key(self) -> bytes:
        return f"{CID}/{self.turn_id}".encode()

    def open(self, *, sync: bool) -> Store:
        self.store = Store(self.root / "lmdb", sync=sync)
        return self.store

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    @property
    def opened(self) -> Store:
        assert self.store is not None
        return self.store


def _raw(store: Store, table: str, key: bytes) -> bytes | None:
    value = store.read(lambda txn: txn.get(key, db=store.db[table]))
    return None if value is None else bytes(value)


@functools.cache
def fixed_snapshot(seed: int = SEED) -> dict[str, Any]:
    """``Timeline.snapshot()`` of the ``FIXED_BLOCKS`` conversation and its measured turn."""
    tl, conv = build(FIXED_BLOCKS, seed)
    for block in conv.turn():
        add(tl, block)
    return tl.snapshot()


def prepare(blocks: int, root: Path, seed: int = SEED) -> Case:
    """Build the conversation, fill a ``sync=True`` store with it, add the unstored turn."""
    tl, conv = build(blocks, seed)
    stored = sorted(tl.blocks, key=lambda b: b.seq)
    prefill_rows = tl.take_row_changes()
    prefill_snapshot = tl.snapshot()
    turn = conv.turn()
    for block in turn:
        add(tl, block)
    case = Case(blocks, root, tl, stored, turn, tl.snapshot(), fixed_snapshot(seed))
    store = case.open(sync=True)
    t0 = time.perf_counter()
    for i in range(0, len(stored), PREFILL_CHUNK):
        rows = prefill_rows if i == 0 else None
        store.append_turn(CID, stored[i : i + PREFILL_CHUNK], prefill_snapshot, rows=rows)
    case.prefill_seconds = time.perf_counter() - t0
    header_raw = _raw(store, "snapshots", CID.encode())
    if header_raw is None:
        raise SanityCheckFailed(blocks, "no header stored after the prefill")
    case.header_raw = header_raw
    # What the stored header would be had every earlier turn been written with the fixed one.
    cursors = ("revision", "stored_seq", "boundary_seq")
    stored_header = store.header(CID) or {}
    case.fixed_raw = pack({**case.fixed, **{k: stored_header[k] for k in cursors}})
    case.turnlog_raw = _raw(store, "turnlog", case.turnlog_key)
    case.cursor_raw = _raw(store, "snapshots", CID.encode() + CURSOR_SUFFIX) or b""
    return case


def rollback(case: Case, header_raw: bytes | None = None) -> None:
    """Undo the measured turn: its block, path and turn-log rows go, the old header returns.

    With ``header_raw`` that header is put instead of the prefilled one.
    """
    store = case.opened
    header = case.header_raw if header_raw is None else header_raw

    def fn(txn: lmdb.Transaction) -> None:
        for block in case.turn:
            txn.delete(block_key(CID, block.seq), db=store.db["blocks"])
            if block.path:
                txn.delete(path_key(CID, block.path, block.seq), db=store.db["paths"])
        if case.turnlog_raw is None:
            txn.delete(case.turnlog_key, db=store.db["turnlog"])
        else:
            txn.put(case.turnlog_key, case.turnlog_raw, db=store.db["turnlog"])
        txn.put(CID.encode(), header, db=store.db["snapshots"])
        txn.put(CID.encode() + CURSOR_SUFFIX, case.cursor_raw, db=store.db["snapshots"])

    store.write(fn)
    # The store was rewound behind the timeline: it knows the rewound end, as a timeline
    # knows the end its own last commit stored (the next persist writes the turn again).
    case.tl.stored_seq = min(block.seq for block in case.turn)


def check_written(case: Case, what: str) -> None:
    """Right after a sample: the turn is stored (header, last block, path row, turn log)."""
    store = case.opened
    header = store.header(CID) or {}
    expected = case.blocks + TURN_BLOCKS
    if header.get("stored_seq") != expected:
        raise SanityCheckFailed(
            case.blocks, f"{what}: stored_seq {header.get('stored_seq')}, expected {expected}"
        )
    last = case.turn[-1]
    if [b.id for b in store.read_path(CID, last.path)] != [last.id]:
        raise SanityCheckFailed(case.blocks, f"{what}: {last.path} not stored")
    if store.turn_log(CID, case.turn_id)["blocks_count"] != TURN_BLOCKS:
        raise SanityCheckFailed(case.blocks, f"{what}: turn log of {case.turn_id} is not 20 blocks")


def check_rolled_back(case: Case, count: bool = False) -> None:
    """The store is back to exactly the prefilled ``N`` blocks."""
    store = case.opened
    if _raw(store, "snapshots", CID.encode()) != case.header_raw:
        raise SanityCheckFailed(case.blocks, "the header was not restored by the rollback")
    if _raw(store, "blocks", block_key(CID, case.blocks)) is not None:
        raise SanityCheckFailed(case.blocks, "a block of the measured turn is still stored")
    if count:
        stored = sum(1 for _ in store.iter_blocks(CID))
        if stored != case.blocks:
            raise SanityCheckFailed(case.blocks, f"{stored:,} blocks stored after the rollbacks")


def naive_rewrite(tl: Timeline, path: Path) -> int:
    """The original's persistence: the whole timeline as one JSON file, atomically replaced."""
    document = {"snapshot": tl.full_snapshot(), "blocks": [b.to_dict() for b in tl.blocks]}
    data = json.dumps(document, ensure_ascii=False).encode()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(data)


def sample_sync(case: Case, i: int, naive_n: int, budget: float) -> None:
    """One round at one size: lmdb, fixed hdr and persist() (each rolled back), maybe naive."""
    store = case.opened
    turn, snapshot = case.turn, case.snapshot

    def lmdb_sample() -> None:
        gc.collect(0)
        case.lmdb.append(_timed(lambda: store.append_turn(CID, turn, snapshot)))
        if i == 0:
            check_written(case, "append_turn")
        rollback(case)

    def fixed_sample() -> None:
        rollback(case, case.fixed_raw)  # the previous header is a fixed one too
        gc.collect(0)
        case.lmdb_fixed.append(_timed(lambda: store.append_turn(CID, turn, case.fixed)))
        if i == 0:
            check_written(case, "append_turn with the fixed header")
        rollback(case)

    def persist_sample() -> None:
        gc.collect(0)
        case.persist.append(_timed(lambda: store.persist(case.tl)))
        check_written(case, "persist")  # every sample: what the timeline knows was rewound
        rollback(case)

    kinds = (lmdb_sample, fixed_sample, persist_sample)
    for fn in kinds[i % 3 :] + kinds[: i % 3]:
        fn()
    if i == 0:
        check_rolled_back(case)
    if i < naive_n and case.naive_skipped is None:
        path = case.root / "timeline.json"
        gc.collect(0)
        t0 = time.perf_counter()
        case.naive_bytes = naive_rewrite(case.tl, path)
        case.naive.append(time.perf_counter() - t0)
        if i == 0 and case.naive[0] * naive_n > budget:
            case.naive_skipped = (
                f"one rewrite took {case.naive[0]:.1f} s; {naive_n} would pass the "
                f"{budget:.0f} s budget"
            )


def sample_nosync(case: Case) -> None:
    store = case.opened
    turn, snapshot = case.turn, case.snapshot
    gc.collect(0)
    case.nosync.append(_timed(lambda: store.append_turn(CID, turn, snapshot)))
    rollback(case)


def measure_load(case: Case, runs: int) -> dict[str, Any]:
    """``Store.load`` and raw ``iter_blocks`` of the whole conversation; it must round-trip."""
    store = case.opened
    if int((store.header(CID) or {}).get("boundary_seq", -1)) != 0:
        raise SanityCheckFailed(case.blocks, "the load conversation's boundary_seq is not 0")
    loads: list[float] = []
    raws: list[float] = []
    loaded: Timeline | None = None
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        loaded = store.load(CID).timeline
        loads.append(time.perf_counter() - t0)
        del loaded
        gc.collect()
        t0 = time.perf_counter()
        rows = list(store.iter_blocks(CID))
        raws.append(time.perf_counter() - t0)
        del rows
    loaded = store.load(CID).timeline
    got = [b.to_dict() for b in sorted(loaded.blocks, key=lambda b: b.seq)]
    if got != [b.to_dict() for b in case.stored]:
        raise SanityCheckFailed(case.blocks, "the loaded blocks differ from the stored ones")
    if loaded.sources.to_dict() != case.tl.sources.to_dict():
        raise SanityCheckFailed(case.blocks, "the loaded sources pool differs")
    return {
        "blocks": case.blocks,
        "runs": runs,
        "load": summary_ms(loads),
        "iter_blocks": summary_ms(raws),
        "loaded_blocks": len(loaded),
        "matches_stored": True,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def _p50(samples: list[float]) -> float | None:
    return summary_ms(samples)["p50_ms"] if samples else None
