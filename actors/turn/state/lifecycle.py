"""The transitions of a turn's start and end (``actline.actors.turn.state``): StartReAct,
ResumeReAct, CancelReAct and Reset. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from .. import events as ev
from .approval_wait import approval_text, await_approvals, resumed_approvals
from .record import DecisionState, PastTurn, Step, TurnPhase
from .steps import complete, ignore, model_checkpoint, notice, wait_checkpoint, waiting_for, why


def on_start(state: DecisionState, event: ev.StartReAct) -> Step:
    if state.phase is not TurnPhase.IDLE:
        return ignore(f"StartReAct({event.turn_id}): turn {state.turn_id} is {state.phase}", state)
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
        notice(fresh, effects, "cancelled", text)
        return complete(fresh, effects, "cancelled", error=text)
    if state.early_cancel is not None:
        effects.append(
            ev.Ignored(f"cancel for turn {state.early_cancel} dropped: {event.turn_id} started")
        )
    return model_checkpoint(fresh, effects)


def on_resume(state: DecisionState, event: ev.ResumeReAct) -> Step:
    if state.phase is not TurnPhase.IDLE:
        return ignore(f"ResumeReAct({event.turn_id}): turn {state.turn_id} is {state.phase}", state)
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
        consecutive_violations=max(event.consecutive_violations, 0),
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
        notice(fresh, effects, "limits_lowered", text)
    if state.early_cancel == event.turn_id:
        text = "the turn was cancelled before it resumed"
        notice(fresh, effects, "cancelled", text)
        return complete(fresh, effects, "cancelled", error=text)
    held = event.held if any(c.approval_id is not None for c in event.held) else ()
    if held:  # nothing held ran: wait for the same approvals again
        fresh = replace(fresh, held=held, approvals=resumed_approvals(held, event.approvals))
        return await_approvals(fresh, effects)
    return wait_checkpoint(fresh, effects)


def on_cancel(state: DecisionState, event: ev.CancelReAct) -> Step:
    if state.phase is TurnPhase.COMPLETE:
        return ignore(f"CancelReAct: turn {state.turn_id} is already complete", state)
    if state.phase is TurnPhase.IDLE:
        if event.turn_id is None:
            return ignore("CancelReAct while idle: no turn is running", state)
        if state.previous is not None and event.turn_id == state.previous.turn_id:
            return ignore(f"CancelReAct: turn {event.turn_id} is already complete", state)
        state = replace(state, early_cancel=event.turn_id)
        detail = f"cancel for turn {event.turn_id} received before it started"
        return state, (ev.EmitProgress("notice", state.round, detail),)
    if event.turn_id not in (None, state.turn_id):
        return ignore(f"CancelReAct for turn {event.turn_id}; turn {state.turn_id} runs", state)
    effects: list[ev.Effect] = []
    if state.phase is TurnPhase.THINKING:
        effects.append(ev.CancelModel(state.round))
        what = f"thinking (round {state.round})"
    elif state.phase is TurnPhase.ACTING:
        effects.append(ev.CancelTools(state.round))
        what = f"running the tools of round {state.round}"
    else:
        effects.append(ev.CancelWaitTimer(state.wait_generation))
        what = waiting_for(state.awaited)
        if state.pending_approvals:
            what = f"{approval_text(state.pending_approvals)} (nothing held ran)"
    text = f"cancelled while {what}{why(event.reason)}"
    notice(state, effects, "cancelled", text)
    return complete(state, effects, "cancelled", error=text)


def on_reset(state: DecisionState) -> Step:
    if state.phase is not TurnPhase.COMPLETE:
        return ignore(f"Reset while {state.phase}: only a complete turn resets", state)
    past = PastTurn(state.turn_id or "", state.tasks)
    idle = DecisionState(
        seen_signals=state.seen_signals, wait_generation=state.wait_generation, previous=past
    )
    return idle, ()
