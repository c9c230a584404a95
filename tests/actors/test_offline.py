"""The offline model through the whole runtime: plans, searches, reads, notes, answers."""

from __future__ import annotations

from pathlib import Path

from actors.client import Client
from bus import Bus
from llm import ExtractiveModel
from timeline.blocks import NOTE, PLAN

from .harness import run_turn, start_node


async def test_two_turns_on_one_topic_both_answer_with_citations(bus: Bus, tmp_path: Path) -> None:
    node = await start_node(bus, tmp_path / "home", ExtractiveModel())
    client = Client(bus)
    try:
        first = await run_turn(client, "How do the pricing tiers differ?", "c1")
        second = await run_turn(client, "Which pricing tier suits a small team?", "c1")
        tl = node.conversations["c1"].tl
    finally:
        await client.close()
        await node.stop()
    for handle in (first, second):
        result = handle.result.result()
        assert result.status == "completed", result.error
        assert result.sources_used, result.answer
        assert "could not find" not in result.answer.lower()
        assert handle.text("answer").strip()
    types = {b.type for b in tl.blocks}
    assert PLAN in types and NOTE in types
