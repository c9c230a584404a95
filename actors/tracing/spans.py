"""Trace sessions: one per turn, a tree of timed spans, exported to sinks when it ends.

A ``Span`` has W3C ids (a 32-hex trace id, a 16-hex span id), a parent, a start and an
end from the tracer's clock, attributes, a status and events (named moments with
attributes of their own, timed by the same clock). A ``TraceSession`` is one turn's
spans under its root ``turn`` span; ``TurnTrace`` is what the DecisionActor calls (a
round, the render, the model call, each tool call, a wait for outside agents, the
persist of a round). The span of the code running now is in a context variable, so a
request on the bus carries it as a ``traceparent`` header (``headers()``) and the
streamer or tool executor that serves it, on any node, records its span as a child
(``Tracer.remote``).

Sinks (``actline.actors.tracing.sinks``) run off the event loop, after the turn, on one worker
thread at a time: sessions that end while an export runs wait and go to the sinks
together in the next one (a busy node hands its sinks batches, not one thread hop per
turn). A sink that raises never fails the turn: the session's status becomes
``partial`` (success plus a sink failure) and the other sinks still
get it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

KEPT_STATUSES = 10_000
"""How many turns' session statuses a tracer keeps (``Tracer.sessions``)."""

TRACEPARENT = "traceparent"


@dataclass(slots=True)
class Span:
    """One timed piece of work (times in seconds from the tracer's clock)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: float
    end: float | None = None
    status: str = "ok"
    """``ok`` or ``error``."""
    attrs: dict[str, Any] = field(default_factory=dict)
    node: str = ""
    turn_id: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Things that happened at one moment of the span: ``{"name", "ts", "attrs"}`` each,
    ``ts`` from the tracer's clock (``add_event``)."""
    clock: Callable[[], float] | None = field(default=None, repr=False, compare=False)
    """The tracer's clock, for the time of an event (None: ``time.time``)."""

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-01"

    def add_event(self, name: str, attrs: Mapping[str, Any], ts: float | None = None) -> None:
        """Record that ``name`` happened now (or at ``ts``, on the tracer's clock), with
        ``attrs`` (kept as given; the OpenTelemetry sink turns non-scalars into strings)."""
        if ts is None:
            ts = (self.clock or time.time)()
        self.events.append({"name": name, "ts": ts, "attrs": dict(attrs)})

    def record(self) -> dict[str, Any]:
        """The span as one JSON object (a JSONL line)."""
        end = self.start if self.end is None else self.end
        return {
            "type": "span",
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_id": self.parent_id,
            "name": self.name,
            "turn_id": self.turn_id,
            "node": self.node,
            "start": self.start,
            "end": end,
            "duration_ms": round((end - self.start) * 1000.0, 3),
            "status": self.status,
            "attrs": self.attrs,
            "events": self.events,
        }


def new_trace_id() -> str:
    """A W3C trace id: 128 random bits, never all zero. Ids need uniqueness, not secrecy:
    ``random`` (seeded from the OS, reseeded in a forked child), as OpenTelemetry's
    ``RandomIdGenerator`` does; ``secrets`` cost a system call per span."""
    return f"{random.getrandbits(128) or 1:032x}"


