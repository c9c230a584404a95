"""actline.tools.mcp_bridge against a real stdio MCP server (tests/tools/mcp_echo_server.py).

Each test starts the server as a child process through ``McpServer``; one test goes all the
way through a ToolExecutorActor on the session nats-server. Processes are looked up in
``/proc`` by a marker argument, so "no process left behind" is checked, not assumed.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from actline.actors.pools.tool_executor import (
    ToolContext,
    ToolExecutorActor,
    ToolOutput,
    ToolRegistry,
)
from actline.bus import Bus
from actline.messages import ToolCall, ToolResult
from actline.tools.mcp_bridge import McpError, McpServer, mcp_available, register_mcp_server

ECHO_SERVER = Path(__file__).with_name("mcp_echo_server.py")
REPO = Path(__file__).parents[2]

# The mcp extra is part of the dev install that `make test` uses; the bridge without it is
# tested in a subprocess below.
assert mcp_available(), "install the dev extras (make, or pip install -e '.[dev]')"


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line contains ``marker``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def echo(name: str = "echo", marker: str = "") -> McpServer:
    args = [str(ECHO_SERVER)] + ([marker] if marker else [])
    return McpServer(name, sys.executable, args)


def context(tool: str) -> ToolContext:
    deadline = asyncio.get_running_loop().time() + 30
    return ToolContext("c1", "t1", "k1", tool, deadline)


@pytest.fixture
async def server() -> AsyncIterator[McpServer]:
    # Setup and teardown may run in different tasks: McpServer must not mind.
    async with echo() as started:
        yield started


# --- the session ----------------------------------------------------------------------------


async def test_the_server_lists_its_tools_with_schemas(server: McpServer) -> None:
    tools = {tool["name"]: tool for tool in await server.list_tools()}
    assert {"echo", "add", "fail", "sleep", "Get-Weather.v2", "odd_schema"} <= set(tools)
    assert tools["add"]["description"] == "Add two integers."
    schema = tools["add"]["inputSchema"]
    assert schema["type"] == "object" and schema["required"] == ["a", "b"]
    assert schema["properties"]["a"]["type"] == "integer"


async def test_a_call_returns_text_content_and_structured_data(server: McpServer) -> None:
    output = await server.call("add", {"a": 2, "b": 40})
    assert output == ToolOutput(content="42", data={"structured": {"result": 42}})
    assert (await server.call("echo", {"text": "héllo"})).content == "héllo"


async def test_an_error_result_raises_with_the_server_s_text(server: McpServer) -> None:
    with pytest.raises(McpError) as error:
        await server.call("fail", {})
    assert (error.value.code, error.value.server, error.value.tool) == (
        "tool_error",
        "echo",
        "fail",
    )
    assert "this tool always fails" in error.value.message
    with pytest.raises(McpError) as unknown:
        await server.call("no_such_tool", {})
    assert unknown.value.code == "tool_error" and "Unknown tool" in unknown.value.message


async def test_a_call_past_its_timeout_fails_and_the_session_stays_usable(
    server: McpServer,
) -> None:
    with pytest.raises(McpError) as error:
        await server.call("sleep", {"seconds": 60}, timeout_s=0.3)
    assert error.value.code == "timeout"
    assert (await server.call("echo", {"text": "still here"})).content == "still here"


async def test_a_server_that_dies_mid_call_gives_connection_closed() -> None:
    marker = f"mcp-test-{uuid.uuid4().hex}"
    async with echo(marker=marker) as server:
        assert len(processes_with(marker)) == 1
        with pytest.raises(McpError) as error:
            await server.call("exit_now", {})
        assert error.value.code == "connection_closed"
        with pytest.raises(McpError) as after:
            await server.call("echo", {"text": "anyone?"})
        assert after.value.code == "connection_closed"
    assert processes_with(marker) == []


async def test_closing_ends_the_server_process() -> None:
    marker = f"mcp-test-{uuid.uuid4().hex}"
    server = echo(marker=marker)
    await server.start()
    assert server.running and len(processes_with(marker)) == 1
    await server.aclose()
    await server.aclose()  # idempotent
    assert not server.running and processes_with(marker) == []
    with pytest.raises(McpError) as error:
        await server.call("echo", {"text": "x"})
    assert error.value.code == "not_started"


async def test_a_call_before_start_is_not_started() -> None:
    with pytest.raises(McpError) as error:
        await echo().list_tools()
    assert error.value.code == "not_started" and "start the server" in str(error.value)


async def test_a_command_that_does_not_exist_fails_to_start() -> None:
    with pytest.raises(McpError) as error:
        async with McpServer("ghost", "/nonexistent/mcp-server"):
            pass
    assert error.value.code == "start_failed" and "FileNotFoundError" in error.value.message


async def test_a_server_that_never_answers_fails_to_start_and_is_killed() -> None:
    marker = f"mcp-test-{uuid.uuid4().hex}"
    silent = McpServer(
        "silent",
        sys.executable,
        ["-c", "import time; time.sleep(600)", marker],
        startup_timeout_s=1,
    )
    with pytest.raises(McpError) as error:
        await silent.start()
    assert error.value.code == "start_failed" and "no MCP handshake within 1s" in str(error.value)
    assert processes_with(marker) == [] and not silent.running


def test_an_mcp_error_pickles_with_its_fields() -> None:
    error = pickle.loads(pickle.dumps(McpError("echo", "tool_error", "it broke", "fail")))
    assert (error.server, error.code, error.message, error.tool) == (
        "echo",
        "tool_error",
        "it broke",
        "fail",
    )
    assert str(error).startswith("tool_error from MCP echo.fail: it broke;")


def test_the_module_imports_and_reports_when_mcp_is_missing() -> None:
    code = (
        "import asyncio, sys\n"
        "sys.modules['mcp'] = None\n"
        "from actline.tools.mcp_bridge import McpError, McpServer, mcp_available\n"
        "print(mcp_available())\n"
        "try:\n"
        "    asyncio.run(McpServer('x', 'x').start())\n"
        "except McpError as error:\n"
        "    print(error.code)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.split() == ["False", "not_installed"]


# --- the registry -----------------------------------------------------------------------------


async def test_registering_adds_every_tool_under_a_sanitised_name(server: McpServer) -> None:
    registry = ToolRegistry()
    names = await register_mcp_server(registry, server)
    assert sorted(names) == [
        "mcp.echo.add",
        "mcp.echo.echo",
        "mcp.echo.exit_now",
        "mcp.echo.fail",
        "mcp.echo.get_weather_v2",
        "mcp.echo.odd_schema",
        "mcp.echo.sleep",
    ]
    assert registry.names() == sorted(names)
    weather = registry.get("mcp.echo.get_weather_v2")
    assert weather is not None and weather.description == "The weather in a city."
    output = await weather.fn({"city": "Oslo"}, context(weather.name))
    assert isinstance(output, ToolOutput) and output.content == "sunny in Oslo"


async def test_tools_named_in_approval_need_it_and_an_unknown_name_is_refused(
    server: McpServer,
) -> None:
    registry = ToolRegistry()
    await register_mcp_server(registry, server, approval=["echo", "Get-Weather.v2"])
    assert registry.approval_required() == ["mcp.echo.echo", "mcp.echo.get_weather_v2"]
    everything = ToolRegistry()
    names = await register_mcp_server(everything, server, approval=True)
    assert everything.approval_required() == sorted(names)
    with pytest.raises(McpError) as refused:
        await register_mcp_server(ToolRegistry(), server, approval=["echo", "rm_rf"])
    assert refused.value.code == "unknown_tool" and "rm_rf" in str(refused.value)


async def test_an_invalid_input_schema_falls_back_to_any_object(server: McpServer) -> None:
    registry = ToolRegistry()
    await register_mcp_server(registry, server)
    odd = registry.get("mcp.echo.odd_schema")
    assert odd is not None and odd.schema == {"type": "object"}
    add = registry.get("mcp.echo.add")
    assert add is not None and add.schema["required"] == ["a", "b"]


async def test_the_registered_schema_rejects_bad_params(server: McpServer) -> None:
    registry = ToolRegistry()
    await register_mcp_server(registry, server)
    add = registry.get("mcp.echo.add")
    assert add is not None
    assert add.check_params({"a": 1, "b": 2}) == []
    problems = add.check_params({"a": "one"})
    assert any("'b' is a required property" in p for p in problems)
    assert any(p.startswith("$.a: 'one' is not of type 'integer'") for p in problems)


async def test_a_server_name_is_sanitised_and_clashes_get_a_suffix() -> None:
    registry = ToolRegistry()
    async with echo(name="Echo Srv-2") as first, echo(name="echo-srv 2") as second:
        one = await register_mcp_server(registry, first)
        two = await register_mcp_server(registry, second)
    assert "mcp.echo_srv_2.echo" in one and "mcp.echo_srv_2.echo_2" in two
    assert len(set(one) | set(two)) == len(one) + len(two)


async def test_a_registered_tool_raises_the_server_s_error(server: McpServer) -> None:
    registry = ToolRegistry()
    await register_mcp_server(registry, server)
    fail = registry.get("mcp.echo.fail")
    assert fail is not None
    with pytest.raises(McpError, match="this tool always fails"):
        await fail.fn({}, context(fail.name))


# --- through the executor on NATS ---------------------------------------------------------------


async def test_mcp_tools_run_through_the_tool_executor(bus: Bus, server: McpServer) -> None:
    registry = ToolRegistry()
    await register_mcp_server(registry, server)
    executor = ToolExecutorActor(bus, registry)
    await executor.start()
    try:

        async def ask(tool: str, params: dict[str, Any]) -> ToolResult:
            call = ToolCall(
                conversation_id="c1", turn_id="t1", call_id="k1", tool=tool, params=params
            )
            reply = await bus.request(bus.subjects.tools_exec, call, timeout=10)
            assert isinstance(reply, ToolResult)
            return reply

        added = await ask("mcp.echo.add", {"a": 20, "b": 22})
        assert added.ok and added.content == "42"
        assert added.data == {"structured": {"result": 42}}

        failed = await ask("mcp.echo.fail", {})
        assert not failed.ok and failed.data["code"] == "tool_error"
        assert failed.error is not None and "this tool always fails" in failed.error

        bad = await ask("mcp.echo.add", {"a": "twenty"})
        assert not bad.ok and bad.data["code"] == "bad_params"
        assert executor.stats.calls == 3 and executor.stats.ok == 1
    finally:
        await executor.stop()
