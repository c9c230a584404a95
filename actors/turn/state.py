"""The DecisionActor's state machine as a pure function (DESIGN.md §2.1, seed 002).

``transition(state, event) -> (state, effects)`` does no I/O, reads no clock and never
raises for a well-typed event: every (phase, event) pair below is defined. The actor
executes the effects in order. Events and effects live in ``actline.actors.turn.events``.

Steps shared by many rows:

* **model checkpoint** (before every model call): apply the queued DONEs; if
  ``round >= max_iterations`` or ``tokens_used >= token_budget`` -> complete
  (budget_exhausted) with ``FinalizeBestEffort`` before ``Finish``; else round + 1 and
  -> thinking with ``CallModel(round)``.
* **wait checkpoint** (entering Waiting, after a tool round): apply the queued DONEs;
  no awaited task open -> model checkpoint; a SkipWaiting queued -> consume it, stop
  awaiting the open tasks (notice ``wait_skipped``), model checkpoint; else -> waiting
  with ``StartWaitTimer(generation + 1, wait_timeout_s)``.
* **complete(status)**: queued DONEs -> ``RecordLateSignal`` (a queued skip ->
  ``Ignored``), ``EmitProgress("complete")``, ``Finish(status, ...)``.
* **approval wait** (a decision with calls that need approval, ``ToolSpec.approval_id``):
  every ordinary call of the decision is *held*; -> waiting with
  ``StartWaitTimer(generation + 1, wait_timeout_s)`` and the approval card
  (``EmitProgress("waiting", data={"approvals": [...]})``). Nothing held runs before every
  approval is resolved, so a decision stays one tool round.
* **release** (the last pending approval resolved): ``CancelWaitTimer``; per held call in
  order, denied -> ``DenyCall`` and notice ``approval_denied`` / ``approval_timeout`` /
  ``approval_skipped`` (who, why); approved or ungated -> run; any to run -> acting with
  ``RunTools``, none -> wait checkpoint.

=================  ================  =========================================================
event              phase             outcome
=================  ================  =========================================================
StartReAct(t)      idle              model checkpoint of turn t; complete(cancelled) at once if
                                     CancelReAct(t) came first
StartReAct         other             ignored (a turn is running, or Reset first)
ResumeReAct(t)     idle              the checkpoint's round, tokens, tasks and seen signals,
                                     notice card, then wait checkpoint (a crash mid-wait waits
                                     again), or with held calls pending approval the approval
                                     wait again (nothing held has run); a round past
                                     the limits' max_iterations raises it to that round,
                                     with notice ``limits_lowered`` (the model checkpoint
                                     then completes it, spent); complete(cancelled) if
                                     CancelReAct(t) came first
ResumeReAct        other             ignored
ModelDecided(r)    thinking, r       no calls: notice ``protocol_violation.empty_decision``,
                                     model checkpoint; else refusals = 0, ``SendAgentTask``
                                     per agent call, then a call needing approval -> approval
                                     wait; other ordinary calls -> acting with ``RunTools``,
                                     agent calls only -> wait checkpoint
ModelAnswered(r)   thinking, r       complete(completed)
AnswerDeferred(r)  thinking, r       notice card (user input landed unseen), model checkpoint
ProtocolViolation  thinking, r       notice ``protocol_violation.<code>``, model checkpoint
CallRefused(r)     thinking, r       notice ``protocol_violation.<code>``, refusals + 1; the
                                     ``max_consecutive_refusals``-th -> complete(failed), else
                                     model checkpoint
ModelFailed(r)     thinking, r       complete(failed)
any model event    other, or not r   ignored (stale)
ToolsFinished(r)   acting, r         wait checkpoint
ToolsFinished      other, or not r   ignored (stale)
DoneSignal         any               duplicate signal id: ignored; else classified (below):
                                     *open* -> queued in thinking/acting and in an approval
                                     wait, applied in waiting;
                                     *refused* -> notice (its id is not remembered, so a
                                     corrected resend counts); *late* -> ``RecordLateSignal``
DONE applied       waiting           ``RecordSignal``; no awaited task left ->
                                     ``CancelWaitTimer``, model checkpoint; else stay
SkipWaiting        waiting           stop awaiting the open tasks (they stay open), notice
                                     ``wait_skipped``, ``CancelWaitTimer``, model checkpoint;
                                     in an approval wait: every pending approval denied
                                     (``approval_skipped``), release
SkipWaiting        thinking, acting  queued for the next wait for agents (at most one is
                                     queued; an approval wait does not consume it)
SkipWaiting        idle, complete    ignored; also when it names another turn
WaitTimeout(g)     waiting, g        stop awaiting the open tasks, notice ``wait_timeout``
                                     naming the agents, model checkpoint; in an approval wait:
                                     every pending approval denied (``approval_timeout``),
                                     release
WaitTimeout        other, or not g   ignored (stale)
CancelReAct        thinking/acting/  ``CancelModel`` / ``CancelTools`` / ``CancelWaitTimer``,
                   waiting           notice ``cancelled`` (what was interrupted),
                                     complete(cancelled)
CancelReAct(t)     idle              remembered for StartReAct(t); ignored without a turn id
                                     or for the turn that just completed
CancelReAct        complete          ignored; also when it names another turn
ApprovalDecided    waiting for       the named approval (None: every pending one) approved or
                   approvals         denied, ``ApprovalVerdict(ok)``, a notice card; the last
                                     one pending -> release; else the approval card again
ApprovalDecided    other             ``ApprovalVerdict`` refused: ``not_waiting`` (no approval
                                     pending), ``unknown_turn``, ``unknown_approval`` (not
                                     pending: unknown or already resolved); nothing changes
Reset              complete          -> idle; the ended turn's tasks are kept (one turn back)
                                     to classify late DONEs; seen signal ids are kept for good
Reset              other             ignored
=================  ================  =========================================================

DONE classification (a given turn id selects the turn): *open* when the running turn
has the task open (no task id: the agent's oldest open task not claimed by a queued
DONE); *refused* with ``done_wrong_agent`` (the task went to another agent),
``done_already_answered`` (its task has its DONE, in this turn or the one before: an agent
that restarted mid-task and answered twice) or ``done_unknown_task``; *late* otherwise
(its turn ended).

Every transition that changes the state emits an ``EmitProgress`` card, except Reset
(bookkeeping the client never sees); an ignored event yields only ``Ignored`` (a refused
approval only ``ApprovalVerdict``). No ``RunTools`` ever carries a call whose approval is
not ``approved`` (tests/actors/test_state.py, random event sequences).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from actline.messages import TurnStatus

from . import events as ev


class TurnPhase(StrEnum):
    """Where the decision loop of one turn is."""

    IDLE = "idle"
    THINKING = "thinking"
    ACTING = "acting"
    WAITING = "waiting"
    COMPLETE = "complete"


RUNNING = frozenset({TurnPhase.THINKING, TurnPhase.ACTING, TurnPhase.WAITING})


TaskRecord = ev.TaskRecord
"""An agent task of the turn (defined in ``actline.actors.turn.events``, where ``ResumeReAct`` uses
it)."""


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


def transition(state: DecisionState, event: ev.Event) -> Step:
    """The next state and the effects to execute, in order, for ``event``."""
    match event:
        case ev.StartReAct():
            return _start(state, event)
        case ev.ResumeReAct():
            return _resume(state, event)
        case (
            ev.ModelDecided()
            | ev.ModelAnswered()
            | ev.AnswerDeferred()
            | ev.ProtocolViolation()
            | ev.CallRefused()
            | ev.ModelFailed()
        ):
            return _model_event(state, event)
        case ev.ToolsFinished():
            return _tools_finished(state, event)
        case ev.DoneSignal():
            return _done(state, event)
        case ev.SkipWaiting():
            return _skip(state, event)
        case ev.WaitTimeout():
            return _wait_timeout(state, event)
        case ev.CancelReAct():
            return _cancel(state, event)
        case ev.ApprovalDecided():
            return _approval(state, event)
        case ev.Reset():
            return _reset(state)
    return _ignore(f"not an event: {type(event).__name__}", state)


# --- per-event handlers ----------------------------------------------------------------


def _start(state: DecisionState, event: ev.StartReAct) -> Step:
    if state.phase is not TurnPhase.IDLE:
        return _ignore(f"StartReAct({event.turn_id}): turn {state.turn_id} is {state.phase}", state)
    fresh = DecisionState(
        phase=TurnPhase.THINKING,
        turn_id=event.turn_id,
        limits=event.limits,
        seen_signals=state.seen_signals,
        wait_generation=state.wait_generation,
        previous=state.previous,
    )
    effects: list[ev.Effect] = []
    if state.early_cancel == event.turn_id:
        text = "the turn was cancelled before it started"
        _notice(fresh, effects, "cancelled", text)
        return _complete(fresh, effects, "cancelled", error=text)
    if state.early_cancel is not None:
        effects.append(
            ev.Ignored(f"cancel for turn {state.early_cancel} dropped: {event.turn_id} started")
        )
    return _model_checkpoint(fresh, effects)


def _resume(state: DecisionState, event: ev.ResumeReAct) -> Step:
    if state.phase is not TurnPhase.IDLE:
        return _ignore(
            f"ResumeReAct({event.turn_id}): turn {state.turn_id} is {state.phase}", state
        )
    done = max(event.round, 0)
    lowered = done > event.limits.max_iterations  # its limit was lowered while it was down
    limits = replace(event.limits, max_iterations=done) if lowered else event.limits
    fresh = DecisionState(
        phase=TurnPhase.THINKING,
        turn_id=event.turn_id,
        limits=limits,
        round=done,
        tokens_used=max(event.tokens_used, 0),
        consecutive_refusals=max(event.consecutive_refusals, 0),
        tasks=event.tasks,
        seen_signals=state.seen_signals | frozenset(event.seen_signals),
        wait_generation=state.wait_generation,
        previous=state.previous,
    )
    effects: list[ev.Effect] = [
        ev.EmitProgress("notice", fresh.round, f"resumed after round {fresh.round}")
    ]
    if lowered:  # the calls made stand; its next model checkpoint ends it
        text = (
            f"max_iterations is {event.limits.max_iterations} now, and the turn had made "
            f"{done} model calls before it resumed"
        )
        _notice(fresh, effects, "limits_lowered", text)
    if state.early_cancel == event.turn_id:
        text = "the turn was cancelled before it resumed"
        _notice(fresh, effects, "cancelled", text)
        return _complete(fresh, effects, "cancelled", error=text)
    held = event.held if any(c.approval_id is not None for c in event.held) else ()
    if held:  # nothing held ran: wait for the same approvals again
        fresh = replace(fresh, held=held, approvals=_resumed_approvals(held, event.approvals))
        return _await_approvals(fresh, effects)
    return _wait_checkpoint(fresh, effects)


def checkpoint(state: DecisionState) -> dict[str, object]:
    """What a running turn persists each round so that ``ResumeReAct`` can continue it.

    ``round`` counts the model calls whose blocks are on the timeline; a model call in
    flight when this is taken is not counted (it runs again after a crash).
    """
    done = state.round - 1 if state.phase is TurnPhase.THINKING else state.round
    return {
        "status": "running",
        "turn_id": state.turn_id,
        "round": max(done, 0),
        "tokens_used": state.tokens_used,
        "consecutive_refusals": state.consecutive_refusals,
        "tasks": [[t.task_id, t.agent, t.round, t.answered, t.awaited] for t in state.tasks],
        "seen_signals": sorted(state.seen_signals),
        "held": [
            {"call_id": c.call_id, "tool": c.tool, "params": dict(c.params),
             "approval_id": c.approval_id}
            for c in state.held
        ],
        "approvals": [
            {"approval_id": a.approval_id, "call_id": a.call_id, "status": a.status,
             "by": a.by, "reason": a.reason, "code": a.code}
            for a in state.approvals
        ],
    }  # fmt: skip


def resume_event(record: Mapping[str, Any], limits: ev.Limits) -> ev.ResumeReAct:
    """The ``ResumeReAct`` for a ``checkpoint`` record read back from storage."""
    tasks = tuple(
        ev.TaskRecord(str(t[0]), str(t[1]), int(t[2]), bool(t[3]), bool(t[4]))
        for t in record.get("tasks", ())
    )
    return ev.ResumeReAct(
        turn_id=str(record["turn_id"]),
        limits=limits,
        round=int(record.get("round", 0)),
        tokens_used=int(record.get("tokens_used", 0)),
        consecutive_refusals=int(record.get("consecutive_refusals", 0)),
        tasks=tasks,
        seen_signals=tuple(str(s) for s in record.get("seen_signals", ())),
        held=tuple(
            ev.ToolSpec(
                str(c["call_id"]),
                str(c["tool"]),
                dict(c.get("params") or {}),
                None if c.get("approval_id") is None else str(c["approval_id"]),
            )
            for c in record.get("held", ())
        ),
        approvals=tuple(
            ev.Approval(
                str(a["approval_id"]),
                str(a["call_id"]),
                "",
                status=_STATUS.get(str(a.get("status")), "pending"),
                by=str(a.get("by", "")),
                reason=str(a.get("reason", "")),
                code=str(a.get("code", "")),
            )
            for a in record.get("approvals", ())
        ),
    )


def _model_event(state: DecisionState, event: ev.ModelEvent) -> Step:
    name = type(event).__name__
    if state.phase is not TurnPhase.THINKING:
        return _ignore(f"{name}(round {event.round}) while {state.phase}", state)
    if event.round != state.round:
        return _ignore(f"{name}(round {event.round}) is stale: round {state.round} runs", state)
    state = replace(state, tokens_used=state.tokens_used + max(event.tokens, 0))
    effects: list[ev.Effect] = []
    match event:
        case ev.ModelAnswered():
            return _complete(state, effects, "completed", answer=event.answer)
        case ev.ModelFailed():
            return _complete(state, effects, "failed", error=f"model call failed: {event.error}")
        case ev.AnswerDeferred():
            detail = f"answer deferred: {event.reason or 'new user input'}"
            effects.append(ev.EmitProgress("notice", state.round, detail))
            return _model_checkpoint(state, effects)
        case ev.ProtocolViolation():
            _notice(state, effects, f"protocol_violation.{event.code}", event.detail or event.code)
            return _model_checkpoint(state, effects)
        case ev.CallRefused():
            count = state.consecutive_refusals + 1
            state = replace(state, consecutive_refusals=count)
            _notice(state, effects, f"protocol_violation.{event.code}", event.detail or event.code)
            if count >= state.limits.max_consecutive_refusals:
                error = f"{count} decisions in a row were refused (last: {event.code})"
                return _complete(state, effects, "failed", error=error)
            return _model_checkpoint(state, effects)
        case ev.ModelDecided():
            return _decided(state, event, effects)
    return _ignore(f"unknown model event {name}", state)  # pragma: no cover - closed union


def _decided(state: DecisionState, event: ev.ModelDecided, effects: list[ev.Effect]) -> Step:
    if not event.calls and not event.agent_calls:
        text = "the decision had no tool call and no answer"
        _notice(state, effects, "protocol_violation.empty_decision", text)
        return _model_checkpoint(state, effects)
    known = {t.task_id for t in state.tasks}
    sends: list[ev.Effect] = []
    new_tasks: list[TaskRecord] = []
    for call in event.agent_calls:
        if call.task_id in known:
            sends.append(ev.Ignored(f"agent call {call.call_id}: task id {call.task_id} reused"))
            continue
        known.add(call.task_id)
        new_tasks.append(TaskRecord(call.task_id, call.agent, state.round))
        sends.append(ev.SendAgentTask(call.call_id, call.task_id, call.agent, call.text))
    names = [c.tool for c in event.calls] + [f"agent.send -> {c.agent}" for c in event.agent_calls]
    effects.append(ev.EmitProgress("tool_call", state.round, ", ".join(names)))
    effects.extend(sends)
    state = replace(state, consecutive_refusals=0, tasks=state.tasks + tuple(new_tasks))
    if not event.calls:
        return _wait_checkpoint(state, effects)
    if any(c.approval_id is not None for c in event.calls):
        state = replace(state, held=event.calls, approvals=_approvals_of(event.calls))
        return _await_approvals(state, effects)
    effects.append(ev.RunTools(state.round, event.calls))
    return replace(state, phase=TurnPhase.ACTING), tuple(effects)


def _tools_finished(state: DecisionState, event: ev.ToolsFinished) -> Step:
    if state.phase is not TurnPhase.ACTING:
        return _ignore(f"ToolsFinished(round {event.round}) while {state.phase}", state)
    if event.round != state.round:
        return _ignore(f"ToolsFinished(round {event.round}) is stale: round {state.round}", state)
    effects: list[ev.Effect] = [
        ev.EmitProgress("tool_result", state.round, event.detail or "tools done")
    ]
    return _wait_checkpoint(state, effects)


def _done(state: DecisionState, event: ev.DoneSignal) -> Step:
    if event.signal_id in state.seen_signals:
        return _ignore(f"duplicate DONE {event.signal_id} from {event.agent}", state)
    effects: list[ev.Effect] = []
    verdict = _classify(state, event)
    if isinstance(verdict, _Refused):
        # not remembered: the agent may send the same signal again, corrected
        _notice(state, effects, verdict.code, verdict.text, event.signal_id)
        return state, tuple(effects)
    state = replace(state, seen_signals=state.seen_signals | {event.signal_id})
    if isinstance(verdict, _Late):
        effects.append(ev.RecordLateSignal(event, verdict.reason))
        detail = f"late DONE from {event.agent} recorded ({verdict.reason}); announced next turn"
        effects.append(ev.EmitProgress("notice", state.round, detail))
        return state, tuple(effects)
    if state.phase is not TurnPhase.WAITING or state.pending_approvals:
        state = replace(state, pending=(*state.pending, QueuedDone(event, verdict.task_id)))
        detail = f"DONE from {event.agent} queued until the next wait or model call"
        effects.append(ev.EmitProgress("notice", state.round, detail))
        return state, tuple(effects)
    state = _apply(state, effects, event, verdict.task_id)
    if state.awaited:
        effects.append(ev.EmitProgress("waiting", state.round, _waiting_for(state.awaited)))
        return state, tuple(effects)
    effects.append(ev.CancelWaitTimer(state.wait_generation))
    return _model_checkpoint(state, effects)


def _skip(state: DecisionState, event: ev.SkipWaiting) -> Step:
    if state.phase not in RUNNING:
        return _ignore(f"SkipWaiting while {state.phase}: nothing to skip", state)
    if event.turn_id not in (None, state.turn_id):
        return _ignore(f"SkipWaiting for turn {event.turn_id}; turn {state.turn_id} runs", state)
    if state.phase is TurnPhase.WAITING and state.pending_approvals:
        decision = ev.ApprovalDecided(None, None, False, "", event.reason or "waiting skipped")
        return _resolve(state, [], decision, "approval_skipped")
    if state.phase is TurnPhase.WAITING:
        effects: list[ev.Effect] = [ev.CancelWaitTimer(state.wait_generation)]
        state = _stop_waiting(
            state, effects, "wait_skipped", f"waiting skipped{_why(event.reason)}"
        )
        return _model_checkpoint(state, effects)
    if any(isinstance(p, ev.SkipWaiting) for p in state.pending):
        return _ignore("SkipWaiting already queued", state)
    state = replace(state, pending=(*state.pending, event))
    return state, (ev.EmitProgress("notice", state.round, "skip queued: the next wait is skipped"),)


def _wait_timeout(state: DecisionState, event: ev.WaitTimeout) -> Step:
    if state.phase is not TurnPhase.WAITING or event.generation != state.wait_generation:
        return _ignore(f"stale WaitTimeout({event.generation}) while {state.phase}", state)
    effects: list[ev.Effect] = []
    if state.pending_approvals:
        reason = f"no approval within {state.limits.wait_timeout_s:g} s"
        return _resolve(state, effects, ev.ApprovalDecided(None, None, False, "", reason),
                        "approval_timeout")  # fmt: skip
    text = f"no DONE within {state.limits.wait_timeout_s:g} s"
    state = _stop_waiting(state, effects, "wait_timeout", text)
    return _model_checkpoint(state, effects)


def _cancel(state: DecisionState, event: ev.CancelReAct) -> Step:
    if state.phase is TurnPhase.COMPLETE:
        return _ignore(f"CancelReAct: turn {state.turn_id} is already complete", state)
    if state.phase is TurnPhase.IDLE:
        if event.turn_id is None:
            return _ignore("CancelReAct while idle: no turn is running", state)
        if state.previous is not None and event.turn_id == state.previous.turn_id:
            return _ignore(f"CancelReAct: turn {event.turn_id} is already complete", state)
        state = replace(state, early_cancel=event.turn_id)
        detail = f"cancel for turn {event.turn_id} received before it started"
        return state, (ev.EmitProgress("notice", state.round, detail),)
    if event.turn_id not in (None, state.turn_id):
        return _ignore(f"CancelReAct for turn {event.turn_id}; turn {state.turn_id} runs", state)
    effects: list[ev.Effect] = []
    if state.phase is TurnPhase.THINKING:
        effects.append(ev.CancelModel(state.round))
        what = f"thinking (round {state.round})"
    elif state.phase is TurnPhase.ACTING:
        effects.append(ev.CancelTools(state.round))
        what = f"running the tools of round {state.round}"
    else:
        effects.append(ev.CancelWaitTimer(state.wait_generation))
        what = _waiting_for(state.awaited)
        if state.pending_approvals:
            what = f"{_approval_text(state.pending_approvals)} (nothing held ran)"
    text = f"cancelled while {what}{_why(event.reason)}"
    _notice(state, effects, "cancelled", text)
    return _complete(state, effects, "cancelled", error=text)


def _approval(state: DecisionState, event: ev.ApprovalDecided) -> Step:
    pending = state.pending_approvals
    if event.turn_id not in (None, state.turn_id):
        text = f"turn {event.turn_id} is not the one running here ({state.turn_id})"
        return state, (ev.ApprovalVerdict(False, "unknown_turn", text),)
    if state.phase is not TurnPhase.WAITING or not pending:
        what = f"turn {state.turn_id} is {state.phase}" if state.turn_id else "no turn runs"
        text = f"{what}, with no approval pending"
        return state, (ev.ApprovalVerdict(False, "not_waiting", text),)
    if event.approval_id is not None and event.approval_id not in {a.approval_id for a in pending}:
        ids = ", ".join(a.approval_id for a in pending)
        text = (
            f"approval {event.approval_id} is not pending in turn {state.turn_id} (pending: {ids})"
        )
        return state, (ev.ApprovalVerdict(False, "unknown_approval", text),)
    return _resolve(state, [], event, "approval_denied")


def _reset(state: DecisionState) -> Step:
    if state.phase is not TurnPhase.COMPLETE:
        return _ignore(f"Reset while {state.phase}: only a complete turn resets", state)
    past = PastTurn(state.turn_id or "", state.tasks)
    idle = DecisionState(
        seen_signals=state.seen_signals, wait_generation=state.wait_generation, previous=past
    )
    return idle, ()


# --- shared steps ------------------------------------------------------------------------


def _model_checkpoint(state: DecisionState, effects: list[ev.Effect]) -> Step:
    """Apply queued DONEs, then call the model again unless the budget is spent."""
    state = _drain_done(state, effects)
    spent = _budget_spent(state)
    if spent is not None:
        return _complete(state, effects, "budget_exhausted", error=spent, best_effort=True)
    round_ = state.round + 1
    state = replace(state, phase=TurnPhase.THINKING, round=round_)
    effects.append(ev.EmitProgress("thinking", round_, f"round {round_}"))
    effects.append(ev.CallModel(round_))
    return state, tuple(effects)


def _wait_checkpoint(state: DecisionState, effects: list[ev.Effect]) -> Step:
    """Entering Waiting: drain the queue first; wait only if an awaited task is still open."""
    state = _drain_done(state, effects)
    if not state.awaited:
        return _model_checkpoint(state, effects)
    if any(isinstance(p, ev.SkipWaiting) for p in state.pending):
        rest = tuple(p for p in state.pending if not isinstance(p, ev.SkipWaiting))
        state = replace(state, pending=rest)
        state = _stop_waiting(state, effects, "wait_skipped", "waiting skipped (asked earlier)")
        return _model_checkpoint(state, effects)
    generation = state.wait_generation + 1
    state = replace(state, phase=TurnPhase.WAITING, wait_generation=generation)
    effects.append(ev.StartWaitTimer(generation, state.limits.wait_timeout_s))
    effects.append(ev.EmitProgress("waiting", state.round, _waiting_for(state.awaited)))
    return state, tuple(effects)


def _complete(
    state: DecisionState,
    effects: list[ev.Effect],
    status: TurnStatus,
    *,
    answer: str | None = None,
    error: str | None = None,
    best_effort: bool = False,
) -> Step:
    """End the turn: queued signals are recorded (DONEs as late), never dropped."""
    for item in state.pending:
        if isinstance(item, QueuedDone):
            effects.append(ev.RecordLateSignal(item.signal, "the turn ended before it was used"))
            detail = f"late DONE from {item.signal.agent} recorded; announced next turn"
            effects.append(ev.EmitProgress("notice", state.round, detail))
        else:
            effects.append(ev.Ignored("queued SkipWaiting unused: the turn ended"))
    if best_effort:
        effects.append(ev.FinalizeBestEffort(error or status))
    state = replace(
        state,
        phase=TurnPhase.COMPLETE,
        pending=(),
        status=status,
        error=error,
        held=(),  # calls held for an approval never run once the turn ends
        approvals=(),
    )
    effects.append(ev.EmitProgress("complete", state.round, status if error is None else error))
    effects.append(ev.Finish(status, answer, error, state.round, state.tokens_used))
    return state, tuple(effects)


def _drain_done(state: DecisionState, effects: list[ev.Effect]) -> DecisionState:
    """Apply every queued DONE in arrival order; a queued SkipWaiting stays queued."""
    if not state.pending:
        return state
    for item in state.pending:
        if isinstance(item, QueuedDone):
            state = _apply(state, effects, item.signal, item.task_id)
    return replace(state, pending=tuple(p for p in state.pending if isinstance(p, ev.SkipWaiting)))


def _apply(
    state: DecisionState, effects: list[ev.Effect], event: ev.DoneSignal, task_id: str
) -> DecisionState:
    tasks = tuple(replace(t, answered=True) if t.task_id == task_id else t for t in state.tasks)
    effects.append(ev.RecordSignal(event, task_id))
    effects.append(
        ev.EmitProgress("tool_result", state.round, f"DONE from {event.agent}: {event.summary}")
    )
    return replace(state, tasks=tasks, applied_signals=state.applied_signals | {event.signal_id})


def _stop_waiting(
    state: DecisionState, effects: list[ev.Effect], code: str, text: str
) -> DecisionState:
    """Stop awaiting the open tasks (they stay open) and say so in a notice."""
    agents = _waiting_for(state.awaited).removeprefix("waiting for ")
    tasks = tuple(replace(t, awaited=False) if not t.answered else t for t in state.tasks)
    state = replace(state, tasks=tasks)
    _notice(state, effects, code, f"{text}: no DONE yet from {agents}; a later DONE still counts")
    return state


def _await_approvals(state: DecisionState, effects: list[ev.Effect]) -> Step:
    """Hold the decision's calls in Waiting until every approval is resolved."""
    generation = state.wait_generation + 1
    state = replace(state, phase=TurnPhase.WAITING, wait_generation=generation)
    effects.append(ev.StartWaitTimer(generation, state.limits.wait_timeout_s))
    effects.append(_approval_card(state))
    return state, tuple(effects)


