"""What a turn's trace records, called from the DecisionActor (``actline.actors.tracing.spans``).

Spans under the root ``turn`` (rounds, the turn's tokens, ``actline.cost.usd``): ``round``
(one per model round) and under it ``render`` (context tokens, blocks; a ``context.edit``
event per decision of the context policy; a ``compaction`` child when one ran in the
render), ``model`` (model, tokens in and out, cache read and write, the error code,
``actline.cost.usd``, and the OpenTelemetry GenAI attributes:
``actline.actors.tracing.attributes``),
``persist`` (the round's commit until it is durable), ``tool`` (tool, status, result
bytes), ``commit`` (the commit before a wait) and ``wait`` (the agents, how it ended: done,
skip, timeout, cancel).

A model span's own token attributes and its ``actline.cost.usd`` count the compaction
summaries written in the round's render (so the model spans add up to the turn's usage and
cost); its ``gen_ai.usage.*`` attributes are the model call's alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from actline.actors.tracing import diag
from actline.actors.tracing.attributes import (
    CONTEXT_EDIT,
    COST,
    ESTIMATED,
    UNCACHED,
    gen_ai_attributes,
)
from actline.actors.tracing.spans import TRACEPARENT, Span, TraceSession, result_size, using
from actline.llm.pricing import price
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
_TOKENS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
)


def _less(usage: Usage, summaries: Usage | None) -> Usage:
    """``usage`` without the ``summaries``' tokens (the model call's own)."""
    if summaries is None:
        return usage
    update = {k: max(getattr(usage, k) - getattr(summaries, k), 0) for k in _TOKENS}
    return usage.model_copy(update=update)


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
        self.requests: dict[Any, tuple[str, Usage | None]] = {}
        """Round -> the model its render asked for and the summaries' usage it counted."""

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

    def rendered(self, span: Span, rendered: Rendered) -> None:
        """The render's figures on its span, and a ``context.edit`` event per decision the
        context policy took in it."""
        stats = rendered.stats
        span.attrs.update(context_tokens=stats.tokens, blocks=stats.blocks)
        if stats.compacted:
            span.attrs["compacted"] = True
        for edit in rendered.edits:
            span.add_event(CONTEXT_EDIT, dict(edit))
        self.requests[span.attrs.get("round")] = (rendered.request.model, rendered.usage)

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

    def generated(self, span: Span, result: GenerateResult) -> None:
        """The model call's figures, its cost and its GenAI attributes on its span."""
        u = result.usage
        round_ = span.attrs.get("round")
        requested, summaries = self.requests.pop(round_, ("", None))
        span.attrs.update(
            model=u.model,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_5m_tokens + u.cache_write_1h_tokens,
        )
        cost = price(u)
        span.attrs[COST] = cost.total_usd
        if cost.estimated:
            span.attrs[ESTIMATED] = True
        span.attrs.update(gen_ai_attributes(requested, _less(u, summaries), self.conversation_id))
        if result.error_code:
            span.status = "error"
            span.attrs["error_code"] = result.error_code
            span.attrs["error.type"] = result.error_code

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
        cost = result.cost or price(u)
        self.session.finish(
            "ok" if result.status == "completed" else "error",
            ended=result.status,
            rounds=result.rounds,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_5m_tokens + u.cache_write_1h_tokens,
            **{COST: cost.total_usd, UNCACHED: cost.uncached_usd},
            **({ESTIMATED: True} if cost.estimated else {}),
        )
