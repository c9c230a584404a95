"""The ToolExecutorActor on a real nats-server: results, failures as ToolResults, the pool.

Clients ask ``bus.subjects.tools_exec`` exactly as a decision loop does. Slow tools
block on events that the test releases, so nothing here waits on the clock except the
timeout tests, whose tools would otherwise never finish.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from actline.actors.pools.tool_executor import (
    RegisteredTool,
    ToolContext,
    ToolExecutorActor,
    ToolOutput,
    ToolRegistry,
)
from actline.bus import Bus, EmbeddedNats, NoResponders
from actline.messages import ArtifactRef, ErrorReply, SkipWaiting, ToolCall, ToolResult, decode

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
    "required": ["text"],
    "additionalProperties": False,
}


def call(tool: str, params: dict[str, Any] | None = None, **kw: Any) -> ToolCall:
    kw.setdefault("call_id", "k1")
    return ToolCall(conversation_id="c1", turn_id="t1", tool=tool, params=params or {}, **kw)


async def ask(bus: Bus, tool_call: ToolCall, timeout: float = 3.0) -> ToolResult:
    reply = await bus.request(bus.subjects.tools_exec, tool_call, timeout=timeout)
    assert isinstance(reply, ToolResult)
    assert (reply.conversation_id, reply.turn_id, reply.call_id, reply.tool) == (
        tool_call.conversation_id,
        tool_call.turn_id,
        tool_call.call_id,
        tool_call.tool,
    )
    return reply


def basic_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool("text.echo", schema=ECHO_SCHEMA, description="Repeat a text.")
    async def echo(params: dict[str, Any], ctx: ToolContext) -> str:
        return params["text"] * params.get("times", 1)

    @registry.tool("clock.now")
    async def now(params: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """The current time."""
        return {"call_id": ctx.call_id, "turn_id": ctx.turn_id, "time_left": ctx.time_left()}

    @registry.tool("doc.write")
    async def write(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        artifact = ArtifactRef(path="out/a.md", mime="text/markdown", text="# A")
        return ToolOutput(content="wrote out/a.md", data={"bytes": 3}, artifacts=(artifact,))

    @registry.tool("oops.raise")
    async def boom(params: dict[str, Any], ctx: ToolContext) -> str:
        raise KeyError("missing thing")

    @registry.tool("oops.return")
    async def wrong(params: dict[str, Any], ctx: ToolContext) -> Any:
        return 42

    @registry.tool("oops.unencodable")
    async def unsendable(params: dict[str, Any], ctx: ToolContext) -> Any:
        return {"a set": {1, 2}}

    @registry.tool("text.big")
    async def big(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content="x" * 150, data={"n": 1})

    return registry


@pytest.fixture
async def executor(bus: Bus) -> AsyncIterator[ToolExecutorActor]:
    actor = ToolExecutorActor(bus, basic_registry(), max_content_chars=100)
    await actor.start()
    try:
        yield actor
    finally:
        await actor.stop()


# --- results ------------------------------------------------------------------------------


async def test_a_str_return_becomes_the_content(bus: Bus, executor: ToolExecutorActor) -> None:
    result = await ask(bus, call("text.echo", {"text": "ab", "times": 2}))
    assert result.ok and result.error is None
    assert (result.content, result.data, result.artifacts) == ("abab", {}, [])


async def test_a_dict_return_becomes_the_data_and_the_tool_sees_its_ids(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    result = await ask(bus, call("clock.now", call_id="k7", timeout_s=30))
    assert result.ok and result.content == ""
    assert result.data["call_id"] == "k7" and result.data["turn_id"] == "t1"
    assert 0 < result.data["time_left"] <= 30


async def test_a_tool_output_keeps_content_data_and_artifacts(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    result = await ask(bus, call("doc.write"))
    assert result.ok
    assert (result.content, result.data) == ("wrote out/a.md", {"bytes": 3})
    assert [a.path for a in result.artifacts] == ["out/a.md"]
    assert executor.stats.calls == executor.stats.ok == 1


async def test_long_content_is_truncated_with_a_note(bus: Bus, executor: ToolExecutorActor) -> None:
    result = await ask(bus, call("text.big"))
    assert result.ok
    assert result.content.startswith("x" * 100) and "x" * 101 not in result.content
    assert "50 of 150 characters cut" in result.content
    assert result.data == {"n": 1, "truncated": True}


# --- failures are results ------------------------------------------------------------------


async def test_an_unknown_tool_lists_the_registered_names(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    result = await ask(bus, call("web.fetch"))
    assert not result.ok and result.data == {"code": "unknown_tool"}
    assert result.error is not None and "'web.fetch'" in result.error
    assert "clock.now" in result.error and "text.echo" in result.error
    assert executor.stats.errors == 1


async def test_an_in_loop_tool_sent_here_says_the_loop_runs_it(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    result = await ask(bus, call("react.write"))
    assert result.data == {"code": "unknown_tool"}
    assert result.error is not None and "decision loop" in result.error


async def test_a_missing_required_param_is_named(bus: Bus, executor: ToolExecutorActor) -> None:
    result = await ask(bus, call("text.echo", {"times": 2}))
    assert not result.ok and result.data["code"] == "bad_params"
    assert result.data["errors"] == ["$: 'text' is a required property"]
    assert result.error is not None and "'text' is a required property" in result.error


async def test_a_param_of_the_wrong_type_is_reported_with_its_path(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    result = await ask(bus, call("text.echo", {"text": 5, "times": "2", "x": 1}))
    assert result.data["code"] == "bad_params"
    errors = result.data["errors"]
    assert len(errors) == 3
    assert any(e.startswith("$.text: 5 is not of type 'string'") for e in errors)
    assert any(e.startswith("$.times: ") for e in errors)
    assert result.error is not None and "bad params for text.echo" in result.error
    assert "(and 2 more)" in result.error


async def test_at_most_five_schema_errors_are_returned(bus: Bus) -> None:
    registry = ToolRegistry()
    props = {f"p{i}": {"type": "integer"} for i in range(8)}

    async def noop(params: dict[str, Any], ctx: ToolContext) -> str:
        return ""

    registry.register("many.params", noop, schema={"type": "object", "properties": props})
    actor = ToolExecutorActor(bus, registry)
    await actor.start()
    result = await ask(bus, call("many.params", {f"p{i}": "no" for i in range(8)}))
    assert len(result.data["errors"]) == 5
    assert result.error is not None and "(and 7 more)" in result.error
    await actor.stop()


async def test_a_raising_tool_gives_its_exception_type_and_message(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    result = await ask(bus, call("oops.raise"))
    assert not result.ok
    assert result.data == {"code": "tool_error", "type": "KeyError"}
    assert result.error == "KeyError: 'missing thing'"


async def test_a_wrong_return_type_is_bad_return(bus: Bus, executor: ToolExecutorActor) -> None:
    result = await ask(bus, call("oops.return"))
    assert not result.ok and result.data == {"code": "bad_return", "type": "int"}
    assert result.error is not None and "returned int" in result.error


async def test_data_that_cannot_go_on_the_wire_is_bad_return(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    result = await ask(bus, call("oops.unencodable"))
    assert not result.ok and result.data["code"] == "bad_return"


async def test_another_message_kind_gets_an_error_reply(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    reply = await bus.request(
        bus.subjects.tools_exec, SkipWaiting(turn_id="t1"), timeout=3, raise_remote=False
    )
    assert isinstance(reply, ErrorReply) and reply.code == "unexpected_message"
    assert "react.skip_waiting" in reply.message


async def test_garbage_gets_a_decode_error_and_the_executor_keeps_serving(
    bus: Bus, executor: ToolExecutorActor
) -> None:
    raw = await bus.nc.request(bus.subjects.tools_exec, b"\x00garbage", timeout=2)
    reply = decode(raw.data)
    assert isinstance(reply, ErrorReply) and reply.code == "decode_error"
    assert (await ask(bus, call("text.echo", {"text": "still here"}))).content == "still here"


# --- timeouts and cancellation ---------------------------------------------------------------


def blocking_registry(
    started: asyncio.Event, cancelled: asyncio.Event, *, timeout_s: float | None = None
) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool("slow.wait", timeout_s=timeout_s)
    async def wait(params: dict[str, Any], ctx: ToolContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    return registry


@pytest.mark.parametrize(
    ("call_timeout", "tool_timeout", "max_timeout", "expected"),
    [(0.05, None, 300.0, 0.05), (30.0, 0.05, 300.0, 0.05), (30.0, 20.0, 0.05, 0.05)],
    ids=["call", "tool-default", "executor-max"],
)
async def test_the_smallest_timeout_cancels_the_tool(
    bus: Bus,
    call_timeout: float,
    tool_timeout: float | None,
    max_timeout: float,
    expected: float,
) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    registry = blocking_registry(started, cancelled, timeout_s=tool_timeout)
    actor = ToolExecutorActor(bus, registry, max_timeout_s=max_timeout)
    await actor.start()
    result = await ask(bus, call("slow.wait", timeout_s=call_timeout))
    assert cancelled.is_set()
    assert not result.ok and result.data == {"code": "timeout", "timeout_s": expected}
    assert actor.stats.timeouts == 1 and actor.stats.errors == 0
    await actor.stop()


async def test_a_timeout_error_raised_by_the_tool_itself_is_a_tool_error(bus: Bus) -> None:
    registry = ToolRegistry()

    async def upstream(params: dict[str, Any], ctx: ToolContext) -> str:
        raise TimeoutError("upstream took too long")

    registry.register("web.fetch", upstream)
    actor = ToolExecutorActor(bus, registry)
    await actor.start()
    result = await ask(bus, call("web.fetch"))
    assert result.data == {"code": "tool_error", "type": "TimeoutError"}
    await actor.stop()


@pytest.mark.parametrize("concurrency", [1, 8])
async def test_stop_cancels_a_call_in_flight(bus: Bus, concurrency: int) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    actor = ToolExecutorActor(bus, blocking_registry(started, cancelled), concurrency=concurrency)
    await actor.start()
    client = asyncio.create_task(ask(bus, call("slow.wait", timeout_s=30), timeout=30))
    await asyncio.wait_for(started.wait(), 3)
    assert actor.in_flight == 1
    await actor.stop()
    assert cancelled.is_set() and actor.in_flight == 0
    client.cancel()
    with pytest.raises(asyncio.CancelledError):
        await client


async def test_a_stopped_executor_takes_no_more_calls(bus: Bus) -> None:
    actor = ToolExecutorActor(bus, basic_registry())
    await actor.start()
    await actor.stop()
    await actor.stop()  # idempotent
    with pytest.raises(NoResponders):
        await ask(bus, call("clock.now"), timeout=2)


# --- the pool ---------------------------------------------------------------------------------


async def test_concurrency_three_runs_three_slow_calls_at_once(bus: Bus) -> None:
    release, all_in = asyncio.Event(), asyncio.Event()
    running = 0
    registry = ToolRegistry()

    @registry.tool("slow.gate")
    async def gate(params: dict[str, Any], ctx: ToolContext) -> str:
        nonlocal running
        running += 1
        if running == 3:
            all_in.set()
        await release.wait()
        return ctx.call_id

    actor = ToolExecutorActor(bus, registry, concurrency=3)
    await actor.start()
    clients = [asyncio.create_task(ask(bus, call("slow.gate", call_id=f"k{i}"))) for i in range(3)]
    await asyncio.wait_for(all_in.wait(), 3)  # all three entered before any was released
    assert actor.in_flight == 3
    release.set()
    results = await asyncio.gather(*clients)
    assert sorted(r.content for r in results) == ["k0", "k1", "k2"]
    await actor.stop()


async def test_two_executors_in_the_queue_group_share_the_work_once_each(
    nats_server: EmbeddedNats, bus: Bus
) -> None:
    other = await Bus.connect(nats_server.url, subject_names=bus.subjects)
    runs: Counter[str] = Counter()
    by_node: Counter[str] = Counter()

    def registry_of(node: str) -> ToolRegistry:
        registry = ToolRegistry()

        @registry.tool("node.name")
        async def name(params: dict[str, Any], ctx: ToolContext) -> str:
            runs[ctx.call_id] += 1
            by_node[node] += 1
            return node

        return registry

    a = ToolExecutorActor(bus, registry_of("a"))
    b = ToolExecutorActor(other, registry_of("b"))
    await a.start()
    await b.start()
    total = 40
    results = await asyncio.gather(
        *(ask(bus, call("node.name", call_id=f"k{i}")) for i in range(total))
    )
    assert all(r.ok for r in results)
    assert runs == Counter({f"k{i}": 1 for i in range(total)})
    assert by_node["a"] > 0 and by_node["b"] > 0  # all 40 on one member: p = 2**-39
    assert a.stats.calls + b.stats.calls == total
    await a.stop()
    await b.stop()
    await other.close()


# --- registration -----------------------------------------------------------------------------


async def _noop(params: dict[str, Any], ctx: ToolContext) -> str:
    """Do nothing."""
    return ""


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("clock", "dotted lowercase"),
        ("Clock.now", "dotted lowercase"),
        ("clock.", "dotted lowercase"),
        ("clock now.x", "dotted lowercase"),
        ("react.write", "reserved"),
        ("react.anything_else", "reserved"),
        ("agent.send", "reserved"),
    ],
)
def test_a_bad_or_in_loop_name_is_refused(name: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        ToolRegistry().register(name, _noop)


def test_a_duplicate_name_is_refused() -> None:
    registry = ToolRegistry()
    registry.register("clock.now", _noop)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("clock.now", _noop)


@pytest.mark.parametrize(
    "schema",
    [{"type": "no-such-type"}, {"type": "object", "required": "text"}, {"minimum": "zero"}],
)
def test_a_broken_schema_fails_at_registration(schema: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a valid JSON schema"):
        ToolRegistry().register("clock.now", _noop, schema=schema)


def test_a_sync_function_or_bad_timeout_is_refused() -> None:
    def sync(params: dict[str, Any], ctx: ToolContext) -> str:
        return ""

    with pytest.raises(ValueError, match="async"):
        ToolRegistry().register("clock.now", sync)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s"):
        ToolRegistry().register("clock.now", _noop, timeout_s=0)


def test_the_registry_describes_its_tools_sorted_for_the_prompt() -> None:
    registry = ToolRegistry()
    registry.register("web.fetch", _noop, schema=ECHO_SCHEMA, description="Fetch a page.")
    registry.register("clock.now", _noop)
    assert registry.names() == ["clock.now", "web.fetch"]
    assert "clock.now" in registry and "clock.later" not in registry
    assert registry.describe() == [
        {"name": "clock.now", "description": "Do nothing.", "schema": {"type": "object"}},
        {"name": "web.fetch", "description": "Fetch a page.", "schema": ECHO_SCHEMA},
    ]
    tool = registry.get("web.fetch")
    assert isinstance(tool, RegisteredTool) and tool.fn is _noop
    assert registry.get("nope") is None