def new_span_id() -> str:
    """A W3C span id: 64 random bits, never all zero (``new_trace_id``)."""
    return f"{random.getrandbits(64) or 1:016x}"


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """``(trace_id, parent span id)`` of a W3C ``traceparent``, None when absent or malformed."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    if parts[1] == "0" * 32 or parts[2] == "0" * 16:
        return None
    return parts[1], parts[2]


_CURRENT: ContextVar[Span | None] = ContextVar("actline_span", default=None)


def current() -> Span | None:
    """The span of the code running now (None outside a traced turn)."""
    return _CURRENT.get()


def headers() -> dict[str, str] | None:
    """The ``traceparent`` header of the current span, for a request on the bus."""
    span = _CURRENT.get()
    return None if span is None else {TRACEPARENT: span.traceparent}


@contextlib.contextmanager
def using(span: Span | None) -> Iterator[Span | None]:
    """Make ``span`` the current one inside the block."""
    token = _CURRENT.set(span)
    try:
        yield span
    finally:
        _CURRENT.reset(token)


class Sink(Protocol):
    """Where finished spans go. Both run in a worker thread; raising makes the session
    ``partial``."""

    def export(self, spans: Sequence[Span]) -> None: ...

    def session(self, record: Mapping[str, Any]) -> None: ...


class Tracer:
    """A node's sinks and clock; hands out turn sessions and the spans of served requests."""

    def __init__(
        self,
        sinks: Sequence[Sink] = (),
        *,
        node: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sinks = list(sinks)
        self.node = node
        self.clock = clock
        self.sessions: dict[str, str] = {}
        """Turn id -> the status its last session ended with (``ok``/``error``/``partial``),
        for the newest ``KEPT_STATUSES`` turns (a node runs for months)."""
        self._unsent: list[tuple[list[Span], dict[str, Any] | None]] = []
        """Ended sessions and served spans waiting for the exporter."""
        self._exporter: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.sinks)

    def span(
        self, name: str, trace_id: str, parent_id: str | None, turn_id: str = "", **attrs: Any
    ) -> Span:
        return Span(
            trace_id, new_span_id(), parent_id, name, self.clock(), None, "ok", attrs,
            self.node, turn_id, clock=self.clock,
        )  # fmt: skip

    @contextlib.contextmanager
    def remote(
        self, name: str, carrier: Mapping[str, str], turn_id: str = "", **attrs: Any
    ) -> Iterator[Span | None]:
        """A span for serving a request whose headers carry a ``traceparent`` (None and
        nothing recorded when they carry none or no sink is on); exported when it ends."""
        parent = parse_traceparent(carrier.get(TRACEPARENT))
        if parent is None or not self.sinks:
            yield None
            return
        span = self.span(name, parent[0], parent[1], turn_id, **attrs)
        try:
            with using(span):
                yield span
        except Exception:  # a cancelled request ends its span with the status it had
            span.status = "error"
            raise
        finally:
            span.end = self.clock()
            self._submit([span], None)

    def session(self, turn_id: str, conversation_id: str) -> TraceSession:
        return TraceSession(self, turn_id, conversation_id)

    def _submit(self, spans: list[Span], session: dict[str, Any] | None) -> None:
        if not self.sinks:
            return
        self._unsent.append((spans, session))
        if self._exporter is None or self._exporter.done():
            self._exporter = asyncio.get_running_loop().create_task(self._export())

    async def _export(self) -> None:
        while self._unsent:
            batch = self._unsent
            self._unsent = []
            await asyncio.to_thread(self.export_batch, batch)

    def export_now(self, spans: Sequence[Span], session: dict[str, Any] | None) -> str:
        """Give ``spans`` and then the ``session`` record to every sink; the session's
        status (``partial`` when a sink raised)."""
        return self.export_batch([(spans, session)])[0]

    def export_batch(
        self, batch: Sequence[tuple[Sequence[Span], dict[str, Any] | None]]
    ) -> list[str]:
        """``export_now`` for several sessions at once: every span to each sink in one
        call, then each session record. A sink that raised on the spans makes every
        session of the batch ``partial``. The status of each entry (``ok`` without a
        session)."""
        spans = [span for entry, _ in batch for span in entry]
        failures: list[str] = []
        for sink in self.sinks:
            try:
                sink.export(spans)
            except Exception as exc:
                log.warning("trace sink %s failed: %s", type(sink).__name__, exc)
                failures.append(f"{type(sink).__name__}: {exc}")
        statuses: list[str] = []
        for _, session in batch:
            statuses.append("ok" if session is None else self._session(session, failures))
        return statuses

    def _session(self, session: dict[str, Any], failures: list[str]) -> str:
        if failures:
            session["sink_errors"] = failures
            if session["status"] == "ok":
                session["status"] = "partial"
        for sink in self.sinks:
            try:
                sink.session(session)
            except Exception as exc:
                log.warning("trace sink %s lost the session: %s", type(sink).__name__, exc)
                if session["status"] == "ok":
                    session["status"] = "partial"
        self.sessions.pop(session["turn_id"], None)  # the newest last
        self.sessions[session["turn_id"]] = session["status"]
        while len(self.sessions) > KEPT_STATUSES:
            del self.sessions[next(iter(self.sessions))]
        return str(session["status"])

    async def drain(self) -> None:
        """Wait for the exports in flight and queued (a node stopping)."""
        while self._exporter is not None and not self._exporter.done():
            await asyncio.wait([self._exporter])

    async def aclose(self) -> None:
        """Drain, then close the sinks that hold a file (a node stopping)."""
        await self.drain()
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                close()


class TraceSession:
    """One turn's spans under its root ``turn`` span."""

    def __init__(self, tracer: Tracer, turn_id: str, conversation_id: str) -> None:
        self.tracer = tracer
        self.turn_id = turn_id
        self.root = tracer.span(
            "turn", new_trace_id(), None, turn_id, conversation_id=conversation_id
        )
        self.spans: list[Span] = [self.root]
        self.ended = False

    def start(self, name: str, parent: Span | None = None, **attrs: Any) -> Span:
        span = self.tracer.span(
            name, self.root.trace_id, (parent or self.root).span_id, self.turn_id, **attrs
        )
        self.spans.append(span)
        return span

    def end(self, span: Span | None, status: str = "ok", **attrs: Any) -> None:
        if span is None or span.end is not None:
            return
        span.end = self.tracer.clock()
        span.status = status
        span.attrs.update(attrs)

    def finish(self, status: str, **attrs: Any) -> None:
        """End every open span and the session, and export it (off the loop)."""
        if self.ended:
            return
        self.ended = True
        for span in reversed(self.spans):
            self.end(span, "error" if status == "error" and span is self.root else "ok")
        self.root.attrs.update(attrs)
        record = {
            "type": "session",
            "trace_id": self.root.trace_id,
            "turn_id": self.turn_id,
            "conversation_id": self.root.attrs.get("conversation_id", ""),
            "node": self.tracer.node,
            "status": status,
            "start": self.root.start,
            "end": self.root.end,
            "spans": len(self.spans),
        }
        self.tracer._submit(self.spans, record)


def result_size(data: object) -> int:
    """Bytes of a tool result as JSON (what the span records as its size)."""
    return len(json.dumps(data, default=str, ensure_ascii=False).encode())
