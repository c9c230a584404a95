"""Golden views of a small multi-turn timeline: marks before and after a hide, a TTL prune
and a compaction. Regenerate with ``ACTLINE_UPDATE_GOLDEN=1 make test`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actline.timeline import AnnounceContext, Block, Renderer, SourceRow, Timeline, TimelineConfig
from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    REACT_NOTES,
    TOOL_CALL,
    TOOL_RESULT,
    USER_PROMPT,
)
from actline.timeline.paths import ar_path, tc_path

GOLDEN = Path(__file__).parent / "golden"
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
CTX = AnnounceContext(iteration=2, max_iterations=15, budget_tokens=40_000, timezone="UTC")


def check(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("ACTLINE_UPDATE_GOLDEN"):
        path.write_text(text + "\n", encoding="utf-8")
    assert text + "\n" == path.read_text(encoding="utf-8"), f"golden {path.name} differs"


class Script:
    """A conversation written step by step with a fixed clock."""

    def __init__(self) -> None:
        self.tl = Timeline("c-golden")
        self.now = T0

    def at(self, step: float = 1.0) -> float:
        self.now += step
        return self.now

    def turn(self, turn: str, prompt: str) -> None:
        self.tl.begin_turn(turn, self.at())
        path = ar_path(turn, "user.prompt")
        self.tl.append(Block.new(USER_PROMPT, turn, self.at(), path=path, text=prompt))

    def round(self, turn: str, call: str, tool: str, result: str, notes: str = "") -> None:
        if notes:
            path = ar_path(turn, f"react.notes.{call}")
            self.tl.append(Block.new(REACT_NOTES, turn, self.at(), path=path, text=notes))
        params = {"tool_id": tool, "params": {"paths": [f"ks:docs/{call}.md"]}}
        path = tc_path(turn, call, "call")
        self.tl.append(Block.new(TOOL_CALL, turn, self.at(), path=path, call_id=call, data=params))
        path = tc_path(turn, call, "result")
        self.tl.append(
            Block.new(TOOL_RESULT, turn, self.at(), path=path, call_id=call, text=result)
        )

    def answer(self, turn: str, text: str) -> None:
        path = ar_path(turn, "assistant.completion")
        self.tl.append(Block.new(COMPLETION, turn, self.at(), path=path, text=text))


def conversation() -> Script:
    s = Script()
    s.turn("t1", "How do I rotate the Lumen API keys?")
    plan = s.tl.plans.apply("new", turn_id="t1", plan_id="plan_1", steps=["search", "answer"])
    s.tl.record_plan(plan, turn_id="t1", ts=s.at())
    s.round(
        "t1", "a", "react.search", "Keys rotate under Settings > Keys [[S:1]].", "looking up keys"
    )
    s.tl.acknowledge("✓ 1. searched", turn_id="t1", ts=s.at(), iteration=1)
    note = "[D] answer from the admin guide; [K] ks:docs/keys.md"
    s.tl.append(Block.new(NOTE, "t1", s.at(), path=ar_path("t1", "react.note.n1"), text=note))
    s.answer("t1", "Open Settings > Keys and press Rotate [[S:1]].")
    s.tl.sources.add([SourceRow(sid=1, url="https://docs.lumen.example/keys", title="Keys")])
    s.turn("t2", "And the webhooks?")
    for i in range(1, 7):
        s.round("t2", f"w{i}", "react.read", f"webhook doc part {i} " + "lorem ipsum " * 40)
    return s


def test_initial_render_marks_cp1_cp2_cp3() -> None:
    s = conversation()
    result = Renderer(s.tl).render(now=s.at(), announce=CTX)
    assert len(result.marks) == 3
    check("render_initial", result.text())


def test_render_after_a_hide_moves_cp1_to_cp2() -> None:
    s = conversation()
    renderer = Renderer(s.tl)
    renderer.render(now=s.at(), announce=CTX)
    assert renderer.hide("tc:t2.w6.result", "duplicate of part 5").status == "ok"
    result = renderer.render(now=s.at(), announce=CTX)
    assert len(result.marks) == 2
    check("render_after_hide", result.text())


def test_render_after_a_ttl_prune() -> None:
    s = conversation()
    cfg = TimelineConfig(keep_recent_turns=1, keep_recent_intact_turns=1)
    renderer = Renderer(s.tl, cfg)
    renderer.render(now=s.at(), announce=CTX)
    s.turn("t3", "One more question, much later.")
    result = renderer.render(now=s.at(400), announce=CTX)
    assert result.events.ttl.status == "pruned"
    check("render_after_ttl_prune", result.text())


def test_render_after_a_compaction() -> None:
    s = conversation()
    renderer = Renderer(s.tl, TimelineConfig(max_tokens=100_000))
    result = renderer.render(now=s.at(), announce=CTX, force_compaction=True)
    assert result.events.compaction is not None
    check("render_after_compaction", result.text())


@pytest.mark.parametrize("name", ["render_initial", "render_after_hide"])
def test_golden_files_exist_and_are_reviewed_text(name: str) -> None:
    text = (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")
    assert "◆◆◆ cache mark" in text
    assert "--- uncached tail: announce ---" in text
