"""Back-pressure of a pool member on a real nats-server: at most ``concurrency`` calls run,
at most ``max_waiting`` wait, the rest are answered ``busy`` at once; a node sends a busy
call again, to a member the queue group picks anew, and fails it with ``model_busy`` when
every try found a full member.

Slow calls block on events the test releases; nothing waits on the clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from actline.actors.client.client import Client
from actline.actors.configuration.models import NodeModels
from actline.actors.node.node import Node
from actline.actors.pools.admission import BUSY
from actline.actors.pools.streamer import StreamerActor
from actline.actors.pools.tool_executor import ToolContext, ToolExecutorActor, ToolOutput
from actline.actors.turn import remote
from actline.bus import Bus
from actline.llm import ExtractiveModel
from actline.llm.protocol import Chunk
from actline.messages import ErrorReply, GenerateRequest, GenerateResult, ToolCall, ToolResult
from actline.tools import KnowledgeSpace
from actline.tools.registry import ToolRegistry
from tests.actors.harness import KB, say, settings
from tests.waiting import until


class Gated:
    """A model whose every call waits for ``release``."""

    name = "gated"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = 0

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        self.started += 1
        await self.release.wait()
        yield say("done", answer="Released.")


def generate(turn: str) -> GenerateRequest:
    return GenerateRequest(conversation_id="c1", turn_id=turn)


async def test_a_full_streamer_answers_busy_at_once_and_serves_what_it_took(bus: Bus) -> None:
    model = Gated()
    streamer = StreamerActor(bus, NodeModels(model), concurrency=1, max_waiting=1)
    await streamer.start()
    admission = streamer.admission
    assert admission is not None
    subject = bus.subjects.llm_generate
    try:
        first = asyncio.create_task(bus.request(subject, generate("t1"), timeout=30))
        await until(lambda: admission.running == 1)
        second = asyncio.create_task(bus.request(subject, generate("t2"), timeout=30))
        await until(lambda: admission.queued == 1)
        refused = await bus.request(subject, generate("t3"), timeout=30, raise_remote=False)
        assert isinstance(refused, ErrorReply) and refused.code == BUSY
        assert "1 calls running, 1 waiting" in refused.message
        assert model.started == 1  # the waiting call has not started
        model.release.set()
        for task in (first, second):
            reply = await task
            assert isinstance(reply, GenerateResult) and reply.error_code == "", reply
    finally:
        await streamer.stop()
    assert (admission.refused, model.started) == (1, 2)


async def test_a_full_tool_executor_answers_busy_and_the_node_side_asks_again(bus: Bus) -> None:
    release = asyncio.Event()

    async def slow(params: dict[str, object], ctx: ToolContext) -> ToolOutput:
        await release.wait()
        return ToolOutput(content="slow done")

    registry = ToolRegistry()
    registry.register("t.slow", slow, schema={"type": "object"})
    executor = ToolExecutorActor(bus, registry, concurrency=1, max_waiting=0)
    await executor.start()
    admission = executor.admission
    assert admission is not None
    call = ToolCall(conversation_id="c1", turn_id="t1", call_id="k1", tool="t.slow")
    try:
        held = asyncio.create_task(bus.request(bus.subjects.tools_exec, call, timeout=30))
        await until(lambda: admission.running == 1)
        refused = await bus.request(bus.subjects.tools_exec, call, timeout=30, raise_remote=False)
        assert isinstance(refused, ErrorReply) and refused.code == BUSY
        release.set()
        reply = await held
        assert isinstance(reply, ToolResult) and reply.ok
    finally:
        await executor.stop()


async def node_without_pools(bus: Bus, home: Path) -> Node:
    node = Node(
        bus,
        settings(home, streamers=0, tool_workers=0),
        model=ExtractiveModel(),
        knowledge=KnowledgeSpace(KB),
    )
    await node.start()
    return node


async def test_a_busy_model_call_goes_to_another_member_once_one_is_free(
    bus: Bus, tmp_path: Path
) -> None:
    """The only member is full and answers busy; a member that starts while the node keeps
    asking serves the call, and the turn completes."""
    model = Gated()
    full = StreamerActor(
        bus, NodeModels(model, default_name="extractive"), concurrency=1, max_waiting=0
    )
    await full.start()
    assert full.admission is not None
    held = asyncio.create_task(bus.request(bus.subjects.llm_generate, generate("t0"), timeout=30))
    await until(lambda: model.started == 1)
    node = await node_without_pools(bus, tmp_path / "home")
    client = Client(bus)
    free = StreamerActor(bus, NodeModels(ExtractiveModel()), concurrency=4, max_waiting=4)
    try:
        handle = await client.submit("How do the pricing tiers differ?", conversation_id="c1")
        await until(lambda: full.admission is not None and full.admission.refused >= 1)
        await free.start()
        result = await handle.wait(60)
        assert result.status == "completed", result.error
        assert free.calls >= 1
    finally:
        model.release.set()
        await held
        await client.close()
        await node.stop()
        await free.stop()
        await full.stop()


async def test_a_model_call_that_finds_every_member_full_fails_with_model_busy(
    bus: Bus, tmp_path: Path
) -> None:
    model = Gated()
    full = StreamerActor(
        bus, NodeModels(model, default_name="extractive"), concurrency=1, max_waiting=0
    )
    await full.start()
    assert full.admission is not None
    held = asyncio.create_task(bus.request(bus.subjects.llm_generate, generate("t0"), timeout=30))
    await until(lambda: model.started == 1)
    node = await node_without_pools(bus, tmp_path / "home")
    client = Client(bus)
    try:
        result = await (await client.submit("Any question?", conversation_id="c1")).wait(60)
    finally:
        model.release.set()
        await held
        await client.close()
        await node.stop()
        await full.stop()
    assert result.status == "failed"
    assert "model_busy" in (result.error or ""), result.error
    assert f"({remote.BUSY_TRIES} tries)" in (result.error or "")
    assert full.admission.refused == remote.BUSY_TRIES
