"""Shared builders for the compaction tests: histories over the ceiling, one render, the sides
of the latest summary."""

from __future__ import annotations

from actline.timeline import Renderer, Timeline, TimelineConfig
from actline.timeline.blocks import Block
from tests.timeline.builders import T0, Build, sides_of_calls, summary_index, words

NOW = T0 + 10_000.0
CFG = TimelineConfig(max_tokens=6000, cache_ttl_seconds=0, compaction_keep_turns=2)
"""Six turns of ~1,000 tokens go over the 5,400-token ceiling; TTL pruning is off."""


def history(turns: int = 6, *, rounds: int = 3, size: int = 200, notes: bool = True) -> Build:
    """``turns`` turns: prompt, a note, ``rounds`` tool rounds of ``size`` words, completion."""
    b = Build()
    for n in range(1, turns + 1):
        b.turn(f"t{n}", words(20, f"ask{n}"))
        if notes:
            b.note(f"note {n}: keep this")
        b.rounds(rounds, size=size, prefix=f"c{n}x")
        b.completion(words(20, f"ans{n}"))
    return b


def compact(tl: Timeline, cfg: TimelineConfig = CFG, *, force: bool = False) -> Renderer:
    """Render once (compacting as the pipeline decides) and return the renderer."""
    renderer = Renderer(tl, cfg)
    renderer.render(now=NOW, force_compaction=force)
    return renderer


def after_summary(tl: Timeline) -> list[Block]:
    return tl.blocks[summary_index(tl) + 1 :]


def before_summary(tl: Timeline) -> list[Block]:
    return tl.blocks[: summary_index(tl)]


def assert_rounds_whole(tl: Timeline) -> None:
    """Every call id has all its blocks on one side of the latest summary."""
    for call_id, sides in sides_of_calls(tl).items():
        assert len(sides) == 1, f"call {call_id} is split by the summary"


def long_turn() -> Build:
    """Two short turns and one very long turn: any cut must fall inside the long one."""
    b = history(2, rounds=1, size=20)
    b.turn("t3", words(20, "big"))
    b.rounds(20, size=200, prefix="r")
    return b


def carried_history() -> Build:
    """Notes and followups in the early turns, an active plan made in t1."""
    b = Build()
    b.turn("t1", words(20))
    b.plan(["Gather sources", "Write report"], plan_id="p1")
    b.note("remember: the user wants CSV")
    b.rounds(3, size=200, prefix="a")
    b.followup("please include 2023 too", "m1")
    b.rounds(1, size=200, prefix="b")
    b.completion(words(20))
    for n in range(2, 7):
        b.turn(f"t{n}", words(20))
        b.note(f"note {n}")
        b.rounds(3, size=200, prefix=f"c{n}x")
        b.completion(words(20))
    return b
