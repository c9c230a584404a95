"""``FakeOpenAIServer``: the Chat Completions API over local HTTP, for the real ``openai`` client.

``POST /v1/chat/completions`` is authenticated (a bearer key, any value), validated the
way the API does (``api.validate_body``, refused with its error shape), checked
against the context window, given its injected failure if one is queued, and answered
from a ``Policy`` (``actline.llm.fake_anthropic.policy``: the request reaches it as the
``GenerateRequest`` ``wire.from_chat_params`` gives back). A streamed reply is ``data:``
chunks — the role, the text deltas, a chunk with ``finish_reason`` (``length`` when the
text was cut at ``max_tokens``), the usage chunk when ``stream_options.include_usage``
asks for it — then ``data: [DONE]``. HTTP framing is ``actline.llm.fake_anthropic._http``.

Usage counts ``prompt_tokens`` and ``completion_tokens`` with the default token counter;
``report_cached=True`` adds ``prompt_tokens_details.cached_tokens`` from a prefix cache
of earlier prompts (``prefix.PrefixCache``).

Cancellation contract: while a reply is produced, a watcher reads the connection; when
the client closes it, the reply task is cancelled (which closes the policy's iterator)
before ``disconnects`` grows and ``disconnected`` is set. ``stop()`` cancels every
connection task and waits.
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

from ..fake_anthropic._http import (
    LAST_CHUNK,
    Connection,
    HttpRequest,
    response_head,
)
from ..fake_anthropic.limits import ReplyLimit
from ..fake_anthropic.policy import EchoPolicy, Policy
from ..fake_anthropic.serving import LocalServer
from ..openai.wire import from_chat_params
from . import api
from .prefix import PrefixCache, prompt_text, prompt_tokens

logger = logging.getLogger("actline.llm.fake_openai")

PATH = "/v1/chat/completions"
FailureKind = Literal["rate_limit", "server_error", "context_length", "dropped"]
FAILURES: Mapping[str, tuple[int, str, str, str | None]] = {
    "rate_limit": (
        429,
        "requests",
        "Rate limit reached for requests per min: please try again in 1s.",
        "rate_limit_exceeded",
    ),
    "server_error": (
        500,
        "server_error",
        "The server had an error while processing your request. Sorry about that!",
        None,
    ),
    # "context_length" and "dropped" are answered in place (their shapes depend on the request)
}
FAILURE_KINDS = ("rate_limit", "server_error", "context_length", "dropped")
MIDSTREAM_DELTAS = 2
"""Deltas sent before an injected dropped stream closes the connection."""
RETRY_AFTER = "1"
"""The ``retry-after`` of an injected 429, in seconds."""


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
    error_code: str | None = None
    """The error's ``code`` (or ``type`` when it has no code); None for a reply."""
    usage: Usage | None = None
    """The usage accounted (output tokens as far as the reply got)."""
    cached_tokens: int = 0
    finish_reason: str | None = None
    disconnected: bool = False


@dataclass(slots=True)
class _Exchange:
    """One accepted request while its reply is produced."""

    request_id: str
    http: HttpRequest
    body: Mapping[str, Any]
    request: GenerateRequest
    prompt_tokens: int
    cached: int
    failure: str | None = None
    parts: list[str] = field(default_factory=list)
    finish_reason: str = "stop"
    sent_all: bool = False
    recorded: bool = False

    @property
    def model(self) -> str:
        return str(self.body["model"])

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def include_usage(self) -> bool:
        options = self.body.get("stream_options") or {}
        return bool(options.get("include_usage"))

    @property
    def max_tokens(self) -> int | None:
        limit = self.body.get("max_completion_tokens") or self.body.get("max_tokens")
        return int(limit) if limit is not None else None

    @property
    def stop(self) -> tuple[str, ...]:
        """The request's stop sequences (``stop``: a string or a list)."""
        stop = self.body.get("stop")
        return (stop,) if isinstance(stop, str) else tuple(stop or ())

    @property
    def output_tokens(self) -> int:
        return DEFAULT_COUNTER.count("".join(self.parts))


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


