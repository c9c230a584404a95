"""The offline model through the whole runtime: plans, searches, reads, notes, answers."""

from __future__ import annotations

from pathlib import Path

from actline.actors.client.client import Client
from actline.bus import Bus
from actline.llm import ExtractiveModel
from actline.timeline.blocks import NOTE, PLAN
from tests.actors.harness import run_turn, start_node


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


async def test_a_short_question_that_points_back_is_read_with_the_one_before(
    bus: Bus, tmp_path: Path
) -> None:
    node = await start_node(bus, tmp_path / "home", ExtractiveModel())
    client = Client(bus)
    try:
        await run_turn(client, "What does the Enterprise tier include?", "c1")
        second = await run_turn(client, "How much does it cost?", "c1")
        again = await run_turn(client, "How much does it cost?", "c1")  # still Enterprise
        third = await run_turn(client, "How much does it cost?", "c2")  # nothing before it
    finally:
        await client.close()
        await node.stop()
    thought, answer = second.text("thinking"), second.result.result().answer
    assert "Searching the knowledge space for:" in thought
    assert "enterprise" in thought.split("Searching the knowledge space for:")[1].lower()
    assert "$60,000" in answer.split("\n")[0]  # Enterprise's price, first
    assert "$60,000" in again.result.result().answer.split("\n")[0]
    alone = third.result.result().answer
    assert "$60,000" not in alone.split("\n")[0]  # no earlier question: read as it is