def _approval_card(state: DecisionState) -> ev.EmitProgress:
    pending = state.pending_approvals
    data = {
        "approvals": [
            {"approval_id": a.approval_id, "call_id": a.call_id, "tool": a.tool,
             "params": dict(a.params)}
            for a in pending
        ]
    }  # fmt: skip
    return ev.EmitProgress("waiting", state.round, _approval_text(pending), data)


def _resolve(
    state: DecisionState, effects: list[ev.Effect], event: ev.ApprovalDecided, code: str
) -> Step:
    """Apply one approval decision (every pending approval when it names none); release
    the held calls once none is pending."""
    status: Literal["approved", "denied"] = "approved" if event.approved else "denied"
    resolved: list[ev.Approval] = []
    approvals: list[ev.Approval] = []
    for a in state.approvals:
        if a.status == "pending" and event.approval_id in (None, a.approval_id):
            a = replace(a, status=status, by=event.by, reason=event.reason,
                        code="" if event.approved else code)  # fmt: skip
            resolved.append(a)
        approvals.append(a)
    state = replace(state, approvals=tuple(approvals))
    names = ", ".join(f"{a.tool} ({a.approval_id})" for a in resolved)
    verb = "approved" if event.approved else "denied"
    detail = f"{names} {verb}{_by(event.by)}{_why(event.reason)}"
    effects.append(ev.ApprovalVerdict(True, "applied", detail))
    effects.append(ev.EmitProgress("notice", state.round, detail))
    if state.pending_approvals:
        effects.append(_approval_card(state))
        return state, tuple(effects)
    return _release(state, effects)


