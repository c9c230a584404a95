"""A whole turn through a real Node on NATS whose model speaks Chat Completions.

The node's model is ``OpenAIChatModel`` with the real ``openai`` client, pointed at the
local Chat Completions server, whose policy is the offline ``ExtractiveModel``: each
round of the turn is one HTTP request, and the turn's usage says which token counts
the server did not report.
"""

from __future__ import annotations

from pathlib import Path

from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.llm import ExtractiveModel, LLMSettings, OpenAIChatModel
from actline.llm.fake_openai import FakeOpenAIServer
from actline.tools import KnowledgeSpace
from tests.actors.harness import KB, run_turn, settings

MODEL = "local-extractive"
CACHE_FIELDS = {"cache_read_tokens", "cache_write_1h_tokens", "cache_write_5m_tokens"}


async def test_a_turn_on_the_chat_completions_api_answers_and_names_the_unknown_usage(
    bus: Bus, tmp_path: Path
) -> None:
    async with FakeOpenAIServer(ExtractiveModel()) as srv:
        llm = LLMSettings(model=MODEL, api="openai", base_url=srv.base_url, max_retries=0)
        model = OpenAIChatModel(llm)
        home = tmp_path / "home"
        node = Node(bus, settings(home, model=MODEL), model=model, knowledge=KnowledgeSpace(KB))
        await node.start()
        client = Client(bus)
        try:
            handle = await run_turn(client, "How do the pricing tiers differ?", "c-openai")
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
    assert usage.input_tokens >= sum(r.usage.input_tokens for r in srv.requests if r.usage) > 0
    assert usage.output_tokens > 0