async def _close_iterator(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


class FakeOpenAIServer(LocalServer):
    """The local Chat Completions API; use ``async with`` or ``run_in_thread()``.

    ``base_url`` includes ``/v1``, as the ``openai`` client expects. ``context_window``
    (tokens) refuses longer prompts with the API's ``context_length_exceeded``.
    """

    name = "fake openai server"

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        report_cached: bool = False,
        cache_slots: int = 4,
        context_window: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(host, port)
        self.policy: Policy = policy or EchoPolicy()
        self.report_cached = report_cached
        self.cache = PrefixCache(cache_slots)
        self.requests: list[RequestRecord] = []
        self.disconnects = 0
        """Replies abandoned because the client closed the connection."""
        self.disconnected = asyncio.Event()
        """Set at each disconnect, once the policy's iterator is closed."""
        self._context_window = context_window
        self._clock = clock
        self._failures: deque[str] = deque()

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}/v1"

    def fail_next(self, kind: FailureKind, times: int = 1) -> None:
        """Fail the next ``times`` valid requests with ``kind``; queued kinds run in order.

        ``dropped`` sends a few deltas of a streamed reply then closes the connection
        without ending the body (a non-streamed request's connection closes unanswered).
        """
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}; expected one of {FAILURE_KINDS}")
        self._failures.extend([kind] * times)

    async def _refuse(self, conn: Connection, message: str) -> None:
        await self._send_error(conn, _new_id("req"), api.ApiError(400, message))

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
        headers += [("x-request-id", request_id), ("connection", conn.connection), *extra]
        await conn.send(response_head(status, headers) + data)

    async def _send_error(self, conn: Connection, request_id: str, error: api.ApiError) -> None:
        extra = [("retry-after", RETRY_AFTER)] if error.status == 429 else []
        await self._send_json(conn, request_id, error.status, error.body(), extra)

    async def _handle(self, conn: Connection, http: HttpRequest) -> bool:
        """Answer one request; False when the connection must close."""
        request_id = _new_id("req")
        path = http.target.split("?", 1)[0]
        body: Any = None

        async def refuse(error: api.ApiError) -> bool:
            stream = isinstance(body, dict) and body.get("stream") is True
            code = error.code or error.error_type
            record = RequestRecord(
                request_id, http.method, path, http.headers, body, error.status, stream, code
            )
            self.requests.append(record)
            logger.info("%s %s %s -> %d %s", request_id, http.method, path, error.status, code)
            await self._send_error(conn, request_id, error)
            return True

        if http.method != "POST" or path != PATH:
            message = f"Invalid URL ({http.method} {path})"
            return await refuse(api.ApiError(404, message, code="unknown_url"))
        bearer = http.headers.get("authorization", "")
        if not (bearer.lower().startswith("bearer ") and bearer[7:].strip()):
            message = "You didn't provide an API key. Provide it in an Authorization header."
            return await refuse(api.ApiError(401, message))
        try:
            body = json.loads(http.body)
        except ValueError:
            return await refuse(
                api.ApiError(400, "We could not parse the JSON body of your request.")
            )
        try:
            api.validate_body(body)
        except api.ApiError as exc:
            return await refuse(exc)
        prompt = prompt_text(body)
        tokens = prompt_tokens(prompt)
        failure = self._failures.popleft() if self._failures else None
        window = self._context_window
        if failure == "context_length" or (window is not None and tokens > window):
            limit = window if window is not None else max(1, tokens - 1)
            message = (
                f"This model's maximum context length is {limit} tokens. However, your "
                f"messages resulted in {max(tokens, limit + 1)} tokens. Please reduce the "
                "length of the messages."
            )
            error = api.ApiError(400, message, param="messages", code="context_length_exceeded")
            return await refuse(error)
        if failure is not None and failure in FAILURES:
            status, error_type, message, code = FAILURES[failure]
            return await refuse(api.ApiError(status, message, error_type, code=code))
        if failure == "dropped" and body.get("stream") is not True:
            self.requests.append(
                RequestRecord(
                    request_id, http.method, path, http.headers, body, 0, False, "dropped"
                )
            )
            return False
        cached = self.cache.cached(prompt)
        self.cache.store(prompt)
        exchange = _Exchange(
            request_id, http, body, from_chat_params(body), tokens, cached, failure
        )
        produce = self._produce_stream if exchange.stream else self._produce_json
        disconnected = await self._race_peer(conn, produce(conn, exchange), exchange)
        if disconnected:
            self._record(exchange, disconnected=True)
            self.disconnects += 1
            self.disconnected.set()
        return not disconnected and failure != "dropped"

    def _usage_body(self, exchange: _Exchange) -> dict[str, Any]:
        cached = exchange.cached if self.report_cached else None
        return api.usage_body(exchange.prompt_tokens, exchange.output_tokens, cached)

    def _record(self, exchange: _Exchange, *, disconnected: bool = False) -> None:
        """Keep the record of an accepted request; called before its last bytes are sent,
        so a client that has the whole reply always finds the record."""
        if exchange.recorded:
            return
        exchange.recorded = True
        cached = exchange.cached if self.report_cached else 0
        usage = Usage(
            input_tokens=exchange.prompt_tokens - cached,
            output_tokens=exchange.output_tokens,
            cache_read_tokens=cached,
            model=exchange.model,
            request_id=exchange.request_id,
        )
        dropped = exchange.failure == "dropped"
        http = exchange.http
        self.requests.append(
            RequestRecord(
                exchange.request_id,
                http.method,
                http.target.split("?", 1)[0],
                http.headers,
                exchange.body,
                200,
                exchange.stream,
                "dropped" if dropped else None,
                usage,
                exchange.cached,
                None if dropped or disconnected else exchange.finish_reason,
                disconnected,
            )
        )
        logger.info(
            "%s %s stream=%s -> prompt=%d cached=%d completion=%d finish=%s disconnected=%s",
            exchange.request_id,
            exchange.model,
            exchange.stream,
            exchange.prompt_tokens,
            exchange.cached,
            usage.output_tokens,
            exchange.finish_reason,
            disconnected,
        )

    async def _policy_text(
        self, exchange: _Exchange, emit: Callable[[str], Coroutine[Any, Any, None]] | None
    ) -> None:
        """Run the policy, collecting its text up to ``max_tokens`` (and emitting each
        chunk when streaming); a cut sets ``finish_reason`` to ``length``."""
        iterator = self.policy.stream(exchange.request)
        limit = ReplyLimit(exchange.max_tokens, exchange.stop)
        try:
            async for chunk in iterator:
                if isinstance(chunk, Usage) or not chunk:
                    continue
                await limit.send(exchange.parts, limit.feed(chunk), emit)
                if limit.cut is not None:
                    break
                if exchange.failure == "dropped" and len(exchange.parts) >= MIDSTREAM_DELTAS:
                    break
            else:
                await limit.send(exchange.parts, limit.finish(), emit)
        finally:
            await _close_iterator(iterator)
        if limit.cut == "max_tokens":
            exchange.finish_reason = "length"

    async def _produce_json(self, conn: Connection, exchange: _Exchange) -> None:
        try:
            await self._policy_text(exchange, None)
        except ConnectionError:
            raise
        except Exception as exc:
            logger.exception("%s policy failed", exchange.request_id)
            error = api.ApiError(500, f"policy failed: {type(exc).__name__}", "server_error")
            self._record(exchange)
            await self._send_error(conn, exchange.request_id, error)
            exchange.sent_all = True
            return
        body = api.completion(
            _new_id("chatcmpl"),
            int(self._clock()),
            exchange.model,
            "".join(exchange.parts),
            exchange.finish_reason,
            self._usage_body(exchange),
        )
        self._record(exchange)
        await self._send_json(conn, exchange.request_id, 200, body)
        exchange.sent_all = True

    async def _produce_stream(self, conn: Connection, exchange: _Exchange) -> None:
        headers = [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-cache"),
            ("transfer-encoding", "chunked"),
            ("x-request-id", exchange.request_id),
            ("connection", conn.connection),
        ]
        ident, created, model = _new_id("chatcmpl"), int(self._clock()), exchange.model
        with_usage = exchange.include_usage

        def event(delta: Mapping[str, Any] | None, **kw: Any) -> bytes:
            return api.sse(
                api.chunk_body(ident, created, model, delta, with_usage=with_usage, **kw)
            )

        await conn.send(response_head(200, headers) + event({"role": "assistant", "content": ""}))

        async def emit(text: str) -> None:
            await conn.send(event({"content": text}))

        try:
            await self._policy_text(exchange, emit)
        except ConnectionError:
            raise
        except Exception as exc:
            logger.exception("%s policy failed mid-stream", exchange.request_id)
            error = api.ApiError(500, f"policy failed: {type(exc).__name__}", "server_error")
            self._record(exchange)
            conn.writer.write(api.sse(error.body()) + api.sse("[DONE]") + LAST_CHUNK)
            exchange.sent_all = True
            await conn.writer.drain()
            return
        if exchange.failure == "dropped":
            self._record(exchange)
            exchange.sent_all = True
            conn.keep_alive = False
            conn.writer.close()  # mid-body: the chunked body never ends
            return
        tail = event({}, finish_reason=exchange.finish_reason)
        if with_usage:
            tail += event(None, usage=self._usage_body(exchange))
        self._record(exchange)
        conn.writer.write(tail + api.sse("[DONE]") + LAST_CHUNK)
        exchange.sent_all = True
        await conn.writer.drain()
