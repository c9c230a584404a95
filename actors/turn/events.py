"""Events in, effects out: the vocabulary of the DecisionActor's state machine.

``actline.actors.turn.state.transition(state, event) -> (state, effects)`` is pure; the actor
around it turns what it receives (wire messages, model replies, finished tool
rounds, its wait timer firing) into an ``Event`` and executes the returned
``Effect`` values in order. Both are closed unions of small frozen dataclasses.
Events that mirror a wire message reuse its name (``DoneSignal``, ``SkipWaiting``,
``CancelReAct``; ``ApprovalDecided`` is ``turn.approval``); ``event_from_message`` converts
those. A turn's limits are parsed
once, by ``actline.actors.configuration.turn_settings.TurnSettings``.
Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from actline import messages
from actline.actors.configuration.turn_settings import Limits as Limits
from actline.messages import ArtifactRef, TurnStatus
from actline.messages import Phase as CardPhase

# --- configuration ---------------------------------------------------------------------


# --- values carried by events -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One ordinary tool call of a decision (anything but ``agent.send``)."""

    call_id: str
    tool: str
    params: Mapping[str, Any] = field(default_factory=dict)
    approval_id: str | None = None
    """Set when the call needs an approval before it runs (``actline.actors.turn.approvals``)."""


@dataclass(frozen=True, slots=True)
class Approval:
    """A call of the decision that waits for (or got) an approval. ``status`` pending until
    an ``ApprovalDecided`` (or the wait's end) resolves it; ``by``/``reason`` say who and why."""

    approval_id: str
    call_id: str
    tool: str
    params: Mapping[str, Any] = field(default_factory=dict)
    status: Literal["pending", "approved", "denied"] = "pending"
    by: str = ""
    reason: str = ""
    code: str = ""
    """Why a denial happened: ``approval_denied``, ``approval_timeout``, ``approval_skipped``."""


@dataclass(frozen=True, slots=True)
class AgentCall:
    """One ``agent.send(name, text)`` call; the actor chose a fresh ``task_id`` for it."""

    call_id: str
    task_id: str
    agent: str
    text: str


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """An agent task of the turn, in sent order. ``awaited`` turns False when a wait
    for it ends by skip or timeout: it stays open (its DONE is still applied) but no
    longer holds the loop in Waiting."""

    task_id: str
    agent: str
    round: int
    answered: bool = False
    awaited: bool = True


# --- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartReAct:
    """Run the decision loop of turn ``turn_id`` (leaves Idle)."""

    turn_id: str
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, slots=True)
class ResumeReAct:
    """Continue turn ``turn_id`` from its persisted checkpoint (leaves Idle).

    A redelivered turn request after a crash: ``round`` model calls are done and on the
    timeline, ``tasks`` are the agent tasks sent so far, ``seen_signals`` the DONEs
    already classified (so a redelivered DONE stays a duplicate).
    """

    turn_id: str
    limits: Limits = field(default_factory=Limits)
    round: int = 0
    tokens_used: int = 0
    consecutive_refusals: int = 0
    consecutive_violations: int = 0
    tasks: tuple[TaskRecord, ...] = ()
    seen_signals: tuple[str, ...] = ()
    held: tuple[ToolSpec, ...] = ()
    """The calls of the last decision that wait for ``approvals`` (none: no approval wait)."""
    approvals: tuple[Approval, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelDecided:
    """The model of round ``round`` decided tool calls (``agent.send`` ones in ``agent_calls``:
    one at most from a model reply, whose further hand-offs ``classify_reply`` refuses)."""

    round: int
    calls: tuple[ToolSpec, ...] = ()
    agent_calls: tuple[AgentCall, ...] = ()
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class ModelAnswered:
    """The model of round ``round`` wrote its final answer."""

    round: int
    answer: str
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class AnswerDeferred:
    """Round ``round`` answered, but user input it has not seen arrived: one more round."""

    round: int
    reason: str = ""
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The reply of round ``round`` broke the decision protocol."""

    round: int
    code: str
    detail: str = ""
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class CallRefused:
    """A guard refused the decision of round ``round`` (e.g. a repeated call)."""

    round: int
    code: str
    detail: str = ""
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class ModelFailed:
    """The model call of round ``round`` failed for good (retries already spent)."""

    round: int
    error: str
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class ToolsFinished:
    """Every ordinary tool call of round ``round`` has its result on the timeline."""

    round: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DoneSignal:
    """An outside agent's DONE. Without ``task_id`` it goes to the agent's oldest open task."""

    signal_id: str
    agent: str
    turn_id: str | None = None
    task_id: str | None = None
    summary: str = ""
    artifacts: tuple[ArtifactRef, ...] = ()


@dataclass(frozen=True, slots=True)
class SkipWaiting:
    """Stop waiting for outside agents (first ESC). ``turn_id`` None means the current turn."""

    turn_id: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WaitTimeout:
    """The wait timer of generation ``generation`` fired."""

    generation: int


@dataclass(frozen=True, slots=True)
class CancelReAct:
    """Cancel the turn (second ESC). ``turn_id`` None means the current turn."""

    turn_id: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """Approve or deny ``approval_id`` (None: every pending approval) of turn ``turn_id``
    (None: the current turn)."""

    turn_id: str | None
    approval_id: str | None
    approved: bool
    by: str = ""
    reason: str = ""
    tool: str = ""
    """The only tool whose calls this decides (an approver of some tools); "": any."""


@dataclass(frozen=True, slots=True)
class Reset:
    """Leave Complete for Idle, ready for the next turn."""


Event = (
    StartReAct
    | ResumeReAct
    | ModelDecided
    | ModelAnswered
    | AnswerDeferred
    | ProtocolViolation
    | CallRefused
    | ModelFailed
    | ToolsFinished
    | DoneSignal
    | SkipWaiting
    | WaitTimeout
    | CancelReAct
    | ApprovalDecided
    | Reset
)
"""Everything ``transition`` accepts."""

ModelEvent = (
    ModelDecided | ModelAnswered | AnswerDeferred | ProtocolViolation | CallRefused | ModelFailed
)
"""The outcomes of one model call; each reports the tokens it used."""

# --- effects ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallModel:
    """Render the context and call the model; answer with a ``ModelEvent`` of ``round``."""

    round: int


@dataclass(frozen=True, slots=True)
class CancelModel:
    """Stop the model call of ``round`` now; its result, if any, is dropped."""

    round: int


@dataclass(frozen=True, slots=True)
class RunTools:
    """Run these calls (possibly none) and answer ``ToolsFinished(round)``."""

    round: int
    calls: tuple[ToolSpec, ...]


@dataclass(frozen=True, slots=True)
class CancelTools:
    """Stop the tool calls of ``round``."""

    round: int


@dataclass(frozen=True, slots=True)
class SendAgentTask:
    """Store an ``AgentTask`` in the agent's durable inbox ``al.agent.<agent>.inbox`` (and its
    tool-call block)."""

    call_id: str
    task_id: str
    agent: str
    text: str


@dataclass(frozen=True, slots=True)
class StartWaitTimer:
    """Answer ``WaitTimeout(generation)`` after ``seconds`` unless cancelled."""

    generation: int
    seconds: float


@dataclass(frozen=True, slots=True)
class CancelWaitTimer:
    """The wait of ``generation`` is over; its timer may be dropped."""

    generation: int


@dataclass(frozen=True, slots=True)
class RecordSignal:
    """A DONE was applied to task ``task_id``: put its summary on the timeline."""

    signal: DoneSignal
    task_id: str


@dataclass(frozen=True, slots=True)
class RecordLateSignal:
    """A DONE came after its turn ended: record it, announce it next turn."""

    signal: DoneSignal
    reason: str


@dataclass(frozen=True, slots=True)
class RecordNotice:
    """A ``react.notice`` block the model sees next round; ``signal_id`` names a refused DONE."""

    code: str
    text: str
    signal_id: str | None = None


@dataclass(frozen=True, slots=True)
class EmitProgress:
    """A ``ReActProgress`` card on the client stream."""

    phase: CardPhase
    round: int
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)
    """The card's structured ``data`` (an approval card: its pending approvals)."""


