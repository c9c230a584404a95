"""``FakeAnthropicServer``: the Messages API over local HTTP, with cache accounting.

One task per connection serves its requests in turn (keep-alive). A request is
authenticated, validated, checked against the context window, given its
injected failure if one is queued, then accounted (``sim.account`` at its start,
``sim.commit`` when its response begins) and answered from the policy.

Cancellation contract: while a reply is produced, a watcher reads the
connection; when the client closes it, the reply task is cancelled (which
cancels and closes the policy's iterator) before ``disconnects`` grows and
``disconnected`` is set. ``stop()`` cancels every connection task and waits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from actline.messages import GenerateRequest, Usage
from actline.timeline.tokens import DEFAULT_COUNTER

from ..anthropic.wire import from_messages_params
from ..cache_sim import CachePlan, CacheSim, CacheUsage
from ..config import model_spec
from ..errors import ModelRequestError
from ..protocol import Chunk
from . import api
from ._http import LAST_CHUNK, Connection, HttpRequest, response_head
from .limits import ReplyLimit
from .policy import EchoPolicy, Policy
from .serving import LocalServer

logger = logging.getLogger("actline.llm.fake_anthropic")

FailureKind = Literal[
    "rate_limit",
    "overloaded",
    "api_error",
    "context_window",
    "overloaded_midstream",
    "ended_early",
]
FAILURES: Mapping[str, tuple[int, str, str]] = {
    "rate_limit": (429, "rate_limit_error", "Number of request tokens exceeds your rate limit"),
    "overloaded": (529, "overloaded_error", "Overloaded"),
    "api_error": (500, "api_error", "Internal server error"),
    "context_window": (400, "invalid_request_error", "prompt is too long"),
    # A non-streaming request cannot break mid-stream: it gets the 529 instead.
    "overloaded_midstream": (529, "overloaded_error", "Overloaded"),
    # A stream that ends its body cleanly after a few deltas, without content_block_stop,
    # message_delta or message_stop (a server that gave up): no error event says why.
    "ended_early": (529, "overloaded_error", "Overloaded"),
}
MIDSTREAM = ("overloaded_midstream", "ended_early")
"""The failures of a streamed reply that start it and break it off."""
MIDSTREAM_DELTAS = 2
"""Deltas sent before an injected mid-stream overload."""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One HTTP request the server answered, in the order the answers were decided."""

    request_id: str
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    """The parsed JSON body; None when absent or malformed."""
    status: int
    stream: bool = False
    error_type: str | None = None
    usage: Usage | None = None
    """The usage reported (output tokens as far as the reply got)."""
    cache: CacheUsage | None = None
    disconnected: bool = False


@dataclass(slots=True)
class _Exchange:
    """One accepted request while its reply is produced."""

    request_id: str
    http: HttpRequest
    path: str
    body: Mapping[str, Any]
    plan: CachePlan
    request: GenerateRequest
    failure: str | None = None
    parts: list[str] = field(default_factory=list)
    sent_all: bool = False
    recorded: bool = False
    error_type: str | None = None
    limit: ReplyLimit = field(default_factory=ReplyLimit)

    @property
    def stop(self) -> tuple[str, str | None]:
        """The reply's ``stop_reason`` and ``stop_sequence``."""
        return (self.limit.cut or "end_turn", self.limit.matched)

    @property
    def model(self) -> str:
        return str(self.body["model"])

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def output_tokens(self) -> int:
        return DEFAULT_COUNTER.count("".join(self.parts))


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


