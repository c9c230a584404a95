"""What a turn's trace records, called from the DecisionActor (``actline.actors.tracing.spans``).

Spans under the root ``turn``: ``round`` (one per model round) and under it ``render``
(context tokens, blocks; a ``compaction`` child when one ran in the render), ``model``
(model, tokens in and out, cache read and write, the error code), ``persist`` (the round's
commit until it is durable), ``tool`` (tool, status, result bytes), ``commit`` (the commit
before a wait) and ``wait`` (the agents, how it ended: done, skip, timeout, cancel).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from actline.actors.tracing import diag
from actline.actors.tracing.spans import TRACEPARENT, Span, TraceSession, result_size, using
from actline.messages import GenerateResult, ReActResult, Usage

from . import events as ev
from .mailbox import ExternalRan, ReactRan, Rendered
from .state import DecisionState, TurnPhase

_WAIT_ENDS: dict[type, str] = {
    ev.DoneSignal: "done",
    ev.SkipWaiting: "skip",
    ev.WaitTimeout: "timeout",
    ev.CancelReAct: "cancel",
}


class TurnTrace:
    """One turn's session and its open spans."""

    def __init__(self, session: TraceSession, conversation_id: str = "") -> None:
        self.session = session
        self.conversation_id = conversation_id
        self.rounds: dict[int, Span] = {}
        self.round_span: Span | None = None
        self.persist: dict[int, Span] = {}
        self.tool_spans: dict[str, Span] = {}
        self.wait_span: Span | None = None
        self.renders: dict[int, Span] = {}

    def round(self, round_: int) -> None:
        self.session.end(self.round_span)
        self.round_span = self.rounds[round_] = self.session.start("round", round=round_)

    @contextlib.contextmanager
    def step(self, name: str, round_: int, **attrs: Any) -> Iterator[Span]:
        """A span under the round, current inside the block (a request carries it)."""
        span = self.session.start(name, self.rounds.get(round_), round=round_, **attrs)
        if name == "render":
            self.renders[round_] = span
        status = "error"
        try:
            with using(span):
                yield span
            status = "ok" if span.status == "ok" else span.status
        finally:
            self.session.end(span, status)

    @staticmethod
    def rendered(span: Span, rendered: Rendered) -> None:
        stats = rendered.stats
        span.attrs.update(context_tokens=stats.tokens, blocks=stats.blocks)
        if stats.compacted:
            span.attrs["compacted"] = True

    def persisting(self, round_: int) -> None:
        """The conversation started the round's commit (``durable`` ends it)."""
        self.persist[round_] = self.session.start("persist", self.rounds.get(round_), round=round_)

    def compaction(self, round_: int, began: float, usage: Usage | None) -> None:
        """The conversation compacted in a render that began at ``began`` (summaries
        written by the model cost ``usage``)."""
        span = self.session.start("compaction", self.renders.get(round_), round=round_)
        span.start = began
        self.session.end(
            span,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
        )

    @staticmethod
    def generated(span: Span, result: GenerateResult) -> None:
        u = result.usage
        span.attrs.update(
            model=u.model,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_5m_tokens + u.cache_write_1h_tokens,
        )
        if result.error_code:
            span.status = "error"
            span.attrs["error_code"] = result.error_code

    def durable(self, round_: int, error: str = "") -> None:
        span = self.persist.pop(round_, None)
        self.session.end(span, "error" if error else "ok")

    def tools(self, round_: int, calls: Sequence[ev.ToolSpec]) -> None:
        """A round's calls start: a span each, and the ``AI-FnCall`` log line."""
        diag.tool_calls(self.conversation_id, self.session.turn_id, round_, calls)
        for c in calls:
            self.tool_spans[c.call_id] = self.session.start(
                "tool", self.rounds.get(round_), round=round_, tool=c.tool, call_id=c.call_id
            )

    def headers(self, call_id: str) -> dict[str, str] | None:
        span = self.tool_spans.get(call_id)
        return None if span is None else {TRACEPARENT: span.traceparent}

    def tools_ran(self, ran: ReactRan | ExternalRan, react: Sequence[ev.ToolSpec]) -> None:
        """Calls that finished (the react.* outcomes are in the order of ``react``)."""
        done: list[tuple[str, bool, object]]
        if isinstance(ran, ReactRan):
            done = [(c.call_id, o.ok, o.result) for c, o in zip(react, ran.outcomes, strict=False)]
        else:
            done = [(o.call_id, o.ok, o.data) for o in ran.outcomes]
        for call_id, ok, data in done:
            span = self.tool_spans.pop(call_id, None)
            if span is not None:
                status = "ok" if ok else "error"
                self.session.end(span, status, result_bytes=result_size(data))

    def wait(self, state: DecisionState) -> None:
        self.session.end(self.wait_span)
        agents = sorted({t.agent for t in state.awaited})
        self.wait_span = self.session.start(
            "wait", self.rounds.get(state.round), round=state.round, agents=",".join(agents)
        )

    def fed(self, event: ev.Event, state: DecisionState) -> None:
        """After a transition: a wait that ended records how."""
        if self.wait_span is None or state.phase is TurnPhase.WAITING:
            return
        how = _WAIT_ENDS.get(type(event), type(event).__name__)
        self.session.end(self.wait_span, ended=how)
        self.wait_span = None

    def finish(self, result: ReActResult | None, how: str) -> None:
        if result is None:
            self.session.finish("error", ended=how)
            return
        u = result.usage
        self.session.finish(
            "ok" if result.status == "completed" else "error",
            ended=result.status,
            rounds=result.rounds,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_5m_tokens + u.cache_write_1h_tokens,
        )
