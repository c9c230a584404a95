"""The StreamerActor pool: model calls, channel parsing, fanout of deltas to clients.

A ``GenerateRequest`` on ``al.llm.generate`` (queue group ``streamers``), or a ``call``
from a decision loop of the same node, is one model call. The streamer runs the model,
feeds its text through ``channels.ChannelStream`` (citations resolved against the
request's sources in what clients see, never in the raw text), publishes every
client-facing delta as ``stream.delta`` on ``al.stream.<conversation_id>`` as it
becomes safe, and answers with a ``GenerateResult``: the raw text of each channel,
the SIDs the answer cited, and the usage. The decision channel is not streamed to
clients; it is the loop's own business.

Canvas: the model's ``<channel:canvas>`` JSON object reaches clients key by key, never as
raw JSON text: each top-level string value streams as ``stream.delta`` deltas with
``key`` (its format, citations resolved, ``replace`` on the key's first delta, a
``completed`` delta at its end); a value that is not a string (an object, a list, a
number) goes whole as pretty JSON when the stream ends, and a canvas that is not a JSON
object goes whole under the key ``canvas``. ``subscribers`` (``channels.ChannelSubscribers``,
also ``StreamerActor.subscribers``) get every delta of every call of this node in
process, keyed ones included, before anything is published.

Unresolved citations: a SID with no source in the request's pool shows as ``[?<sid>]``
in what clients see (``actline.channels.citations``); the channel's (or canvas key's)
``completed`` delta lists them in ``unresolved``, the result in ``unresolved_sources``,
and ``actline.actors.turn.displays.unresolved_notices`` makes the notice the decision loop records
for the model's next round.

A context rendered on this node never crosses the wire: the decision loop calls its
own node's streamer in process (``call``; a 5,000-block context is megabytes of
msgpack), and only a node without streamers sends the whole request to the pool. The
deltas go to clients over NATS either way.

Model failures are results, not exceptions: ``error_code`` is ``model_unavailable``
(retries spent), ``context_window`` (the caller re-renders with compaction),
``model_stream`` (failed after text was delivered), ``model_request`` (a 4xx),
``model_config`` or ``model_error``. A ``react.cancel`` on ``al.llm.cancel`` stops
the calls of that turn.

The pool is one subscription with bounded concurrency per node rather than N
single-task actors: NATS queue groups pick a member at random, and a long model
call would block whatever was queued behind it. With ``max_waiting`` (a pool process,
``actline pool models``) at most that many calls wait for a slot past the ``concurrency``
running; a call past both is answered at once with ``ErrorReply(code="busy")``
(``actline.actors.pools.admission``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, Final

from actline.actors.pools.admission import BUSY, Admission
from actline.actors.tracing import diag
from actline.actors.tracing.spans import Tracer
from actline.bus import Bus, Envelope, Subscription
from actline.channels import (
    ChannelDelta,
    ChannelSpec,
    ChannelStream,
    ChannelSubscribers,
    strip_fence,
)
from actline.llm.errors import (
    ContextWindowExceeded,
    ModelConfigError,
    ModelError,
    ModelRequestError,
    ModelStreamError,
    ModelUnavailable,
)
from actline.llm.protocol import Completion, Model, complete, opened
from actline.llm.repetition import RepetitionGuard
from actline.messages import (
    CancelReAct,
    ErrorReply,
    GenerateRequest,
    GenerateResult,
    Message,
    StreamDelta,
    Usage,
)
from actline.messages.base import TOKEN_FIELDS

log = logging.getLogger(__name__)

CHANNEL_SPECS: Final = (
    ChannelSpec("thinking", "markdown", replace_citations=False),
    ChannelSpec("decision", "json", replace_citations=False),
    ChannelSpec("answer", "markdown"),
    ChannelSpec("followup", "json", replace_citations=False),
    ChannelSpec("canvas", "json", composite={"*": "markdown"}),
    ChannelSpec("usage", "json", replace_citations=False),
)
"""The channels of the decision protocol."""
PRIVATE_CHANNELS: Final = frozenset({"decision"})
"""Channels never streamed to clients."""
KEYED_CHANNELS: Final = frozenset(s.name for s in CHANNEL_SPECS if s.composite is not None)
"""Channels that reach clients only key by key (``stream.delta`` with ``key``)."""
WHOLE_CANVAS_KEY: Final = "canvas"
"""The key of a canvas that is not a JSON object (sent whole)."""

ModelResolver = Callable[[str], Model]
"""The model a request names (``actline.actors.configuration.models.NodeModels``);
``ModelConfigError`` when this node cannot serve it (the call fails with ``model_config``, never
another model)."""


class StreamerActor:
    """One node's model-call pool; ``await start()`` subscribes, ``await stop()`` ends."""

    QUEUE = "streamers"

    def __init__(
        self,
        bus: Bus,
        models: ModelResolver,
        *,
        concurrency: int = 32,
        timeout_s: float = 600.0,
        tracer: Tracer | None = None,
        subscribers: ChannelSubscribers | None = None,
        max_waiting: int | None = None,
    ) -> None:
        """``subscribers``: in-process handlers of every call's channel deltas (module
        docstring); add more later through ``self.subscribers``. ``max_waiting``: calls
        over the wire that may wait for a slot, the rest refused as busy (None: no bound)."""
        self.bus = bus
        self.subscribers = subscribers if subscribers is not None else ChannelSubscribers()
        self.tracer = tracer or Tracer()
        self.models = models
        self.concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self.admission = None if max_waiting is None else Admission(concurrency, max_waiting)
        self.timeout_s = timeout_s
        self.calls = 0
        self.failures = 0
        self._subs: list[Subscription] = []
        self._running: dict[str, set[asyncio.Task[Any]]] = {}

    async def start(self) -> None:
        if self._subs:
            return
        subjects = self.bus.subjects
        self._subs.append(
            await self.bus.subscribe(
                subjects.llm_generate,
                self._on_generate,
                queue=self.QUEUE,
                concurrency=(
                    self.concurrency
                    if self.admission is None
                    else self.admission.subscription_concurrency
                ),
            )
        )
        self._subs.append(await self.bus.subscribe(subjects.llm_cancel, self._on_cancel))

    async def stop(self) -> None:
        subs, self._subs = self._subs, []
        for sub in subs:
            await sub.unsubscribe()

    # -- handlers ---------------------------------------------------------------------------
    async def _on_cancel(self, msg: Message, env: Envelope) -> None:
        if not isinstance(msg, CancelReAct):
            return
        for task in list(self._running.get(msg.turn_id, ())):
            task.cancel()

    async def _on_generate(self, msg: Message, env: Envelope) -> Message:
        if not isinstance(msg, GenerateRequest):
            return ErrorReply(
                code="unexpected_message",
                message=f"the streamers take llm.generate, not {msg.kind}",
                subject=env.subject,
            )
        admission = self.admission
        if admission is None:
            return await self._served(msg, env)
        if not admission.admit():
            return ErrorReply(code=BUSY, message=admission.busy(), subject=env.subject)
        async with admission.slot():
            return await self._served(msg, env)

    async def _served(self, msg: GenerateRequest, env: Envelope) -> GenerateResult:
        with self.tracer.remote("streamer", env.headers, msg.turn_id, round=msg.round) as span:
            result = await (self._quiet(msg) if msg.quiet else self._guarded(msg))
            if span is not None:  # the served call, as a child of the turn's model span
                u = result.usage
                span.attrs.update(model=u.model, error_code=result.error_code or "")
                span.attrs.update(input_tokens=u.input_tokens, output_tokens=u.output_tokens)
            return result

    async def call(self, request: GenerateRequest) -> GenerateResult:
        """One model call for a decision loop of this node, in process (no copy of the
        context on the wire); at most ``concurrency`` at once, as on the subscription."""
        async with self._slots:
            # In the caller's task: the caller cancels it directly (al.llm.cancel is for
            # calls that came over the wire).
            return await self.generate(request)

    async def complete(self, request: GenerateRequest, model: Model | None = None) -> Completion:
        """One model call (``model``, else the one ``request.model`` names) run to the end
        without streaming anything to clients (compaction summaries): its text and usage;
        a ``ModelError`` or ``TimeoutError`` raises."""
        model = model or self.models(request.model)
        async with self._slots, asyncio.timeout(self.timeout_s):
            self.calls += 1
            return await complete(model, request)

    async def _quiet(self, request: GenerateRequest) -> GenerateResult:
        """``complete`` for a caller across the bus: the whole text in ``raw``; a failure is
        a result with its code (``model_error``, ``timeout``, ``model_config``)."""
        try:
            done = await self.complete(request)
        except ModelConfigError as exc:
            return self._failed(request, "model_config", str(exc))
        except TimeoutError:
            return self._failed(request, "timeout", f"no answer within {self.timeout_s:g}s")
        except ModelError as exc:
            return self._failed(request, "model_error", str(exc))
        return GenerateResult(
            conversation_id=request.conversation_id,
            turn_id=request.turn_id,
            round=request.round,
            raw=done.text,
            usage=done.usage,
        )

    async def _guarded(self, request: GenerateRequest) -> GenerateResult:
        """``generate`` registered for ``al.llm.cancel`` of its turn."""
        task = asyncio.current_task()
        assert task is not None
        running = self._running.setdefault(request.turn_id, set())
        running.add(task)
        try:
            return await self.generate(request)
        except asyncio.CancelledError:
            if task.cancelling():
                # cancelled through al.llm.cancel: the caller gets a result saying so
                task.uncancel()
                return self._failed(request, "cancelled", "the model call was cancelled")
            raise
        finally:
            running.discard(task)
            if not running:
                self._running.pop(request.turn_id, None)

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Run one model call, streaming its deltas; failures come back as results."""
        started = diag.model_request(request)
        result = await self._generate(request)
        diag.model_result(result, started)
        return result

    async def _generate(self, request: GenerateRequest) -> GenerateResult:
        self.calls += 1
        try:
            model = self.models(request.model)
        except ModelConfigError as exc:
            return self._failed(request, "model_config", str(exc))
        parser = ChannelStream(
            CHANNEL_SPECS, sources=request.sources, subscribers=self.subscribers or None
        )
        seq = request.seq_start
        usage = Usage(model=model.name)
        subject = self.bus.subjects.stream(request.conversation_id)
        spoke: set[str] = set()
        """Channels that streamed text in this call: only they get a completion delta."""
        keys: set[str] = set()
        """Canvas keys streamed in this call."""
        unresolved: dict[str, list[int]] = {}
        """Channel -> its unresolved SIDs, for its completion delta (known at the end)."""

        async def emit(deltas: list[ChannelDelta]) -> None:
            nonlocal seq
            for delta in deltas:
                if delta.channel in PRIVATE_CHANNELS:
                    continue
                extra: dict[str, Any] = {}
                if delta.key is not None:
                    keys.add(delta.key)
                    extra = {"key": delta.key, "format": delta.format}
                    extra["replace"] = delta.index == 0
                    if delta.completed:
                        extra["unresolved"] = parser.key_unresolved(delta.channel, delta.key)
                elif delta.channel in KEYED_CHANNELS:
                    continue
                elif delta.text:
                    spoke.add(delta.channel)
                elif not delta.completed or delta.channel not in spoke:
                    continue
                elif delta.channel in unresolved:
                    extra["unresolved"] = unresolved[delta.channel]
                await self.bus.publish(
                    subject,
                    StreamDelta(
                        conversation_id=request.conversation_id,
                        turn_id=request.turn_id,
                        channel=delta.channel,
                        text=delta.text,
                        seq=seq,
                        round=request.round,
                        completed=delta.completed,
                        **extra,
                    ),
                )
                seq += 1

        guard = RepetitionGuard()
        try:
            async with asyncio.timeout(self.timeout_s):
                async with opened(model.stream(request)) as stream:
                    async for piece in stream:
                        if isinstance(piece, Usage):
                            usage = piece
                            continue
                        await emit(parser.feed(piece))
                        if guard.feed(piece):  # closing the stream stops the server
                            usage = looped(model.name, guard)
                            break
        except ContextWindowExceeded as exc:
            return self._failed(request, "context_window", str(exc), seq)
        except ModelUnavailable as exc:
            return self._failed(request, "model_unavailable", str(exc), seq)
        except ModelStreamError as exc:
            return self._failed(request, "model_stream", str(exc), seq)
        except ModelRequestError as exc:
            return self._failed(request, "model_request", str(exc), seq)
        except ModelConfigError as exc:
            return self._failed(request, "model_config", str(exc), seq)
        except TimeoutError:
            message = f"no complete answer within {self.timeout_s:g} s"
            return self._failed(request, "model_timeout", message, seq)
        except ModelError as exc:
            return self._failed(request, "model_error", str(exc), seq)
        finished = parser.finish()
        result = parser.result
        for name, channel in result.channels.items():
            if channel.unresolved_sources:
                unresolved[name] = list(channel.unresolved_sources)
        await emit(finished)
        await emit(whole_canvas(result["canvas"].raw, result["canvas"].obj, keys))
        channels = {name: r.raw for name, r in result.channels.items() if r.declared or r.raw}
        cited_missing = set(result["answer"].unresolved_sources).union(
            *result["canvas"].key_unresolved.values()
        )
        return GenerateResult(
            conversation_id=request.conversation_id,
            turn_id=request.turn_id,
            round=request.round,
            channels=channels,
            raw="",
            usage=usage,
            notices=[f"{n.code}: {n.message}" for n in result.notices],
            used_sources=sorted({*result["answer"].used_sources, *result["canvas"].used_sources}),
            unresolved_sources=sorted(cited_missing),
            answer_emitted=result["answer"].emitted,
            seq_end=seq,
        )

    def _failed(
        self, request: GenerateRequest, code: str, message: str, seq: int | None = None
    ) -> GenerateResult:
        self.failures += 1
        log.warning(
            "model call failed: %s conversation=%s turn=%s round=%d",
            code,
            request.conversation_id,
            request.turn_id,
            request.round,
        )
        return failed_result(request, code, message, seq)


def looped(model: str, guard: RepetitionGuard) -> Usage:
    """The usage of a reply stopped in a loop: the server never reported its tokens."""
    log.warning("model %s repeated a %d-character unit: its reply was stopped", model, guard.period)
    return Usage(model=model, unknown=sorted(TOKEN_FIELDS), stop_reason="repetition")


def failed_result(
    request: GenerateRequest, code: str, error: str, seq: int | None = None
) -> GenerateResult:
    """The result of a model call that failed with ``code`` (no channels, no usage)."""
    return GenerateResult(
        conversation_id=request.conversation_id,
        turn_id=request.turn_id,
        round=request.round,
        error=error,
        error_code=code,
        seq_end=request.seq_start if seq is None else seq,
    )


def whole_canvas(raw: str, obj: Any, streamed: set[str]) -> list[ChannelDelta]:
    """The canvas parts no key delta carried, as keyed deltas sent whole at the end: each
    top-level value that is not a string (pretty JSON), or a canvas that is not a JSON
    object (under ``WHOLE_CANVAS_KEY``: JSON when it parses, else its text)."""
    parts: list[tuple[str, str, str]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(value, str) and key not in streamed:
                parts.append((key, "json", json.dumps(value, indent=2, ensure_ascii=False)))
    elif raw.strip() and not streamed:
        body = strip_fence(raw).strip()
        parts.append((WHOLE_CANVAS_KEY, "text" if obj is None else "json", body))
    deltas: list[ChannelDelta] = []
    for key, fmt, text in parts:
        deltas.append(ChannelDelta("canvas", text, 0, "canvas", fmt, False, key))
        deltas.append(ChannelDelta("canvas", "", 1, "canvas", fmt, True, key))
    return deltas
