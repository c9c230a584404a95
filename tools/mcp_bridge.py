"""Tools of MCP servers (stdio transport) in the external tool registry.

``McpServer`` holds one stdio MCP session to a server process; ``register_mcp_server`` adds
every tool the server lists to a ``ToolRegistry`` as ``mcp.<server>.<tool>``, so decision loops
call them through the ToolExecutorActor like any other external tool. The ``mcp`` package is an
optional extra (``actline[mcp]``): it is imported only when a server starts, so this module
imports without it and ``mcp_available()`` says whether it is there.

Tasks: the MCP client's stdio transport and session are anyio context managers that must be
entered and left in one task. ``McpServer`` therefore runs the session in a task of its own,
started by ``start()``/``__aenter__`` and ended by ``aclose()``/``__aexit__``, which may be
called from different tasks; calls may come from any task of the same event loop, concurrently.

Failure semantics: a tool result with ``isError`` raises ``McpError(code="tool_error")`` with
the server's text (the executor turns it into an ``ok=False`` result the model reads); a call
that outlives ``timeout_s`` is cancelled on the server too (``code="timeout"``); calls on a
server that exited fail with ``connection_closed``. Cancelling a call sends the server a
cancellation notice. ``aclose()`` closes the server's stdin, waits for it to exit and kills its
process group if it does not, so no server process outlives the ``McpServer``.

The server process gets only the MCP SDK's safe environment (HOME, LOGNAME, PATH, SHELL, TERM,
USER) plus ``env``: no API keys of this process.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from .errors import ToolError
from .registry import ToolContext, ToolFn, ToolOutput, ToolRegistry

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["MCP_ERRORS", "McpError", "McpServer", "mcp_available", "register_mcp_server"]

log = logging.getLogger(__name__)

MCP_ERRORS: dict[str, str] = {
    "not_installed": "install the optional extra: pip install 'actline[mcp]'",
    "start_failed": "check the server's command, arguments and its stderr",
    "not_started": "start the server (async with McpServer(...)) before calling it",
    "tool_error": "the tool reported an error; read it, fix the arguments and call again",
    "timeout": "the tool did not answer in time; try a smaller request",
    "connection_closed": "the MCP server exited; restart it",
    "protocol_error": "the server refused the request",
    "bad_result": "the server's answer did not match the MCP protocol",
    "unknown_tool": "name only tools the server lists (approval in the MCP config)",
}
"""Each ``McpError.code`` with the advice its message ends with."""

_FALLBACK_SCHEMA: dict[str, Any] = {"type": "object"}
_NOT_WORD = re.compile(r"[^a-z0-9_]")


class McpError(ToolError):
    """An MCP server or one of its tools failed: ``server``, ``code`` (see ``MCP_ERRORS``),
    the text (for ``tool_error``, the server's own message) and the tool if there was one."""

    def __init__(self, server: str, code: str, message: str, tool: str = "") -> None:
        self.server = server
        self.code = code
        self.message = message
        self.tool = tool
        where = f"{server}.{tool}" if tool else server
        advice = MCP_ERRORS.get(code, "")
        text = f"{code} from MCP {where}: {message}"
        super().__init__(f"{text}; {advice}" if advice else text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.server, self.code, self.message, self.tool))


