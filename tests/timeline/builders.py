"""Small helpers that build timelines for the timeline tests.

``Build`` appends blocks with the logical paths the runtime uses and a
deterministic clock (one second per block from ``T0``), so tests never read
the real time. Every method returns the block(s) it appended; the turn defaults
to the timeline's current turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from actline.timeline import Block, Renderer, RenderResult, Timeline
from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    SUMMARY,
    TOOL_CALL,
    TOOL_RESULT,
    USER_FOLLOWUP,
    USER_PROMPT,
)
from actline.timeline.paths import ar_path, fi_path, sk_path, tc_path

T0 = 1_800_000_000.0
"""Epoch seconds the default clock starts at (2027-01-15, far from DST edges)."""


def words(n: int, word: str = "lorem") -> str:
    """``n`` space-separated words: about ``1.5 * n`` estimated tokens for 5-letter words."""
    return " ".join([word] * n)


class Build:
    """Appends blocks to ``tl`` with paths and times as the runtime would."""

    def __init__(self, tl: Timeline | None = None, *, t0: float = T0) -> None:
        self.tl = tl if tl is not None else Timeline("conv")
        self.clock = t0
        self._notes = 0

    def at(self) -> float:
        """The next timestamp (the clock moves one second per block)."""
        self.clock += 1.0
        return self.clock

    def _turn(self, turn: str | None) -> str:
        chosen = turn or self.tl.current_turn_id
        assert chosen is not None, "open a turn first"
        return chosen

    def add(self, block_type: str, *, turn: str | None = None, **fields: Any) -> Block:
        """Append any block type at the next tick."""
        return self.tl.append(Block.new(block_type, self._turn(turn), self.at(), **fields))

    # -- turns and messages ---------------------------------------------------------------

    def turn(self, turn_id: str, prompt: str = "question") -> Block:
        """Open ``turn_id`` (header) and append its user prompt; returns the prompt."""
        self.tl.begin_turn(turn_id, self.at())
        return self.add(
            USER_PROMPT, turn=turn_id, path=ar_path(turn_id, "user.prompt"), text=prompt
        )

    def completion(self, text: str = "answer", *, turn: str | None = None) -> Block:
        turn_id = self._turn(turn)
        path = ar_path(turn_id, "assistant.completion")
        return self.add(COMPLETION, turn=turn_id, path=path, text=text)

    def followup(self, text: str, message_id: str, *, turn: str | None = None) -> Block:
        turn_id = self._turn(turn)
        path = ar_path(turn_id, f"external.followup.{message_id}")
        meta = {"message_id": message_id}
        return self.add(USER_FOLLOWUP, turn=turn_id, path=path, text=text, meta=meta)

    def note(self, text: str, *, turn: str | None = None) -> Block:
        """An internal note (``react.note``) at ``ar:<turn>.react.note.<n>``."""
        turn_id = self._turn(turn)
        self._notes += 1
        path = ar_path(turn_id, f"react.note.{self._notes}")
        return self.add(NOTE, turn=turn_id, path=path, text=text)

    # -- tool rounds ------------------------------------------------------------------------

    def call(self, call_id: str, args: str = '{"q": "x"}', *, turn: str | None = None) -> Block:
        turn_id = self._turn(turn)
        path = tc_path(turn_id, call_id, "call")
        return self.add(TOOL_CALL, turn=turn_id, path=path, call_id=call_id, text=args)

    def result(
        self, call_id: str, text: str = "ok", *, turn: str | None = None, **fields: Any
    ) -> Block:
        turn_id = self._turn(turn)
        path = tc_path(turn_id, call_id, "result")
        return self.add(TOOL_RESULT, turn=turn_id, path=path, call_id=call_id, text=text, **fields)

    def tool(
        self, call_id: str, result: str = "ok", *, turn: str | None = None, **fields: Any
    ) -> tuple[Block, Block]:
        """A call and its result, back to back."""
        return self.call(call_id, turn=turn), self.result(call_id, result, turn=turn, **fields)

    # -- files, skills and plans ----------------------------------------------------------------

    def image(
        self, name: str, chars: int = 400, *, mime: str = "image/png", turn: str | None = None
    ) -> Block:
        """A user attachment with ``chars`` base64 characters."""
        turn_id = self._turn(turn)
        path = fi_path(turn_id, "user.attachments", name)
        return self.add("user.attachment", turn=turn_id, path=path, mime=mime, base64="A" * chars)

    def skill(self, rel: str, text: str, *, turn: str | None = None) -> Block:
        """A skill file read into the timeline (``sk:<rel>``)."""
        return self.add("react.read.skill", turn=turn, path=sk_path(rel), text=text)

    def plan(self, steps: Sequence[str], *, plan_id: str = "p1", turn: str | None = None) -> Block:
        """A new plan (made current) and its snapshot block."""
        turn_id = self._turn(turn)
        plan = self.tl.plans.apply("new", turn_id=turn_id, plan_id=plan_id, steps=steps)
        return self.tl.record_plan(plan, turn_id=turn_id, ts=self.at())

    def rounds(self, n: int, *, size: int = 50, prefix: str = "c", turn: str | None = None) -> None:
        """``n`` call/result rounds with results of ``size`` words each."""
        for i in range(n):
            self.tool(f"{prefix}{i}", words(size), turn=turn)


# -- reading timelines and renders ------------------------------------------------------------


def texts(result: RenderResult) -> list[str]:
    """The text of every stable part (captions for images and documents)."""
    return [p.get("text") or p.get("caption", "") for p in result.stable]


def shown(renderer: Renderer) -> dict[str, Block]:
    """The visible blocks by path (first visible block per path)."""
    out: dict[str, Block] = {}
    for block in renderer.visible_blocks():
        out.setdefault(block.path, block)
    return out


def summary_index(tl: Timeline) -> int:
    """The position of the latest summary (asserts there is one)."""
    summary = tl.latest_summary
    assert summary is not None, "no compaction happened"
    return tl.index_of(summary)


def sides_of_calls(tl: Timeline) -> dict[str, set[bool]]:
    """For each call id: the sides of the latest summary its blocks are on (True = after)."""
    cut = summary_index(tl)
    sides: dict[str, set[bool]] = {}
    for i, block in enumerate(tl.blocks):
        if block.call_id:
            sides.setdefault(block.call_id, set()).add(i > cut)
    return sides


def layout(blocks: Iterable[Block]) -> list[tuple[str, str]]:
    """(type, path) of each block: what a restore must reproduce."""
    return [(b.type, b.path) for b in blocks]


def summaries(tl: Timeline) -> list[Block]:
    return [b for b in tl.blocks if b.type == SUMMARY]