def _release(state: DecisionState, effects: list[ev.Effect]) -> Step:
    """Every approval is resolved: denied calls get their refusal, the others run."""
    effects.append(ev.CancelWaitTimer(state.wait_generation))
    verdicts = {a.approval_id: a for a in state.approvals}
    run: list[ev.ToolSpec] = []
    for call in state.held:
        found = verdicts.get(call.approval_id or "") if call.approval_id else None
        if call.approval_id is None or (found is not None and found.status == "approved"):
            run.append(call)
            continue
        code = (found.code if found is not None else "") or "approval_denied"
        text = (
            f"{call.tool} was not run: the approval was denied"
            f"{_by(found.by if found else '')}{_why(found.reason if found else '')}"
        )
        effects.append(ev.DenyCall(call, code, text))
        _notice(state, effects, code, text)
    state = replace(state, held=(), approvals=())
    if not run:
        return _wait_checkpoint(state, effects)
    effects.append(ev.RunTools(state.round, tuple(run)))
    return replace(state, phase=TurnPhase.ACTING), tuple(effects)


def _approvals_of(calls: tuple[ev.ToolSpec, ...]) -> tuple[ev.Approval, ...]:
    return tuple(
        ev.Approval(c.approval_id, c.call_id, c.tool, c.params)
        for c in calls
        if c.approval_id is not None
    )


