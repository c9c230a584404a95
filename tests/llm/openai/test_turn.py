"""A whole turn through a real Node on NATS whose model speaks Chat Completions.

The node's model is ``OpenAIChatModel`` with the real ``openai`` client, pointed at the
local Chat Completions server, whose policy is the offline ``ExtractiveModel``: each
round of the turn is one HTTP request, and the turn's usage says which token counts
the server did not report. A new conversation's title is one more request beside the turn
(the gate step): its tokens are recorded on the gate block, not in the turn's usage.
"""

from __future__ import annotations

import json
from pathlib import Path

from actline.actors.client.client import Client
from actline.actors.conversation.title import TITLE_SYSTEM
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.llm import ExtractiveModel, LLMSettings, OpenAIChatModel
from actline.llm.fake_openai import FakeOpenAIServer
from actline.timeline.blocks import STAGE_GATE
from actline.tools import KnowledgeSpace
from tests.actors.harness import KB, run_turn, settings
from tests.waiting import until

MODEL = "local-extractive"
CACHE_FIELDS = {"cache_read_tokens", "cache_write_1h_tokens", "cache_write_5m_tokens"}


async def test_a_turn_on_the_chat_completions_api_answers_and_names_the_unknown_usage(
    bus: Bus, tmp_path: Path
) -> None:
    async with FakeOpenAIServer(ExtractiveModel()) as srv:
        llm = LLMSettings(model=MODEL, api="openai", base_url=srv.base_url, max_retries=0)
        model = OpenAIChatModel(llm)
        home = tmp_path / "home"
        titled = settings(home, model=MODEL, model_titles=True)
        node = Node(bus, titled, model=model, knowledge=KnowledgeSpace(KB))
        await node.start()
        client = Client(bus)
        try:
            handle = await run_turn(client, "How do the pricing tiers differ?", "c-openai")
            tl = node.conversations["c-openai"].tl

            def gate_usage() -> dict[str, object] | None:
                gates = [b.data for b in tl.blocks if b.type == STAGE_GATE]
                return next((g["usage"] for g in gates if "usage" in g), None)

            await until(lambda: gate_usage() is not None, 30)
        finally:
            await client.close()
            await node.stop()
            await model.aclose()
    result = handle.result.result()
    assert result.status == "completed", result.error
    assert result.answer.strip() and result.sources_used, result.answer
    assert handle.text("answer").strip()
    assert len(srv.requests) >= 2 and {r.status for r in srv.requests} == {200}
    assert {r.body["model"] for r in srv.requests} == {MODEL}
    assert all(r.body["stream_options"] == {"include_usage": True} for r in srv.requests)
    usage = result.usage
    assert usage is not None
    assert CACHE_FIELDS <= set(usage.unknown)
    titles = [r for r in srv.requests if TITLE_SYSTEM in json.dumps(r.body)]
    rounds = [r for r in srv.requests if r not in titles]
    assert len(titles) == 1 and titles[0].usage is not None
    assert usage.input_tokens >= sum(r.usage.input_tokens for r in rounds if r.usage) > 0
    assert usage.output_tokens > 0
    recorded = gate_usage()
    assert isinstance(recorded, dict)
    assert recorded["input_tokens"] == titles[0].usage.input_tokens > 0
