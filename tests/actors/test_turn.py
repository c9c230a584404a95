"""A turn end to end over a real nats-server: tool rounds, stream, cards, timeline."""

from __future__ import annotations

from pathlib import Path

from actors.client import Client
from bus import Bus

from .harness import Scripted, run_turn, say, start_node

DOC = "ks:pricing/tiers.md"


async def test_a_turn_with_two_tool_rounds_answers_with_citations(bus: Bus, tmp_path: Path) -> None:
    model = Scripted(
        {
            "c1": [
                say(
                    "Searching the docs.",
                    calls=[("react.search_knowledge", {"query": "pricing plans"})],
                ),
                say("Reading the plans page.", calls=[("react.read", {"paths": [DOC]})]),
                say(
                    "Answering.",
                    answer="The Team plan is the middle tier [[S:1]].",
                    followups=["What does Enterprise add?"],
                ),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        handle = await run_turn(client, "What plans are there?", "c1")
    finally:
        await client.close()
        await node.stop()
    result = handle.result.result()
    assert result.status == "completed", result.error
    assert result.rounds == 3
    assert "[[S:1]]" not in result.answer and result.sources_used == [1]
    assert result.followups == ["What does Enterprise add?"]
    assert handle.text("thinking") == "Searching the docs.Reading the plans page.Answering."
    assert "Team plan" in handle.text("answer")
    phases = [c.phase for c in handle.cards]
    print(phases)
    assert phases[0] == "thinking" and phases[-1] == "complete"
    assert phases.count("tool_call") == 2 and phases.count("tool_result") == 2