def _resumed_approvals(
    held: tuple[ev.ToolSpec, ...], stored: tuple[ev.Approval, ...]
) -> tuple[ev.Approval, ...]:
    """Each held call's approval as stored (pending when none was stored: never approved
    by default); at least one stays pending, or the approval wait would not hold."""
    by_id = {a.approval_id: a for a in stored}
    approvals = tuple(
        replace(by_id.get(a.approval_id, a), call_id=a.call_id, tool=a.tool, params=a.params)
        for a in _approvals_of(held)
    )
    if any(a.status == "pending" for a in approvals):
        return approvals
    return tuple(replace(a, status="pending", by="", reason="", code="") for a in approvals)


def _budget_spent(state: DecisionState) -> str | None:
    limits = state.limits
    if state.round >= limits.max_iterations:
        return f"max_iterations ({limits.max_iterations}) reached after {state.round} model calls"
    if limits.token_budget is not None and state.tokens_used >= limits.token_budget:
        return f"token budget ({limits.token_budget}) spent: {state.tokens_used} tokens used"
    return None


# --- DONE classification -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Open:
    task_id: str


@dataclass(frozen=True, slots=True)
class _Refused:
    code: str
    text: str


@dataclass(frozen=True, slots=True)
class _Late:
    reason: str


def _classify(state: DecisionState, event: ev.DoneSignal) -> _Open | _Refused | _Late:
    """Decide what a new DONE is: open (apply or queue), refused (notice), or late."""
    running = state.phase in RUNNING
    ours = event.turn_id is None or event.turn_id == state.turn_id
    claimed = {p.task_id for p in state.pending if isinstance(p, QueuedDone)}
    if event.task_id is None:
        if not (running and ours):
            return _Late("its turn is not running")
        for open_task in state.tasks:
            if open_task.agent == event.agent and not open_task.answered:
                if open_task.task_id not in claimed:
                    return _Open(open_task.task_id)
        return _Refused("done_unknown_task", f"DONE from {event.agent}: it has no open task")
    task, current = _find_task(state, event)
    if task is not None and task.agent != event.agent:
        text = f"DONE from {event.agent} for task {task.task_id}, which was sent to {task.agent}"
        return _Refused("done_wrong_agent", text)
    if task is not None and task.answered:  # also after its turn ended: never applied twice
        text = f"DONE from {event.agent} for task {task.task_id}, already answered: {event.summary}"
        return _Refused("done_already_answered", text)
    if not (running and ours) or (task is not None and not current):
        return _Late("its turn is not running")
    if task is None:
        return _Refused("done_unknown_task", f"DONE from {event.agent}: no task {event.task_id}")
    if task.task_id in claimed:
        text = f"DONE from {event.agent} for task {task.task_id}, already answered: {event.summary}"
        return _Refused("done_already_answered", text)
    return _Open(task.task_id)


