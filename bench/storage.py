"""Turn persistence in the LMDB store against rewriting the whole timeline as one JSON file.

A deterministic conversation (seeded ``random.Random``; block ids ``b<k>``,
turn ids ``t<n>``; turns of a header, a prompt, 1-12 decision rounds of
sometimes notes, a tool call and its result, and a completion; texts of
100 B-2 KB; a sources pool of 50 rows) is built to exactly ``N`` blocks for N
in ``--sizes``, as a ``Timeline``, and written into its own ``Store`` (one
LMDB environment per size, under the system temp directory, removed at the
end) in transactions of 5,000 blocks. Then one more turn of exactly 20 blocks
(header, prompt, 8 tool calls with results, notes, completion) is appended to
the timeline in memory, and every sample persists that turn:

- lmdb: ``Store.append_turn(cid, the 20 blocks, tl.snapshot())``
  with the snapshot taken once (the real header of that timeline: cursors, cache
  and notices; the pool and plans are header rows, stored with the prefill and
  not changed by the turn).
- fixed hdr: the same call with the header of a 100-block conversation at every
  size, the previous stored header being such a one too; this isolates the
  store's own cost.
- persist(): ``Store.persist(tl)``, the call production makes after a round;
  it writes the same rows and also reads the stored header, finds the new
  blocks in the timeline and takes the snapshot.
- naive: what the original does every turn: the whole timeline (full snapshot with
  the pool and plans, and every block as a dict) as one JSON document, written to a temporary file,
  flushed, ``os.fsync``-ed and ``os.replace``-d over the previous one.

After each lmdb, fixed hdr and persist() sample the turn is rolled back (outside the
timing, in one write transaction that deletes its block and path rows and its
turn-log entry and puts the previous header bytes back), so every sample
finds exactly ``N`` blocks stored. The stores are opened with ``sync=True``
(the default, what production uses: every commit is flushed to disk like the
naive ``fsync``); prefill and rollbacks use the same setting. The machine is
shared and noisy, so the samples are interleaved: each round takes one sample
of every kind at every size. The stores are then reopened with ``sync=False``
for the same number of lmdb samples, which leaves out the disk flush (the
"no fsync" rows). Prefill writes no turn-log entries (that would need one
transaction per turn). Everything built up front is moved out of the garbage
collector's view (``gc.freeze``) so that collections of it do not land in
samples.

Load: the conversation of the largest size up to 10,000 blocks is loaded
with ``Store.load`` (``boundary_seq`` 0: the whole conversation is visible,
``Timeline.restore`` of every block) and read raw with
``list(Store.iter_blocks(cid))``; the loaded blocks must equal the built ones.

Growing pool: one conversation of ``--pool-turns`` turns (2,000) persisted with
``Store.persist_round`` after every turn, each turn adding 5 sources (10,000 by
the end) and either a new plan (every 4th turn: 500 plans) or a step
acknowledgement of the current one. Every round's bytes are counted: the stored
header, the header rows it wrote (key and msgpack value) and its blocks. Then
``--samples`` more rounds of the same kind are timed on it and, interleaved, on
a second conversation built the same way to 10 turns (``sync=True``, no
rollback: each sample is a real round).

Targets: persist cost flat (lmdb p50 at the largest size within 1.5x of the
smallest), lmdb at least 50x faster than the naive rewrite (p50 against
p50) at the largest size up to 10,000 blocks, and in the growing-pool case
the persist p50 at 2,000 turns within 1.5x of the one at 10 turns with the
header and row bytes of a round not growing with the pool (within 64 bytes).

    python -m bench.storage [--sizes 100,10000,100000] [--samples 40]
        [--pool-turns 2000] [--out bench/results/storage.json]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from actline.storage import Store
from actline.storage.store import CURSOR_SUFFIX, block_key, pack, path_key
from actline.timeline import Block, SourceRow, Timeline
from actline.timeline.blocks import (
    COMPLETION,
    REACT_NOTES,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_PROMPT,
)
from actline.timeline.paths import ar_path, tc_path
from bench.common import (
    RESULTS,
    TOOLS,
    SanityCheckFailed,
    corpus,
    summary_ms,
    write_result,
)

SIZES = (100, 10_000, 100_000)
SAMPLES = 40
SEED = 11
T0 = 1_800_000_000.0
CID = "c-bench"
TURN_BLOCKS = 20
TURN_ROUNDS = 8
"""The measured turn: header, prompt, 8 x (tool call, tool result), notes, completion."""
PREFILL_CHUNK = 5_000
"""Blocks per ``append_turn`` when filling a store."""
SOURCES = 50
TEXT_MIN, TEXT_MAX = 100, 2_000
NAIVE_BUDGET_S = 20.0
"""A size's naive samples are skipped when their projected total passes this."""
FIXED_BLOCKS = 100
"""The fixed-header rows write the snapshot of a conversation of this many blocks at every size."""
LOAD_BLOCKS = 10_000
LOAD_RUNS = 5
TARGET_FLATNESS = 1.5
TARGET_RATIO = 50.0
RATIO_BLOCKS = 10_000
POOL_TURNS = 2_000
POOL_SMALL_TURNS = 10
POOL_SOURCES_PER_TURN = 5
POOL_PLAN_EVERY = 4
TARGET_POOL_FLATNESS = 1.5
TARGET_ROUND_BYTES_GROWTH = 64
"""Header + row bytes of a round may differ this much between 10 and 2,000 turns (wider ints)."""


