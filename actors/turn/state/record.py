"""The state record of the DecisionActor's state machine (``actline.actors.turn.state``).

``DecisionState`` is the whole state of one DecisionActor: the phase of its turn, the
round, the tokens spent, the agent tasks sent and the signals that came back, the calls
held for an approval. It is frozen: ``transition`` returns a new one with each step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from actline.messages import TurnStatus

from .. import events as ev


class TurnPhase(StrEnum):
    """Where the decision loop of one turn is."""

    IDLE = "idle"
    THINKING = "thinking"
    ACTING = "acting"
    WAITING = "waiting"
    COMPLETE = "complete"


RUNNING = frozenset({TurnPhase.THINKING, TurnPhase.ACTING, TurnPhase.WAITING})


TaskRecord = ev.TaskRecord
"""An agent task of the turn (defined in ``actline.actors.turn.events``, where ``ResumeReAct``
uses it)."""


@dataclass(frozen=True, slots=True)
class QueuedDone:
    """A DONE that arrived in thinking or acting, already matched to its open task."""

    signal: ev.DoneSignal
    task_id: str


Pending = QueuedDone | ev.SkipWaiting


@dataclass(frozen=True, slots=True)
class PastTurn:
    """What is kept of the previous turn: enough to classify its late DONEs."""

    turn_id: str
    tasks: tuple[TaskRecord, ...]


@dataclass(frozen=True, slots=True)
class DecisionState:
    """The whole state of one DecisionActor.

    ``round`` counts model calls of the turn; ``pending`` is the FIFO of signals that
    arrived in thinking or acting; ``applied_signals`` are this turn's applied DONE
    ids, ``seen_signals`` every DONE id ever classified (never forgotten, so a
    duplicate is a no-op in any later turn too). ``wait_generation`` never goes back,
    so the timer of an earlier wait (or turn) cannot match. ``status`` and ``error``
    are set in Complete.
    """

    phase: TurnPhase = TurnPhase.IDLE
    turn_id: str | None = None
    limits: ev.Limits = field(default_factory=ev.Limits)
    round: int = 0
    tokens_used: int = 0
    consecutive_refusals: int = 0
    consecutive_violations: int = 0
    """Replies in a row that broke the decision protocol (a usable decision resets it)."""
    tasks: tuple[TaskRecord, ...] = ()
    pending: tuple[Pending, ...] = ()
    applied_signals: frozenset[str] = frozenset()
    seen_signals: frozenset[str] = frozenset()
    wait_generation: int = 0
    status: TurnStatus | None = None
    error: str | None = None
    previous: PastTurn | None = None
    early_cancel: str | None = None
    held: tuple[ev.ToolSpec, ...] = ()
    """The ordinary calls of the current decision, held while an approval is pending."""
    approvals: tuple[ev.Approval, ...] = ()
    """The approvals of the held calls (pending or resolved)."""

    @property
    def pending_approvals(self) -> tuple[ev.Approval, ...]:
        """Approvals not resolved yet: while any is, the turn waits for them."""
        return tuple(a for a in self.approvals if a.status == "pending")

    @property
    def outstanding(self) -> tuple[TaskRecord, ...]:
        """Tasks of this turn without their DONE, in sent order."""
        return tuple(t for t in self.tasks if not t.answered)

    @property
    def awaited(self) -> tuple[TaskRecord, ...]:
        """Open tasks the current (or next) wait is for."""
        return tuple(t for t in self.tasks if not t.answered and t.awaited)


Step = tuple[DecisionState, tuple[ev.Effect, ...]]
"""What a transition gives: the next state and the effects to execute, in order."""
