"""The growing-pool case: ``Store.persist_round`` after every turn while the sources pool and
the plans grow, timed at 10 turns and at ``--pool-turns``, with the bytes of every round."""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actline.storage import Store
from actline.storage.layout import pack
from actline.timeline import SourceRow, Timeline
from bench.harness import SanityCheckFailed, summary_ms
from bench.storage.conversation import CID, SEED, Conversation, add
from bench.storage.persist import _p50, _ratio, _raw

POOL_TURNS = 2_000
POOL_SMALL_TURNS = 10
POOL_SOURCES_PER_TURN = 5
POOL_PLAN_EVERY = 4
TARGET_POOL_FLATNESS = 1.5
TARGET_ROUND_BYTES_GROWTH = 64
"""Header + row bytes of a round may differ this much between 10 and 2,000 turns (wider ints)."""


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