def mcp_available() -> bool:
    """Whether the optional ``mcp`` package can be imported."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        return False
    return True


class McpServer:
    """One stdio MCP session to a server process; an async context manager.

    ``errlog`` receives the server's stderr (default: this process's stderr);
    ``startup_timeout_s`` bounds starting the process plus the MCP handshake.
    """

    def __init__(
        self,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        *,
        errlog: TextIO | None = None,
        startup_timeout_s: float = 30.0,
    ) -> None:
        if not name:
            raise ValueError("an MCP server needs a name; it becomes part of its tool names")
        self.name = name
        self.command = command
        self.args = tuple(args)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.errlog = errlog
        self.startup_timeout_s = startup_timeout_s
        self._session: ClientSession | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def running(self) -> bool:
        """The session is up (started and not closed)."""
        return self._session is not None

    async def __aenter__(self) -> McpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start the server process and finish the MCP handshake.

        Raises ``McpError`` (``not_installed`` or ``start_failed``); a server that fails to
        start leaves no process behind.
        """
        if self._runner is not None:
            raise McpError(self.name, "start_failed", "the server was already started")
        if not mcp_available():
            raise McpError(self.name, "not_installed", "the optional mcp package is missing")
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._runner = asyncio.create_task(self._serve(ready), name=f"mcp-server-{self.name}")
        up = False
        try:
            async with asyncio.timeout(self.startup_timeout_s):
                await asyncio.shield(ready)
            up = True
        except TimeoutError:
            raise McpError(
                self.name,
                "start_failed",
                f"no MCP handshake within {self.startup_timeout_s:g}s from {self.command}",
            ) from None
        finally:
            if not up:
                await self._end_runner(cancel=True)
                if ready.done() and not ready.cancelled():
                    ready.exception()  # retrieved: it is the error raised above, or moot
        log.info("MCP server %s started (%s)", self.name, self.command)

    async def aclose(self) -> None:
        """End the session and the server process; idempotent."""
        if self._runner is None:
            return
        await self._end_runner(cancel=False)
        log.info("MCP server %s closed", self.name)

    async def _end_runner(self, *, cancel: bool) -> None:
        runner, self._runner = self._runner, None
        self._session = None
        if runner is None:
            return
        if cancel:
            runner.cancel()
        else:
            self._stop.set()
        # Shielded: a cancelled caller must not cut the transport's shutdown (which kills the
        # server process) short; the runner finishes it either way.
        await asyncio.shield(asyncio.wait({runner}))

    async def _serve(self, ready: asyncio.Future[None]) -> None:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=self.command, args=list(self.args), env=self.env, cwd=self.cwd
        )
        try:
            async with stdio_client(params, errlog=self.errlog or sys.stderr) as (read, write):
                async with ClientSession(read, write) as session:
                    info = await session.initialize()
                    self._session = session
                    log.debug(
                        "MCP server %s is %s %s",
                        self.name,
                        info.server_info.name,
                        info.server_info.version,
                    )
                    ready.set_result(None)
                    await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(
                    McpError(self.name, "start_failed", _describe(exc) or type(exc).__name__)
                )
            else:
                log.warning("MCP server %s ended with %s", self.name, type(exc).__name__)
        finally:
            self._session = None
            if not ready.done():
                ready.cancel()

    def _live(self, tool: str = "") -> ClientSession:
        if self._session is None:
            state = "was closed or has exited" if self._runner is not None else "is not started"
            raise McpError(self.name, "not_started", f"the server {state}", tool)
        return self._session

    async def list_tools(self) -> list[dict[str, Any]]:
        """``{"name", "description", "inputSchema"}`` of every tool, all pages."""
        import mcp.types

        session = self._live()
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params = mcp.types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._request(session, "", session.list_tools(params=params))
            for tool in page.tools:
                tools.append(
                    {
                        "name": tool.name,
                        "description": tool.description or "",
                        "inputSchema": tool.input_schema,
                    }
                )
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call(
        self, tool: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolOutput:
        """Call ``tool``: its text parts joined are the content; structured content and other
        parts go in ``data`` (``"structured"``, ``"parts"``). Raises ``McpError``."""
        from mcp.types import TextContent

        session = self._live(tool)
        result = await self._request(
            session, tool, session.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
        )
        texts: list[str] = []
        parts: list[dict[str, Any]] = []
        for block in result.content:
            if isinstance(block, TextContent):
                texts.append(block.text)
            else:
                parts.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        content = "\n".join(texts)
        if result.is_error:
            raise McpError(
                self.name, "tool_error", content or "the tool failed without a message", tool
            )
        data: dict[str, Any] = {}
        if result.structured_content is not None:
            data["structured"] = result.structured_content
        if parts:
            data["parts"] = parts
        return ToolOutput(content=content, data=data)

    async def _request(self, session: ClientSession, tool: str, request: Any) -> Any:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT
        from pydantic import ValidationError

        try:
            return await request
        except MCPError as exc:
            code = {REQUEST_TIMEOUT: "timeout", CONNECTION_CLOSED: "connection_closed"}.get(
                exc.code, "protocol_error"
            )
            raise McpError(self.name, code, exc.message, tool) from None
        except (RuntimeError, ValidationError) as exc:
            raise McpError(self.name, "bad_result", _describe(exc), tool) from None


async def register_mcp_server(
    registry: ToolRegistry, server: McpServer, *, approval: bool | Sequence[str] = False
) -> list[str]:
    """Register every tool of a started ``server`` as ``mcp.<server>.<tool>``; the names.
    ``approval``: every tool (True) or the tools of these original names need approval.

    Names are made to fit ``TOOL_NAME_PATTERN`` (lowercase, other characters become ``_``, a
    leading non-letter gets ``t_`` before it) and a clash gets ``_2``, ``_3``… A tool whose
    input schema is not a valid JSON schema for an object gets ``{"type": "object"}``.
    """
    names: list[str] = []
    taken = set(registry.names())
    prefix = f"mcp.{_word(server.name)}."
    listed = await server.list_tools()
    named = () if isinstance(approval, bool) else approval
    unknown = sorted(set(named) - {str(t["name"]) for t in listed})
    if unknown:
        raise McpError(
            server.name,
            "unknown_tool",
            f"approval names tools the server does not have: {', '.join(unknown)}",
        )
    for tool in listed:
        original = str(tool["name"])
        name = prefix + _word(original)
        if name in taken:
            name = next(
                f"{name}_{n}" for n in range(2, len(taken) + 3) if f"{name}_{n}" not in taken
            )
            log.warning(
                "MCP tool %s of %s registered as %s (name clash)", original, server.name, name
            )
        taken.add(name)
        registry.register(
            name,
            _caller(server, original),
            schema=_schema(tool.get("inputSchema"), server.name, original),
            description=tool.get("description")
            or f"{original} (from the MCP server {server.name})",
            needs_approval=approval is True or original in named,
        )
        names.append(name)
    log.info("registered %d tools of MCP server %s", len(names), server.name)
    return names


def _caller(server: McpServer, tool: str) -> ToolFn:
    async def call_mcp_tool(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        # No MCP read timeout: the executor cancels the call at its deadline, and the client
        # then tells the server the request is cancelled.
        return await server.call(tool, params)

    call_mcp_tool.__qualname__ = call_mcp_tool.__name__ = f"mcp_{_word(server.name)}_{_word(tool)}"
    return call_mcp_tool


def _word(text: str) -> str:
    word = _NOT_WORD.sub("_", text.lower())
    if not word:
        return "tool"
    return word if "a" <= word[0] <= "z" else f"t_{word}"


def _schema(raw: object, server: str, tool: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("type", "object") != "object":
        log.warning(
            "MCP tool %s.%s: input schema is not an object schema; using any object", server, tool
        )
        return dict(_FALLBACK_SCHEMA)
    try:
        validator_for(raw).check_schema(raw)
    except SchemaError as exc:
        log.warning(
            "MCP tool %s.%s: invalid input schema (%s); using any object", server, tool, exc.message
        )
        return dict(_FALLBACK_SCHEMA)
    return raw


def _describe(exc: BaseException) -> str:
    """A one-line reason, looking inside exception groups for the first real cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
