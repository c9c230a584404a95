"""A tiny stdio MCP server for tests/tools/test_mcp.py.

Run as ``python tests/tools/mcp_echo_server.py``; it speaks MCP over stdin/stdout until stdin
closes. Tools: ``echo(text)``, ``add(a, b)``, ``fail()`` (an error result), ``sleep(seconds)``,
``exit_now()`` (the process dies mid-call), ``Get-Weather.v2(city)`` (a name that needs
sanitising) and ``odd_schema(x)`` (lists an input schema that is not valid JSON schema).
It needs the optional ``mcp`` package.
"""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool


def odd_schema(x: str) -> str:
    """Return x; its listed schema is broken on purpose."""
    return x


broken = Tool.from_function(odd_schema).model_copy(
    update={"parameters": {"type": "object", "properties": {"x": {"type": "no-such-type"}}}}
)
server = MCPServer("echo", log_level="WARNING", tools=[broken])


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail() -> str:
    """Always fail, with a message the caller should see."""
    raise ToolError("this tool always fails")


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def exit_now() -> str:
    """End the server process in the middle of the call."""
    os._exit(3)


@server.tool(name="Get-Weather.v2")
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


if __name__ == "__main__":
    server.run("stdio")
