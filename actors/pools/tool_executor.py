"""The ToolExecutorActor: a pool that runs external tools for decision loops.

Every tool other than the in-loop ones (``react.*`` and ``agent.send``) runs here. A
decision loop asks ``<prefix>.tools.exec`` with a ``ToolCall`` and gets a ``ToolResult``
back; a failure of the tool (unknown name, params that break its JSON schema, a timeout,
an exception, a wrong return type) is a ``ToolResult`` with ``ok=False``, an ``error``
written for the model and ``data["code"]`` for programs, never a transport error.

Each node runs one executor: a single subscription in the queue group ``tools`` whose
handlers run up to ``concurrency`` calls at once, each in its own task. This replaces N
single-task actors because a NATS queue group picks a member at random: with one call per
member, a long call (a crawl, a build) would block whatever the server happened to queue
behind it while other members sat idle. Inside one process the bounded pool lets a short
call pass a long one; across nodes the queue group still spreads the load.

With ``max_waiting`` (a pool process, ``actline pool tools``) at most that many calls wait
for a slot on ``tools.exec`` past the ``concurrency`` running, and a call past both is
answered at once with ``ErrorReply(code="busy")`` (``actline.actors.pools.admission``), so
a full member never holds a call another member could run.

A call whose conversation this executor does not hold names the node that holds it
(``ToolCall.owner``): the tool then gets a copy of the running turn's workspace fetched from
that node, and what it changed is sent back when it has finished
(``actline.actors.pools.remote_files``); when the owner refuses the changes, the call fails
with the owner's reason and nothing it wrote is kept.

Cancellation contract: a call runs under ``asyncio.timeout`` of the smallest of the
call's ``timeout_s``, the tool's own default and ``max_timeout_s``; when it expires the
tool's task is cancelled (the tool sees ``CancelledError``) and the reply says
``timeout``. ``stop()`` unsubscribes and cancels the calls in flight; their callers get
no reply, so their ``request`` ends in ``RequestTimeout``. ``CancelledError`` is never
swallowed. Logs carry ids, sizes and timings, never params or results.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from actline.actors.pools.admission import BUSY, Admission
from actline.actors.tracing import diag
from actline.actors.tracing.spans import Tracer
from actline.bus import Bus, Envelope, Subscription
from actline.messages import EncodeError, ErrorReply, Message, ToolCall, ToolResult, encode
from actline.tools.registry import (
    IN_LOOP_ADVICE,
    MAX_SCHEMA_ERRORS,
    TOOL_NAME_PATTERN,
    RegisteredTool,
    ToolContext,
    ToolFn,
    ToolOutput,
    ToolRegistry,
    is_in_loop,
    shorten,
)
from actline.tools.workspace.workspace import TurnFiles

from .remote_files import OwnerRefused, RemoteFiles

__all__ = [  # the registry types live in actline.tools.registry; re-exported for callers here
    "TOOL_NAME_PATTERN",
    "RegisteredTool",
    "ToolContext",
    "ToolExecutorActor",
    "ToolExecutorStats",
    "ToolFn",
    "ToolOutput",
    "ToolRegistry",
]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ToolExecutorStats:
    """Counters of one executor; ``errors`` counts every ``ok=False`` reply but timeouts."""

    calls: int = 0
    ok: int = 0
    errors: int = 0
    timeouts: int = 0


class ToolExecutorActor:
    """Serves ``bus.subjects.tools_exec`` in the queue group ``tools`` from a registry."""

    QUEUE = "tools"

    def __init__(
        self,
        bus: Bus,
        registry: ToolRegistry,
        *,
        concurrency: int = 8,
        max_timeout_s: float = 300.0,
        max_content_chars: int = 200_000,
        node_id: str | None = None,
        files: Callable[[str, str], TurnFiles | None] | None = None,
        tracer: Tracer | None = None,
        max_waiting: int | None = None,
        scratch: str | Path | None = None,
        fetch_limit: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if not max_timeout_s > 0:
            raise ValueError(f"max_timeout_s must be positive, got {max_timeout_s}")
        self.bus = bus
        self.registry = registry
        self.concurrency = concurrency
        self.max_timeout_s = max_timeout_s
        self.max_content_chars = max_content_chars
        self.stats = ToolExecutorStats()
        self.node_id = node_id
        self.files = files
        self.scratch = scratch
        """Where the temporary workspaces of calls whose conversation another node holds go
        (None: the system's temp folder)."""
        self.fetch_limit = fetch_limit
        """Bytes of file content in one message to or from the owner node (None: half the
        server's ``max_payload``)."""
        self.tracer = tracer or Tracer()
        self.admission = None if max_waiting is None else Admission(concurrency, max_waiting)
        self._sub: Subscription | None = None
        self._local: Subscription | None = None
        self._in_flight: set[asyncio.Task[Any]] = set()

    @property
    def in_flight(self) -> int:
        """Calls running now."""
        return len(self._in_flight)

    async def start(self) -> None:
        """Subscribe; requests sent after this returns find the executor. Idempotent."""
        if self._sub is not None:
            return
        subject = self.bus.subjects.tools_exec
        admission = self.admission
        self._sub = await self.bus.subscribe(
            subject,
            self._handle if admission is None else self._admitted,
            queue=self.QUEUE,
            concurrency=self.concurrency
            if admission is None
            else admission.subscription_concurrency,
        )
        if self.node_id is not None:
            self._local = await self.bus.subscribe(
                self.bus.subjects.tools_exec_local(self.node_id),
                self._handle,
                concurrency=self.concurrency,
            )
        log.info(
            "tool executor serving %s (%d tools, concurrency %d)",
            subject,
            len(self.registry.names()),
            self.concurrency,
        )

    async def stop(self) -> None:
        """Unsubscribe and cancel the calls in flight; returns once they have ended."""
        sub, self._sub = self._sub, None
        if sub is None:
            return
        await sub.unsubscribe()
        local, self._local = self._local, None
        if local is not None:
            await local.unsubscribe()
        leftover = list(self._in_flight)
        for task in leftover:
            task.cancel()
        if leftover:
            await asyncio.wait(leftover)
        log.info("tool executor on %s stopped (%d calls cancelled)", sub.subject, len(leftover))

    # -- one call ------------------------------------------------------------------
    async def _admitted(self, msg: Message, env: Envelope) -> Message | None:
        """``_handle`` behind the admission: busy past its running and waiting calls."""
        admission = self.admission
        assert admission is not None
        if not admission.admit():
            return ErrorReply(code=BUSY, message=admission.busy(), subject=env.subject)
        async with admission.slot():
            return await self._handle(msg, env)

    async def _handle(self, msg: Message, env: Envelope) -> Message | None:
        if not isinstance(msg, ToolCall):
            log.warning("unexpected %s on %s", msg.kind, env.subject)
            return ErrorReply(
                code="unexpected_message",
                message=f"{env.subject} serves tool.call requests; got {msg.kind}",
                subject=env.subject,
            )
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
        started = time.monotonic()
        try:
            with self.tracer.remote("tool.exec", env.headers, msg.turn_id, tool=msg.tool) as span:
                result = await self._run(msg)
                if span is not None:  # a child of the turn's tool span
                    span.status = "ok" if result.ok else "error"
                    span.attrs["content_chars"] = len(result.content)
        finally:
            if task is not None:
                self._in_flight.discard(task)
        self._count(result)
        diag.tool_ran(result, started)
        return result

    async def _run(self, call: ToolCall) -> ToolResult:
        self.stats.calls += 1
        tool = self.registry.get(call.tool)
        if tool is None:
            names = ", ".join(self.registry.names()) or "(none)"
            hint = f"; {IN_LOOP_ADVICE}" if is_in_loop(call.tool) else ""
            return _failure(
                call,
                f"there is no tool {call.tool!r}{hint}; the tools are: {names}",
                code="unknown_tool",
            )
        problems = tool.check_params(call.params)
        if problems:
            more = len(problems) - 1
            return _failure(
                call,
                f"bad params for {tool.name}: {problems[0]}"
                + (f" (and {more} more)" if more else "")
                + "; fix the params to match the tool's schema and call again",
                code="bad_params",
                errors=problems[:MAX_SCHEMA_ERRORS],
            )
        files = self.files(call.conversation_id, call.turn_id) if self.files else None
        if files is not None or not call.owner or call.owner == self.node_id:
            return await self._call(call, tool, files)
        try:
            remote = RemoteFiles(self.bus, call, scratch=self.scratch, limit=self._limit())
        except OwnerRefused as exc:
            return _failure(call, exc.message, code=exc.code, **exc.detail)
        try:
            result = await self._call(call, tool, remote.turn_files())
            try:
                await remote.finish()
            except OwnerRefused as exc:
                return _not_kept(call, result, exc)
            return result
        finally:
            await remote.close()

    def _limit(self) -> int:
        limit = self.bus.max_payload // 2
        return min(limit, self.fetch_limit) if self.fetch_limit else limit

    async def _call(
        self, call: ToolCall, tool: RegisteredTool, files: TurnFiles | None
    ) -> ToolResult:
        """Run ``tool`` with ``files`` as the call's workspace, within its timeout."""
        timeout = self._timeout_for(call, tool)
        loop = asyncio.get_running_loop()
        started = loop.time()
        ctx = ToolContext(
            call.conversation_id, call.turn_id, call.call_id, tool.name, started + timeout, files
        )
        scope = asyncio.timeout_at(ctx.deadline)
        try:
            async with scope:
                raw = await tool.fn(dict(call.params), ctx)
        except TimeoutError as exc:
            if not scope.expired():
                return self._raised(call, exc)
            log.warning(
                "tool %s call_id=%s timed out after %.3gs", tool.name, call.call_id, timeout
            )
            return _failure(
                call,
                f"{tool.name} did not finish within {timeout:g}s and was cancelled",
                code="timeout",
                timeout_s=timeout,
            )
        except Exception as exc:
            return self._raised(call, exc)
        result = self._result(call, raw)
        log.debug(
            "tool %s call_id=%s conversation_id=%s turn_id=%s ok=%s %d chars in %.3fs",
            tool.name,
            call.call_id,
            call.conversation_id,
            call.turn_id,
            result.ok,
            len(result.content),
            loop.time() - started,
        )
        return result

    def _timeout_for(self, call: ToolCall, tool: RegisteredTool) -> float:
        requested = call.timeout_s if not math.isnan(call.timeout_s) else self.max_timeout_s
        default = tool.timeout_s if tool.timeout_s is not None else requested
        return max(0.0, min(requested, default, self.max_timeout_s))

    def _raised(self, call: ToolCall, exc: Exception) -> ToolResult:
        kind = type(exc).__name__
        if isinstance(exc, OwnerRefused):  # the owner node could not give the workspace
            log.warning("tool %s call_id=%s: workspace %s", call.tool, call.call_id, exc.code)
            return _failure(call, shorten(exc.message, 2000), code=exc.code, **exc.detail)
        log.warning("tool %s call_id=%s raised %s", call.tool, call.call_id, kind)
        log.debug("tool %s call_id=%s traceback", call.tool, call.call_id, exc_info=exc)
        return _failure(call, shorten(f"{kind}: {exc}", 2000), code="tool_error", type=kind)

    def _result(self, call: ToolCall, raw: object) -> ToolResult:
        if isinstance(raw, ToolOutput):
            output = raw
        elif isinstance(raw, str):
            output = ToolOutput(content=raw)
        elif isinstance(raw, dict):
            output = ToolOutput(data=raw)
        else:
            kind = type(raw).__name__
            return _failure(
                call,
                f"{call.tool} returned {kind}; a tool returns ToolOutput, str or dict",
                code="bad_return",
                type=kind,
            )
        content, data = output.content, output.data
        if len(content) > self.max_content_chars:
            cut = len(content) - self.max_content_chars
            content = (
                content[: self.max_content_chars]
                + f"\n[truncated: {cut} of {len(output.content)} characters cut]"
            )
            data = {**data, "truncated": True}
        try:
            result = ToolResult(
                conversation_id=call.conversation_id,
                turn_id=call.turn_id,
                call_id=call.call_id,
                tool=call.tool,
                ok=output.error is None,
                content=content,
                data=data,
                artifacts=list(output.artifacts),
                error=output.error,
            )
            encode(result, max_size=self.bus.max_payload)
        except (ValidationError, EncodeError) as exc:
            reason = str(exc).splitlines()[0]
            return _failure(
                call,
                shorten(f"{call.tool} returned a result that cannot be sent: {reason}"),
                code="bad_return",
                type=type(exc).__name__,
            )
        return result

    def _count(self, result: ToolResult) -> None:
        if result.ok:
            self.stats.ok += 1
        elif result.data.get("code") == "timeout":
            self.stats.timeouts += 1
        else:
            self.stats.errors += 1


def _failure(call: ToolCall, error: str, *, code: str, **data: Any) -> ToolResult:
    return ToolResult(
        conversation_id=call.conversation_id,
        turn_id=call.turn_id,
        call_id=call.call_id,
        tool=call.tool,
        ok=False,
        error=error,
        data={"code": code, **data},
    )


def _not_kept(call: ToolCall, result: ToolResult, refused: OwnerRefused) -> ToolResult:
    """``result`` failed because the owner node refused to store the files the call wrote."""
    data: dict[str, Any] = dict(result.data)
    if "files" in data:
        data["files"] = []
    data.update(refused.detail)
    data["code"] = refused.code
    error = f"{refused.message}. The files this call wrote were not kept."
    if result.error:
        error = f"{result.error}; {error}"
    log.warning("tool %s call_id=%s: changes refused (%s)", call.tool, call.call_id, refused.code)
    return ToolResult(
        conversation_id=call.conversation_id,
        turn_id=call.turn_id,
        call_id=call.call_id,
        tool=call.tool,
        ok=False,
        content=result.content,
        data=data,
        error=shorten(error, 2000),
    )
