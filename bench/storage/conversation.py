"""The storage benchmark's synthetic conversation: deterministic blocks (ids ``b<k>``, turns
``t<n>``) with a 50-row sources pool, and the measured turn of exactly 20 blocks."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

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
from bench.harness import TOOLS, corpus

SEED = 11
T0 = 1_800_000_000.0
CID = "c-bench"
TURN_BLOCKS = 20
TURN_ROUNDS = 8
"""The measured turn: header, prompt, 8 x (tool call, tool result), notes, completion."""
SOURCES = 50
TEXT_MIN, TEXT_MAX = 100, 2_000


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