def _find_task(state: DecisionState, event: ev.DoneSignal) -> tuple[TaskRecord | None, bool]:
    """The task a DONE names and whether it belongs to this state's turn (else the last one)."""
    if event.turn_id in (None, state.turn_id):
        for task in state.tasks:
            if task.task_id == event.task_id:
                return task, True
    if state.previous is not None and event.turn_id in (None, state.previous.turn_id):
        for task in state.previous.tasks:
            if task.task_id == event.task_id:
                return task, False
    return None, False


# --- small helpers -------------------------------------------------------------------------


def _notice(
    state: DecisionState,
    effects: list[ev.Effect],
    code: str,
    text: str,
    signal_id: str | None = None,
) -> None:
    effects.append(ev.RecordNotice(code, text, signal_id))
    effects.append(ev.EmitProgress("notice", state.round, f"{code}: {text}"))


def _ignore(reason: str, state: DecisionState) -> Step:
    return state, (ev.Ignored(reason),)


def _waiting_for(tasks: tuple[TaskRecord, ...]) -> str:
    return "waiting for " + ", ".join(f"{t.agent} (task {t.task_id})" for t in tasks)


def _why(reason: str) -> str:
    return f" ({reason})" if reason else ""


def _by(who: str) -> str:
    return f" by {who}" if who else ""


def _approval_text(pending: tuple[ev.Approval, ...]) -> str:
    calls = ", ".join(f"{a.tool}({_args(a.params)}) [{a.approval_id}]" for a in pending)
    return f"waiting for approval of {calls}"


def _args(params: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return text if len(text) <= 200 else text[:199] + "…"


_STATUS: dict[str, Literal["pending", "approved", "denied"]] = {
    "pending": "pending",
    "approved": "approved",
    "denied": "denied",
}
