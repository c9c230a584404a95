"""One round's tool calls while their outcomes come in (the DecisionActor holds one).

React.* calls run on the ConversationActor (their outcomes come back as ``ReactRan``),
external ones on the tool executors (``ExternalRan``), at the same time. ``ToolRound``
joins the two parts in call order; it does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from timeline import Block
from tools.react import ReactOutcome

from . import events as ev
from .mailbox import ToolOutcome

NoticeBlock = Callable[[str, str], Block]
"""Builds the ``react.notice`` block of (code, text) for the running turn."""


@dataclass(slots=True)
class ToolRound:
    """The calls of round ``round`` and the outcomes that arrived so far."""

    round: int
    calls: tuple[ev.ToolSpec, ...]
    outcomes: dict[str, ToolOutcome] = field(default_factory=dict)

    @property
    def react(self) -> tuple[ev.ToolSpec, ...]:
        return tuple(c for c in self.calls if c.tool.startswith("react."))

    @property
    def external(self) -> tuple[ev.ToolSpec, ...]:
        return tuple(c for c in self.calls if not c.tool.startswith("react."))

    def react_ran(self, outcomes: tuple[ReactOutcome, ...], notice: NoticeBlock) -> None:
        """The react.* outcomes, in the order of ``react``; their notices become blocks."""
        for call, outcome in zip(self.react, outcomes, strict=False):
            after = [*outcome.blocks, *(notice(n.full_code, n.message) for n in outcome.notices)]
            self.outcomes[call.call_id] = ToolOutcome(
                call.call_id, call.tool, outcome.ok, outcome.result, (), tuple(after)
            )

    def external_ran(self, outcomes: tuple[ToolOutcome, ...]) -> None:
        self.outcomes.update((o.call_id, o) for o in outcomes)

    def complete(self) -> tuple[tuple[ToolOutcome, ...], str] | None:
        """Every outcome in call order and the card's detail, once all are in."""
        if len(self.outcomes) < len(self.calls):
            return None
        ordered = tuple(self.outcomes[c.call_id] for c in self.calls)
        bad = sum(not o.ok for o in ordered)
        return ordered, f"{len(ordered)} result(s)" + (f", {bad} failed" if bad else "")