def naive_samples(blocks: int, samples: int) -> int:
    """Naive rewrites to time at a size: all ``samples`` when cheap, 15 at 10,000, 3 at 100,000."""
    return max(3, min(samples, 150_000 // max(1, blocks)))


# -- the synthetic conversation ---------------------------------------------------------------
class Conversation:
    """A deterministic stream of blocks; the same seed always gives equal blocks."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.corpus = corpus(seed)
        self.clock = T0
        self.k = 0
        self.turns = 0
        self.calls = 0
        self.turn_id = ""

    def _tick(self) -> float:
        self.clock += round(self.rng.uniform(0.2, 20.0), 3)
        return self.clock

    def _text(self, low: int = TEXT_MIN, high: int = TEXT_MAX) -> str:
        size = self.rng.randint(low, high)
        start = self.rng.randrange(0, len(self.corpus) - size)
        return self.corpus[start : start + size]

    def _block(self, kind: str, path: str, **fields: Any) -> Block:
        self.k += 1
        return Block.new(kind, self.turn_id, self._tick(), path=path, id=f"b{self.k}", **fields)

    def _round(self, notes: bool) -> Iterator[Block]:
        tid = self.turn_id
        self.calls += 1
        cid = f"c{self.calls}"
        if notes:
            path = ar_path(tid, f"react.notes.{cid}")
            yield self._block(REACT_NOTES, path, call_id=cid, text=self._text())
        tool = self.rng.choice(TOOLS)
        call = {"tool_id": tool, "params": {"query": self._text(20, 200)}}
        yield self._block(TOOL_CALL, tc_path(tid, cid, "call"), call_id=cid, data=call)
        path = tc_path(tid, cid, "result")
        yield self._block(TOOL_RESULT, path, call_id=cid, text=self._text())

    def _turn(self, rounds: int, notes: Callable[[int], bool]) -> Iterator[Block]:
        self.turns += 1
        self.turn_id = tid = f"t{self.turns}"
        yield self._block(TURN_HEADER, ar_path(tid, "turn.header"), author="system")
        yield self._block(USER_PROMPT, ar_path(tid, "user.prompt"), text=self._text())
        for i in range(rounds):
            yield from self._round(notes(i))
        yield self._block(COMPLETION, ar_path(tid, "assistant.completion"), text=self._text())

    def blocks(self) -> Iterator[Block]:
        """Turns without end: header, prompt, 1-12 rounds (notes 30% of the time), completion."""
        while True:
            yield from self._turn(self.rng.randint(1, 12), lambda _: self.rng.random() < 0.3)

    def turn(self) -> list[Block]:
        """The measured turn: exactly ``TURN_BLOCKS`` blocks (one notes block, in round 1)."""
        out = list(self._turn(TURN_ROUNDS, lambda i: i == 0))
        assert len(out) == TURN_BLOCKS
        return out


def sources() -> list[SourceRow]:
    """The 50 rows of every conversation's sources pool."""
    return [
        SourceRow(
            0,
            url=f"https://docs.example.com/guide/{sid}",
            title=f"Release notes {sid}: cache and retry settings",
            text=f"Version {sid}.0 changes the default retry budget and the cache token limit.",
            provider="web",
        )
        for sid in range(1, SOURCES + 1)
    ]


def add(tl: Timeline, block: Block) -> None:
    """Append ``block``; a turn header also opens its turn (``begin_turn`` finds it there)."""
    tl.append(block)
    if block.type == TURN_HEADER:
        tl.begin_turn(block.turn_id, block.ts)


def build(blocks: int, seed: int = SEED) -> tuple[Timeline, Conversation]:
    """A timeline of exactly ``blocks`` blocks with a 50-row sources pool, and its stream."""
    conv = Conversation(seed)
    tl = Timeline(CID)
    tl.sources.add_rows(sources())
    stream = conv.blocks()
    for _ in range(blocks):
        add(tl, next(stream))
    return tl, conv


# -- measuring ----------------------------------------------------------------------------------
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


# -- the growing pool -----------------------------------------------------------------------
@dataclass
class PoolRound:
    """What one ``persist_round`` of the growing-pool case wrote, in bytes."""

    turns: int
    sources: int
    plans: int
    header: int
    rows: int
    row_bytes: int
    block_bytes: int

    @property
    def header_and_rows(self) -> int:
        return self.header + self.row_bytes


class GrowingPool:
    """A conversation whose pool and plans grow, persisted round by round into its own store.

    Turn ``n``: header, prompt, one tool call and result, completion; 5 new sources;
    a new plan of 3 steps when ``n % 4 == 1``, else the acknowledgement of step
    ``(n - 1) % 4`` of the current plan (a changed plan row).
    """

    def __init__(self, root: Path, seed: int = SEED) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.store = Store(root, sync=True)
        self.conv = Conversation(seed)
        self.tl = Timeline(CID)
        self.sources = 0

    def close(self) -> None:
        self.store.close()

    def turn(self) -> None:
        """Append the next turn to the timeline (not persisted)."""
        for block in self.conv._turn(1, lambda _: False):
            add(self.tl, block)
        n, tid, ts = self.conv.turns, self.conv.turn_id, self.conv.clock
        rows = []
        for _ in range(POOL_SOURCES_PER_TURN):
            self.sources += 1
            k = self.sources
            rows.append(
                SourceRow(
                    0,
                    url=f"https://docs.example.com/pool/{k:06d}",
                    title=f"Pool source {k:06d}: retry and cache settings",
                    text=f"Source {k:06d} describes the retry budget and the cache token limit.",
                    provider="web",
                )
            )
        self.tl.sources.add_rows(rows)
        if n % POOL_PLAN_EVERY == 1:
            steps = ["gather sources", "compare settings", "write the answer"]
            plan = self.tl.plans.apply("new", turn_id=tid, plan_id=f"p{n:05d}", steps=steps)
            self.tl.record_plan(plan, turn_id=tid, ts=ts)
        else:
            step = (n - 1) % POOL_PLAN_EVERY
            self.tl.acknowledge(f"\u2713 {step}. done", turn_id=tid, ts=ts, iteration=n)

    def persist(self) -> tuple[float, PoolRound]:
        """Persist the turn appended last; (seconds, bytes it wrote)."""
        _, stored = self.store.cursor(CID)
        t0 = time.perf_counter()
        done = self.store.persist_round(self.tl)
        seconds = time.perf_counter() - t0
        header = _raw(self.store, "snapshots", CID.encode()) or b""
        key = len(CID) + 1
        written = PoolRound(
            turns=self.conv.turns,
            sources=len(self.tl.sources),
            plans=len(self.tl.plans.plans()),
            header=len(header),
            rows=len(done.rows),
            row_bytes=sum(key + len(k) + len(pack(v)) for k, v in done.rows.items()),
            block_bytes=sum(len(pack(b.to_dict())) for b in done.blocks),
        )
        if done.blocks and done.blocks[0].seq != stored:
            raise SanityCheckFailed(stored, "the growing-pool round did not continue the log")
        return seconds, written

    def grow(self, turns: int) -> list[PoolRound]:
        """Append and persist turns until there are ``turns``; the bytes of each round."""
        rounds = []
        while self.conv.turns < turns:
            self.turn()
            rounds.append(self.persist()[1])
        return rounds


def _window(rounds: Sequence[PoolRound], end: int) -> list[PoolRound]:
    """The ``POOL_PLAN_EVERY`` rounds ending at turn ``end`` (one new plan, three acks)."""
    return [r for r in rounds if end - POOL_PLAN_EVERY < r.turns <= end]


def _bytes(rounds: Sequence[PoolRound]) -> dict[str, Any]:
    n = max(1, len(rounds))
    return {
        "turns": [rounds[0].turns, rounds[-1].turns] if rounds else [],
        "sources": rounds[-1].sources if rounds else 0,
        "plans": rounds[-1].plans if rounds else 0,
        "header_bytes": sum(r.header for r in rounds) / n,
        "rows": sum(r.rows for r in rounds) / n,
        "row_bytes": sum(r.row_bytes for r in rounds) / n,
        "header_and_row_bytes": sum(r.header_and_rows for r in rounds) / n,
        "block_bytes": sum(r.block_bytes for r in rounds) / n,
    }


def growing_pool(root: Path, turns: int, samples: int, seed: int = SEED) -> dict[str, Any]:
    """The growing-pool case (see the module docstring)."""
    small_turns = min(POOL_SMALL_TURNS, turns)
    big, small = GrowingPool(root / "pool-big", seed), GrowingPool(root / "pool-small", seed)
    try:
        t0 = time.perf_counter()
        rounds = big.grow(turns)
        build_seconds = time.perf_counter() - t0
        small.grow(small_turns)
        full_header = {
            "at_small": len(pack(small.tl.full_snapshot())),
            "at_big": len(pack(big.tl.full_snapshot())),
        }
        at_small, at_big = _window(rounds, small_turns), _window(rounds, turns)
        sources, plans = len(big.tl.sources), len(big.tl.plans.plans())
        loaded = big.store.load(CID).timeline
        if loaded.full_snapshot() != big.tl.full_snapshot():
            raise SanityCheckFailed(turns, "the growing-pool conversation did not load back")
        times: dict[str, list[float]] = {"small": [], "big": []}
        gc.collect()
        gc.freeze()
        try:
            for i in range(samples):
                order = (("small", small), ("big", big))
                for name, case in order if i % 2 == 0 else order[::-1]:
                    case.turn()
                    gc.collect(0)
                    times[name].append(case.persist()[0])
        finally:
            gc.unfreeze()
    finally:
        big.close()
        small.close()
    small_p50, big_p50 = _p50(times["small"]), _p50(times["big"])
    flatness = _ratio(big_p50, small_p50)
    growth = _bytes(at_big)["header_and_row_bytes"] - _bytes(at_small)["header_and_row_bytes"]
    spread = [r.header_and_rows for r in rounds[small_turns:]]
    target = {
        "figure": "persist_flatness",
        "turns": turns,
        "against_turns": small_turns,
        "maximum": TARGET_POOL_FLATNESS,
        "value": flatness,
        "met": flatness is not None and flatness <= TARGET_POOL_FLATNESS,
    }
    bytes_target = {
        "figure": "header_and_row_bytes_growth",
        "maximum": TARGET_ROUND_BYTES_GROWTH,
        "value": growth,
        "met": growth <= TARGET_ROUND_BYTES_GROWTH,
    }
    return {
        "turns": turns,
        "small_turns": small_turns,
        "sources": sources,
        "plans": plans,
        "samples": samples,
        "build_seconds": build_seconds,
        "persist_small": summary_ms(times["small"]) if samples else None,
        "persist_big": summary_ms(times["big"]) if samples else None,
        "bytes_small": _bytes(at_small),
        "bytes_big": _bytes(at_big),
        "header_and_row_bytes_range": [min(spread, default=0), max(spread, default=0)],
        "full_header_bytes": full_header,
        "targets": [target, bytes_target],
        "met": target["met"] and bytes_target["met"],
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def _p50(samples: list[float]) -> float | None:
    return summary_ms(samples)["p50_ms"] if samples else None


def _store_bytes(store: Store) -> int:
    return int(store.env.stat()["psize"]) * (int(store.env.info()["last_pgno"]) + 1)


def run(
    sizes: Sequence[int] = SIZES,
    samples: int = SAMPLES,
    *,
    nosync: bool = True,
    naive_budget: float = NAIVE_BUDGET_S,
    load_runs: int = LOAD_RUNS,
    pool_turns: int = POOL_TURNS,
) -> dict[str, Any]:
    """Measure every size (see the module docstring); targets at the largest and ~10,000.

    ``pool_turns`` > 0 also runs the growing-pool case (``growing_pool``).
    """
    started = time.perf_counter()
    sizes = sorted(set(sizes))
    samples = max(1, samples)
    load_size = max((s for s in sizes if s <= LOAD_BLOCKS), default=sizes[0])
    ratio_size = max((s for s in sizes if s <= RATIO_BLOCKS), default=sizes[0])
    cases: list[Case] = []
    load: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="actline-bench-storage-") as tmp,
        Progress(transient=True) as progress,
    ):
        try:
            task = progress.add_task("building", total=len(sizes))
            built = time.perf_counter()
            for blocks in sizes:
                progress.update(task, description=f"building and storing {blocks:,} blocks")
                root = Path(tmp) / f"n{blocks}"
                root.mkdir()
                cases.append(prepare(blocks, root))
                progress.advance(task)
            build_seconds = time.perf_counter() - built
            gc.collect()
            gc.freeze()
            naive_n = {c.blocks: naive_samples(c.blocks, samples) for c in cases}
            task = progress.add_task("persisting (sync=True)", total=samples)
            for i in range(samples):
                for case in cases:
                    sample_sync(case, i, naive_n[case.blocks], naive_budget)
                progress.advance(task)
            for case in cases:
                check_rolled_back(case, count=True)
            load_case = next(c for c in cases if c.blocks == load_size)
            load = measure_load(load_case, max(1, load_runs))
            if nosync:
                for case in cases:
                    case.close()
                    case.open(sync=False)
                task = progress.add_task("persisting (sync=False)", total=samples)
                for _ in range(samples):
                    for case in cases:
                        sample_nosync(case)
                    progress.advance(task)
                for case in cases:
                    check_rolled_back(case)
            rows = [_row(case, naive_n[case.blocks]) for case in cases]
        finally:
            for case in cases:
                case.close()
            gc.unfreeze()
        pool: dict[str, Any] | None = None
        if pool_turns > 0:
            progress.add_task(f"growing pool: {pool_turns:,} turns", total=None)
            pool = growing_pool(Path(tmp), pool_turns, samples)
    base = rows[0]
    for row in rows:
        for kind in ("lmdb", "lmdb_fixed", "persist", "nosync"):
            if row[kind] is not None:
                row[f"{kind}_flatness"] = row[kind]["p50_ms"] / base[kind]["p50_ms"]
            else:
                row[f"{kind}_flatness"] = None
    top = rows[-1]
    at_ratio = next(r for r in rows if r["blocks"] == ratio_size)
    targets: list[dict[str, Any]] = [
        {
            "blocks": top["blocks"],
            "against_blocks": base["blocks"],
            "figure": "lmdb_flatness",
            "maximum": TARGET_FLATNESS,
            "value": top["lmdb_flatness"],
        },
        {
            "blocks": at_ratio["blocks"],
            "figure": "ratio_naive_to_lmdb",
            "minimum": TARGET_RATIO,
            "value": at_ratio["ratio_naive_to_lmdb"],
        },
    ]
    for target in targets:
        value = target["value"]
        if value is None:
            target["met"] = False
        elif "minimum" in target:
            target["met"] = value >= target["minimum"]
        else:
            target["met"] = value <= target["maximum"]
    return {
        "benchmark": "storage.persist_turn",
        "seed": SEED,
        "turn_blocks": TURN_BLOCKS,
        "samples": samples,
        "sync": True,
        "prefill_chunk": PREFILL_CHUNK,
        "sizes": rows,
        "load": load,
        "targets": targets,
        "targets_met": all(t["met"] for t in targets),
        "growing_pool": pool,
        "build_seconds": build_seconds,
        "seconds": time.perf_counter() - started,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "lmdb": lmdb.version(),
    }


def _row(case: Case, naive_n: int) -> dict[str, Any]:
    lmdb_p50 = _p50(case.lmdb)
    naive_p50 = None if case.naive_skipped else _p50(case.naive)
    return {
        "blocks": case.blocks,
        "turns": len(case.tl.turn_ids()) - 1,
        "header_bytes": len(pack(case.snapshot)),
        "fixed_header_bytes": len(pack(case.fixed)),
        "turn_bytes": sum(len(pack(b.to_dict())) for b in case.turn),
        "store_bytes": _store_bytes(case.opened),
        "naive_bytes": case.naive_bytes,
        "prefill_seconds": case.prefill_seconds,
        "lmdb": summary_ms(case.lmdb),
        "lmdb_fixed": summary_ms(case.lmdb_fixed),
        "persist": summary_ms(case.persist),
        "naive": None if case.naive_skipped or not case.naive else summary_ms(case.naive),
        "naive_planned": naive_n,
        "naive_skipped": case.naive_skipped,
        "nosync": summary_ms(case.nosync) if case.nosync else None,
        "ratio_naive_to_lmdb": _ratio(naive_p50, lmdb_p50),
        "ratio_naive_to_lmdb_fixed": _ratio(naive_p50, _p50(case.lmdb_fixed)),
        "ratio_naive_to_persist": _ratio(naive_p50, _p50(case.persist)),
    }


# -- report -----------------------------------------------------------------------------------
def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def _x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _met(target: dict[str, Any]) -> str:
    return "[green]met[/]" if target["met"] else "[red]missed[/]"


def table(result: dict[str, Any]) -> Table:
    rows = result["sizes"]
    flat, ratio = result["targets"]
    out = Table(
        title=(
            f"storage: persist one turn of {result['turn_blocks']} blocks, ms per call, "
            f"{result['samples']} samples per size, sync=True"
        ),
        caption=(
            "lmdb: Store.append_turn (the new blocks + header, one transaction); persist(): "
            "Store.persist(tl), the production call (same rows, plus finding the new blocks "
            "in the timeline); fixed hdr: append_turn with a header that does not grow with the "
            "conversation; naive: whole timeline as one JSON file + fsync + os.replace; "
            f"flat: p50 against the {rows[0]['blocks']:,}-block case; no fsync: "
            "Store(sync=False), lmdb only; targets on the lmdb rows"
        ),
    )
    columns = ("stored blocks", "lmdb p50", "lmdb p90", "naive p50", "naive/lmdb", "flat")
    for column in (*columns, "header", "verdict"):
        left = column in ("stored blocks", "verdict")
        out.add_column(column, justify="left" if left else "right")
    for row in rows:
        naive = row["naive"]
        out.add_row(
            f"{row['blocks']:,}",
            _ms(row["lmdb"]["p50_ms"]),
            _ms(row["lmdb"]["p90_ms"]),
            _ms(naive["p50_ms"]) if naive else "skipped" if row["naive_skipped"] else "-",
            _x(row["ratio_naive_to_lmdb"], 0),
            _x(row["lmdb_flatness"]),
            f"{row['header_bytes'] / 1024:.1f} KB",
            "",
        )
    out.add_section()
    for row in rows:
        out.add_row(
            f"{row['blocks']:,} fixed hdr",
            _ms(row["lmdb_fixed"]["p50_ms"]),
            _ms(row["lmdb_fixed"]["p90_ms"]),
            "",
            _x(row["ratio_naive_to_lmdb_fixed"], 0),
            _x(row["lmdb_fixed_flatness"]),
            f"{row['fixed_header_bytes'] / 1024:.1f} KB",
        )
    out.add_section()
    for row in rows:
        out.add_row(
            f"{row['blocks']:,} persist()",
            _ms(row["persist"]["p50_ms"]),
            _ms(row["persist"]["p90_ms"]),
            "",
            _x(row["ratio_naive_to_persist"], 0),
            _x(row["persist_flatness"]),
        )
    if all(row["nosync"] is not None for row in rows):
        out.add_section()
        for row in rows:
            out.add_row(
                f"{row['blocks']:,} no fsync",
                _ms(row["nosync"]["p50_ms"]),
                _ms(row["nosync"]["p90_ms"]),
                "",
                "",
                _x(row["nosync_flatness"]),
            )
    out.add_section()
    out.add_row(
        "verdict",
        "",
        "",
        "",
        f"{ratio['blocks']:,}: ≥{ratio['minimum']:.0f}x",
        f"{flat['blocks']:,}: ≤{flat['maximum']:.1f}x",
        "",
        f"flat {_met(flat)}, naive/lmdb {_met(ratio)}",
    )
    return out


def pool_table(pool: dict[str, Any]) -> Table:
    """The growing-pool case: persist p50 and bytes per round at 10 and at 2,000 turns."""
    flat, grown = pool["targets"]
    out = Table(
        title=(
            f"storage: growing pool, Store.persist_round after every turn, "
            f"{pool['sources']:,} sources and {pool['plans']:,} plans after "
            f"{pool['turns']:,} turns, {pool['samples']} samples each, sync=True"
        ),
        caption=(
            "hdr+rows: bytes of the stored header plus the header rows the round wrote (key + "
            "msgpack), mean over 4 rounds (one new plan, three acks); blocks: msgpack of the "
            "round's blocks; old hdr: the header as every round wrote it before (pool and plans "
            "inline)"
        ),
    )
    columns = ("turns", "pool", "p50 ms", "p90 ms", "flat", "rows", "hdr+rows", "blocks", "old hdr")
    # old hdr: what one round wrote as the header before the pool and plans became rows
    for column in columns:
        out.add_column(column, justify="left" if column == "turns" else "right")
    for key, turns, old in (
        ("small", pool["small_turns"], pool["full_header_bytes"]["at_small"]),
        ("big", pool["turns"], pool["full_header_bytes"]["at_big"]),
    ):
        timing, written = pool[f"persist_{key}"], pool[f"bytes_{key}"]
        out.add_row(
            f"{turns:,}",
            f"{written['sources']:,}",
            _ms(timing["p50_ms"] if timing else None),
            _ms(timing["p90_ms"] if timing else None),
            _x(flat["value"]) if key == "big" else "1.00x",
            f"{written['rows']:.2f}",
            f"{written['header_and_row_bytes']:,.0f} B",
            f"{written['block_bytes'] / 1024:.1f} KB",
            f"{old / 1024:,.1f} KB",
        )
    out.add_section()
    low, high = pool["header_and_row_bytes_range"]
    out.add_row(
        "verdict",
        "",
        "",
        "",
        f"≤{flat['maximum']:.1f}x {_met(flat)}",
        "",
        f"+{grown['value']:.0f} B (≤{grown['maximum']}) {_met(grown)}",
        "",
        f"every round {low:,}-{high:,} B",
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.storage", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x.strip()],
        default=list(SIZES),
        help="stored blocks before the measured turn, comma-separated",
    )
    parser.add_argument("--samples", type=int, default=SAMPLES, help="lmdb samples per size")
    parser.add_argument(
        "--naive-budget", type=float, default=NAIVE_BUDGET_S, help="seconds of naive rewrites"
    )
    parser.add_argument("--load-runs", type=int, default=LOAD_RUNS)
    parser.add_argument("--no-nosync", action="store_true", help="skip the sync=False samples")
    parser.add_argument(
        "--pool-turns",
        type=int,
        default=POOL_TURNS,
        help="turns of the growing-pool case (0 skips it)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "storage.json")
    args = parser.parse_args(argv)
    console = Console()
    try:
        result = run(
            args.sizes,
            args.samples,
            nosync=not args.no_nosync,
            naive_budget=args.naive_budget,
            load_runs=args.load_runs,
            pool_turns=args.pool_turns,
        )
    except SanityCheckFailed as exc:
        console.print(f"[red]sanity check failed:[/] {exc}")
        return 1
    console.print(table(result))
    pool = result["growing_pool"]
    if pool is not None:
        console.print(pool_table(pool))
    load = result["load"]
    console.print(
        f"load {load['blocks']:,} blocks (boundary_seq 0): Store.load p50 "
        f"{_ms(load['load']['p50_ms'])} ms (p90 {_ms(load['load']['p90_ms'])}), "
        f"list(iter_blocks) p50 {_ms(load['iter_blocks']['p50_ms'])} ms; "
        f"{load['runs']} runs; the loaded blocks equal the stored ones"
    )
    for row in result["sizes"]:
        naive = (
            f"naive {row['naive']['n']} x {row['naive_bytes'] / 1e6:.1f} MB"
            if row["naive"]
            else f"naive skipped: {row['naive_skipped']}"
        )
        console.print(
            f"{row['blocks']:,} blocks ({row['turns']:,} turns): store "
            f"{row['store_bytes'] / 1e6:.1f} MB filled in {row['prefill_seconds']:.1f} s; "
            f"turn {row['turn_bytes'] / 1024:.1f} KB; {naive}"
        )
    console.print(
        f"every sample rolled back; {result['seconds']:.1f} s in all "
        f"({result['build_seconds']:.1f} s building and filling)"
    )
    write_result(console, args.out, result)
    met = result["targets_met"] and (pool is None or pool["met"])
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