async def _close_iterator(iterator: AsyncIterator[Chunk]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


class FakeAnthropicServer(LocalServer):
    """The local Messages API; use ``async with`` or ``run_in_thread()``.

    ``min_cache_tokens`` and ``context_window`` override the per-model constants
    of ``actline.llm.config``; ``clock`` gives the times the cache is accounted at.
    """

    name = "fake anthropic server"

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        clock: Callable[[], float] = time.time,
        host: str = "127.0.0.1",
        port: int = 0,
        min_cache_tokens: int | None = None,
        context_window: int | None = None,
    ) -> None:
        super().__init__(host, port)
        self.policy: Policy = policy or EchoPolicy()
        self.sim = CacheSim(min_cache_tokens=min_cache_tokens)
        self.requests: list[RequestRecord] = []
        self.disconnects = 0
        """Replies abandoned because the client closed the connection."""
        self.disconnected = asyncio.Event()
        """Set at each disconnect, once the policy's iterator is closed."""
        self._clock = clock
        self._context_window = context_window
        self._failures: deque[str] = deque()

    def fail_next(self, kind: FailureKind, times: int = 1) -> None:
        """Fail the next ``times`` valid requests with ``kind``; queued kinds run in order."""
        if kind not in FAILURES:
            raise ValueError(f"unknown failure kind {kind!r}; expected one of {sorted(FAILURES)}")
        self._failures.extend([kind] * times)

    async def _refuse(self, conn: Connection, message: str) -> None:
        await self._send_error(conn, _new_id("req"), 400, "invalid_request_error", message)

    async def _send_json(
        self,
        conn: Connection,
        request_id: str,
        status: int,
        body: Mapping[str, Any],
        extra: Sequence[tuple[str, str]] = (),
    ) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        headers = [("content-type", "application/json"), ("content-length", str(len(data)))]
        headers += [("request-id", request_id), ("connection", conn.connection), *extra]
        await conn.send(response_head(status, headers) + data)

    async def _send_error(
        self, conn: Connection, request_id: str, status: int, error_type: str, message: str
    ) -> None:
        extra = [("retry-after", "0")] if status == 429 else []
        await self._send_json(conn, request_id, status, api.error_body(error_type, message), extra)

    async def _handle(self, conn: Connection, http: HttpRequest) -> bool:
        """Answer one request; False when the connection must close."""
        request_id = _new_id("req")
        path = http.target.split("?", 1)[0]
        body: Any = None

        async def refuse(status: int, error_type: str, message: str) -> bool:
            stream = isinstance(body, dict) and body.get("stream") is True
            self.requests.append(
                RequestRecord(
                    request_id, http.method, path, http.headers, body, status, stream, error_type
                )
            )
            logger.info("%s %s %s -> %d %s", request_id, http.method, path, status, error_type)
            await self._send_error(conn, request_id, status, error_type, message)
            return True

        if http.method != "POST" or path != "/v1/messages":
            return await refuse(404, "not_found_error", f"Not found: {http.method} {path}")
        problem = ""
        try:
            body = json.loads(http.body)
        except ValueError as exc:
            problem = f"malformed JSON body: {exc}"
        bearer = http.headers.get("authorization", "")
        if not http.headers.get("x-api-key") and not (
            bearer.lower().startswith("bearer ") and bearer[7:].strip()
        ):
            return await refuse(401, "authentication_error", "x-api-key header is required")
        if problem:
            return await refuse(400, "invalid_request_error", problem)
        try:
            api.validate_body(body)
            prompt = self.sim.split(body)
        except ModelRequestError as exc:
            return await refuse(exc.status, exc.error_type, exc.detail)
        window = self._context_window or model_spec(body["model"]).context_window
        failure = self._failures.popleft() if self._failures else None
        if failure == "context_window" or prompt.total_tokens > window:
            tokens = max(prompt.total_tokens, window + 1)
            message = f"prompt is too long: {tokens} tokens > {window} maximum"
            return await refuse(400, "invalid_request_error", message)
        if failure is not None and not (failure in MIDSTREAM and body.get("stream")):
            return await refuse(*FAILURES[failure])
        plan = self.sim.account(prompt, self._clock())
        exchange = _Exchange(
            request_id, http, path, body, plan, from_messages_params(body), failure
        )
        exchange.limit = ReplyLimit(body["max_tokens"], tuple(body.get("stop_sequences") or ()))
        produce = self._produce_stream if exchange.stream else self._produce_json
        disconnected = await self._race_peer(conn, produce(conn, exchange), exchange)
        if disconnected:
            self._record(exchange, disconnected=True)
            self.disconnects += 1
            self.disconnected.set()
        return not disconnected

    def _record(self, exchange: _Exchange, *, disconnected: bool = False) -> None:
        """Keep the record of an accepted request. Called before its last bytes are sent,
        so a client that has the whole reply always finds the record."""
        if exchange.recorded:
            return
        exchange.recorded = True
        cache = exchange.plan.usage
        usage = Usage(
            input_tokens=cache.input_tokens,
            output_tokens=exchange.output_tokens,
            cache_read_tokens=cache.cache_read_input_tokens,
            cache_write_5m_tokens=cache.ephemeral_5m_input_tokens,
            cache_write_1h_tokens=cache.ephemeral_1h_input_tokens,
            model=exchange.model,
            request_id=exchange.request_id,
        )
        status = 500 if exchange.error_type and not exchange.stream else 200
        http = exchange.http
        self.requests.append(
            RequestRecord(
                exchange.request_id,
                http.method,
                exchange.path,
                http.headers,
                exchange.body,
                status,
                exchange.stream,
                exchange.error_type,
                usage,
                cache,
                disconnected,
            )
        )
        logger.info(
            "%s %s stream=%s -> %d in=%d read=%d write=%d out=%d error=%s disconnected=%s",
            exchange.request_id,
            exchange.model,
            exchange.stream,
            status,
            cache.input_tokens,
            cache.cache_read_input_tokens,
            cache.cache_creation_input_tokens,
            usage.output_tokens,
            exchange.error_type,
            disconnected,
        )

    async def _policy_text(
        self, exchange: _Exchange, emit: Callable[[str], Coroutine[Any, Any, None]] | None
    ) -> None:
        """Run the policy, collecting its text (and emitting each chunk when streaming)."""
        iterator = self.policy.stream(exchange.request)
        limit = exchange.limit
        try:
            async for chunk in iterator:
                if isinstance(chunk, Usage) or not chunk:
                    continue
                await limit.send(exchange.parts, limit.feed(chunk), emit)
                if limit.cut is not None:
                    break
                if exchange.failure and len(exchange.parts) >= MIDSTREAM_DELTAS:
                    break
            else:
                await limit.send(exchange.parts, limit.finish(), emit)
        finally:
            await _close_iterator(iterator)

    async def _produce_json(self, conn: Connection, exchange: _Exchange) -> None:
        self.sim.commit(exchange.plan, self._clock())
        try:
            await self._policy_text(exchange, None)
        except ConnectionError:
            raise
        except Exception as exc:
            logger.exception("%s policy failed", exchange.request_id)
            exchange.error_type = "api_error"
            self._record(exchange)
            detail = f"policy failed: {type(exc).__name__}"
            await self._send_error(conn, exchange.request_id, 500, "api_error", detail)
            exchange.sent_all = True
            return
        usage = api.api_usage(exchange.plan.usage, exchange.output_tokens)
        text = "".join(exchange.parts)
        message = api.message(_new_id("msg"), exchange.model, text, usage, exchange.stop)
        self._record(exchange)
        await self._send_json(conn, exchange.request_id, 200, message)
        exchange.sent_all = True

    async def _produce_stream(self, conn: Connection, exchange: _Exchange) -> None:
        headers = [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-cache"),
            ("transfer-encoding", "chunked"),
            ("request-id", exchange.request_id),
            ("connection", conn.connection),
        ]
        head = api.stream_head(_new_id("msg"), exchange.model, exchange.plan.usage)
        await conn.send(response_head(200, headers) + head)
        self.sim.commit(exchange.plan, self._clock())

        async def emit(text: str) -> None:
            await conn.send(api.text_delta(text))

        error: tuple[str, str] | None = None
        try:
            await self._policy_text(exchange, emit)
        except ConnectionError:
            raise
        except Exception as exc:
            logger.exception("%s policy failed mid-stream", exchange.request_id)
            error = ("api_error", f"policy failed: {type(exc).__name__}")
        if exchange.failure == "overloaded_midstream":
            error = ("overloaded_error", "Overloaded")
        if exchange.failure == "ended_early":
            tail = b""
        elif error is not None:
            exchange.error_type = error[0]
            tail = api.sse("error", api.error_body(*error))
        else:
            tail = api.stream_tail(exchange.plan.usage, exchange.output_tokens, exchange.stop)
        self._record(exchange)
        conn.writer.write(tail + LAST_CHUNK)
        exchange.sent_all = True
        await conn.writer.drain()
