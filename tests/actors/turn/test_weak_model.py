"""Turns on a model that breaks the decision protocol, served over HTTP by the local
Messages API and Chat Completions servers to a real Node on NATS (the official clients,
each API): replies without channel tags, bad JSON, an answer left in the thinking
channel, empty replies, a reply that loops, one cut at the output limit and a stream the
server drops mid-way. Each broken reply is a notice the model sees on its next round;
after three repair rounds the turn ends ``protocol_failed`` with what the model did
say, and the node goes on serving."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from actline.actors.client.client import Client, TurnHandle
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.llm import AnthropicModel, LLMSettings, OpenAIChatModel, ReplayModel
from actline.llm.config import ModelSpec, register_models
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.fake_openai import FakeOpenAIServer
from actline.messages import ReActProgress
from actline.tools import KnowledgeSpace
from tests.actors.harness import KB, run_turn, say, settings

Api = Literal["messages", "openai"]
MODEL = "weak-local"
ANSWER = say("done", answer="The Pro tier costs $20 a month.")
APIS: tuple[Api, ...] = ("messages", "openai")


@pytest.fixture(autouse=True)
def weak_model() -> Iterator[None]:
    register_models([ModelSpec(MODEL, 8192, 0, 0.0, 0.0, 256, cache="automatic")])
    yield
    register_models(())


@dataclass
class Served:
    node: Node
    client: Client
    server: FakeAnthropicServer | FakeOpenAIServer


@asynccontextmanager
async def serve(
    bus: Bus, home: Path, api: Api, outputs: list[str], **replay: Any
) -> AsyncIterator[Served]:
    policy = ReplayModel.of(outputs, **replay)
    server = FakeAnthropicServer(policy) if api == "messages" else FakeOpenAIServer(policy)
    async with server:
        llm = LLMSettings(model=MODEL, api=api, base_url=server.base_url, max_retries=0)
        model = AnthropicModel(llm) if api == "messages" else OpenAIChatModel(llm)
        node = Node(bus, settings(home, model=MODEL), model=model, knowledge=KnowledgeSpace(KB))
        await node.start()
        client = Client(bus)
        try:
            yield Served(node, client, server)
        finally:
            await client.close()
            await node.stop()
            await model.aclose()


def notices(handle: TurnHandle) -> list[str]:
    """The codes of the turn's protocol notices, in order."""
    cards = [e for e in handle.events if isinstance(e, ReActProgress) and e.phase == "notice"]
    return [
        c.detail.split(":", 1)[0].removeprefix("protocol_violation.")
        for c in cards
        if c.detail.startswith("protocol_violation.")
    ]


@pytest.mark.parametrize("api", APIS)
async def test_a_model_that_never_follows_the_protocol_ends_with_what_it_said(
    bus: Bus, tmp_path: Path, api: Api
) -> None:
    broken = [
        "Sure! I can help with pricing.",
        "<channel:decision>call the search tool please</channel:decision>",
        "<channel:thinking>The Pro tier costs $20. The Pro tier costs $20.</channel:thinking>",
        "",
    ]
    async with serve(bus, tmp_path, api, [*broken, ANSWER]) as s:
        first = await run_turn(s.client, "What does Pro cost?", "c-weak")
        second = await run_turn(s.client, "And again?", "c-weak")
    result = first.result.result()
    assert result.status == "protocol_failed"
    assert result.rounds == 4 and result.answer == "The Pro tier costs $20."
    assert result.error is not None and "4 times in a row" in result.error
    assert "last: empty_reply" in result.error
    assert notices(first) == ["missing_decision", "schema_error", "missing_decision", "empty_reply"]
    assert len(s.server.requests) == 5  # no further call for the best effort
    after = second.result.result()  # the node goes on serving the conversation
    assert after.status == "completed" and after.answer == "The Pro tier costs $20 a month."


@pytest.mark.parametrize("api", APIS)
async def test_a_reply_that_loops_is_stopped_and_the_turn_repairs(
    bus: Bus, tmp_path: Path, api: Api
) -> None:
    loop = "<channel:thinking>" + "I will look this up in the docs. " * 400
    async with serve(bus, tmp_path, api, [loop, ANSWER], chunk_chars=24, delay=0.005) as s:
        handle = await run_turn(s.client, "What does Pro cost?", "c-loop")
    result = handle.result.result()
    assert result.status == "completed" and result.rounds == 2
    assert notices(handle) == ["repetition"]
    first = s.server.requests[0]
    assert first.disconnected  # closing the stream stopped the server's reply
    assert first.usage is not None and first.usage.output_tokens < 800


@pytest.mark.parametrize("api", APIS)
async def test_a_reply_cut_at_the_output_limit_is_named_and_repaired(
    bus: Bus, tmp_path: Path, api: Api
) -> None:
    rambling = "<channel:thinking>" + " ".join(f"idea{i}" for i in range(600))
    async with serve(bus, tmp_path, api, [rambling, ANSWER]) as s:
        handle = await run_turn(s.client, "What does Pro cost?", "c-cut")
    result = handle.result.result()
    assert result.status == "completed" and result.rounds == 2
    assert notices(handle) == ["truncated"]
    assert s.server.requests[0].usage is not None
    assert s.server.requests[0].usage.output_tokens == 256


async def test_a_stream_that_ends_without_its_message_is_a_repair_round(
    bus: Bus, tmp_path: Path
) -> None:
    async with serve(bus, tmp_path, "messages", [ANSWER, ANSWER], chunk_chars=8) as s:
        assert isinstance(s.server, FakeAnthropicServer)
        s.server.fail_next("ended_early")
        handle = await run_turn(s.client, "What does Pro cost?", "c-ended")
    result = handle.result.result()
    assert result.status == "completed" and result.rounds == 2
    assert notices(handle) == ["stream_dropped"]


@pytest.mark.parametrize("api", APIS)
async def test_a_stream_dropped_mid_way_is_a_repair_round(
    bus: Bus, tmp_path: Path, api: Api
) -> None:
    async with serve(bus, tmp_path, api, [ANSWER, ANSWER], chunk_chars=8) as s:
        if isinstance(s.server, FakeAnthropicServer):
            s.server.fail_next("overloaded_midstream")
        else:
            s.server.fail_next("dropped")
        handle = await run_turn(s.client, "What does Pro cost?", "c-drop")
    result = handle.result.result()
    assert result.status == "completed" and result.rounds == 2
    assert notices(handle) == ["stream_dropped"]
    assert result.answer == "The Pro tier costs $20 a month."