@dataclass(frozen=True, slots=True)
class DenyCall:
    """A call that was not approved does not run: record its call and a failed result that
    says why (``code``: ``approval_denied``, ``approval_timeout`` or ``approval_skipped``)."""

    call: ToolSpec
    code: str
    text: str


@dataclass(frozen=True, slots=True)
class ApprovalVerdict:
    """What the sender of an ``ApprovalDecided`` is told: applied (``ok``) or why not."""

    ok: bool
    code: str
    text: str


@dataclass(frozen=True, slots=True)
class FinalizeBestEffort:
    """Budget spent: produce a best-effort answer (no tools) for the ``Finish`` that follows."""

    reason: str


@dataclass(frozen=True, slots=True)
class FinalizeFromReplies:
    """The model kept breaking the decision protocol: the best-effort answer is what its
    broken replies said (no further model call), for the ``Finish`` that follows."""

    reason: str


@dataclass(frozen=True, slots=True)
class Finish:
    """Publish the turn result. ``answer`` is None after ``FinalizeBestEffort`` or
    ``FinalizeFromReplies`` (use that one)."""

    status: TurnStatus
    answer: str | None
    error: str | None
    rounds: int
    tokens_used: int


@dataclass(frozen=True, slots=True)
class Ignored:
    """Nothing to do; the reason is for a debug log."""

    reason: str


Effect = (
    CallModel
    | CancelModel
    | RunTools
    | CancelTools
    | SendAgentTask
    | StartWaitTimer
    | CancelWaitTimer
    | RecordSignal
    | RecordLateSignal
    | RecordNotice
    | EmitProgress
    | FinalizeBestEffort
    | FinalizeFromReplies
    | Finish
    | DenyCall
    | ApprovalVerdict
    | Ignored
)
"""Everything ``transition`` may ask of the actor."""


# --- wire messages to events -------------------------------------------------------------


def event_from_message(
    msg: messages.DoneSignal
    | messages.SkipWaiting
    | messages.CancelReAct
    | messages.ApprovalDecision,
) -> Event:
    """The event a wire message becomes."""
    if isinstance(msg, messages.ApprovalDecision):
        return ApprovalDecided(
            msg.turn_id, msg.approval_id, msg.approved, msg.by, msg.reason, msg.tool
        )
    if isinstance(msg, messages.DoneSignal):
        return DoneSignal(
            signal_id=msg.signal_id,
            agent=msg.agent,
            turn_id=msg.turn_id,
            task_id=msg.task_id,
            summary=msg.summary,
            artifacts=tuple(msg.artifacts),
        )
    if isinstance(msg, messages.SkipWaiting):
        return SkipWaiting(msg.turn_id, msg.reason)
    return CancelReAct(msg.turn_id, msg.reason)
