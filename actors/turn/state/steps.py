"""The steps many transitions of the state machine share (``actline.actors.turn.state``).

The model checkpoint (call the model again unless the budget is spent), the wait
checkpoint (wait only while an awaited agent task is open), completing a turn, applying
the DONEs that arrived in thinking or acting, and the small helpers that word notices.
All pure: each takes the state and the list of effects so far and gives the next step.
"""

from __future__ import annotations

from dataclasses import replace

from actline.messages import TurnStatus

from .. import events as ev
from .record import DecisionState, QueuedDone, Step, TaskRecord, TurnPhase


def model_checkpoint(state: DecisionState, effects: list[ev.Effect]) -> Step:
    """Apply queued DONEs, then call the model again unless the budget is spent."""
    state = drain_done(state, effects)
    spent = budget_spent(state)
    if spent is not None:
        return complete(state, effects, "budget_exhausted", error=spent, best_effort=True)
    round_ = state.round + 1
    state = replace(state, phase=TurnPhase.THINKING, round=round_)
    effects.append(ev.EmitProgress("thinking", round_, f"round {round_}"))
    effects.append(ev.CallModel(round_))
    return state, tuple(effects)


def wait_checkpoint(state: DecisionState, effects: list[ev.Effect]) -> Step:
    """Entering Waiting: apply the queued DONEs first; wait only if an awaited task is
    still open."""
    state = drain_done(state, effects)
    if not state.awaited:
        return model_checkpoint(state, effects)
    if any(isinstance(p, ev.SkipWaiting) for p in state.pending):
        rest = tuple(p for p in state.pending if not isinstance(p, ev.SkipWaiting))
        state = replace(state, pending=rest)
        state = stop_waiting(state, effects, "wait_skipped", "waiting skipped (asked earlier)")
        return model_checkpoint(state, effects)
    generation = state.wait_generation + 1
    state = replace(state, phase=TurnPhase.WAITING, wait_generation=generation)
    effects.append(ev.StartWaitTimer(generation, state.limits.wait_timeout_s))
    effects.append(ev.EmitProgress("waiting", state.round, waiting_for(state.awaited)))
    return state, tuple(effects)


def complete(
    state: DecisionState,
    effects: list[ev.Effect],
    status: TurnStatus,
    *,
    answer: str | None = None,
    error: str | None = None,
    best_effort: bool = False,
    from_replies: bool = False,
) -> Step:
    """End the turn: queued signals are recorded (DONEs as late), never dropped.
    ``best_effort``: a tool-free model call writes the answer; ``from_replies``: the answer
    is salvaged from the model's broken replies."""
    for item in state.pending:
        if isinstance(item, QueuedDone):
            effects.append(ev.RecordLateSignal(item.signal, "the turn ended before it was used"))
            detail = f"late DONE from {item.signal.agent} recorded; announced next turn"
            effects.append(ev.EmitProgress("notice", state.round, detail))
        else:
            effects.append(ev.Ignored("queued SkipWaiting unused: the turn ended"))
    if best_effort:
        effects.append(ev.FinalizeBestEffort(error or status))
    elif from_replies:
        effects.append(ev.FinalizeFromReplies(error or status))
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


def drain_done(state: DecisionState, effects: list[ev.Effect]) -> DecisionState:
    """Apply every queued DONE in arrival order; a queued SkipWaiting stays queued."""
    if not state.pending:
        return state
    for item in state.pending:
        if isinstance(item, QueuedDone):
            state = apply_done(state, effects, item.signal, item.task_id)
    return replace(state, pending=tuple(p for p in state.pending if isinstance(p, ev.SkipWaiting)))


def apply_done(
    state: DecisionState, effects: list[ev.Effect], event: ev.DoneSignal, task_id: str
) -> DecisionState:
    """Mark the DONE's task answered and record the signal."""
    tasks = tuple(replace(t, answered=True) if t.task_id == task_id else t for t in state.tasks)
    effects.append(ev.RecordSignal(event, task_id))
    effects.append(
        ev.EmitProgress("tool_result", state.round, f"DONE from {event.agent}: {event.summary}")
    )
    return replace(state, tasks=tasks, applied_signals=state.applied_signals | {event.signal_id})


def stop_waiting(
    state: DecisionState, effects: list[ev.Effect], code: str, text: str
) -> DecisionState:
    """Stop awaiting the open tasks (they stay open) and say so in a notice."""
    agents = waiting_for(state.awaited).removeprefix("waiting for ")
    tasks = tuple(replace(t, awaited=False) if not t.answered else t for t in state.tasks)
    state = replace(state, tasks=tasks)
    notice(state, effects, code, f"{text}: no DONE yet from {agents}; a later DONE still counts")
    return state


def budget_spent(state: DecisionState) -> str | None:
    """Why the turn may not call the model again (None: it may)."""
    limits = state.limits
    if state.round >= limits.max_iterations:
        return f"max_iterations ({limits.max_iterations}) reached after {state.round} model calls"
    if limits.token_budget is not None and state.tokens_used >= limits.token_budget:
        return f"token budget ({limits.token_budget}) spent: {state.tokens_used} tokens used"
    return None


# --- small helpers -------------------------------------------------------------------------


def notice(
    state: DecisionState,
    effects: list[ev.Effect],
    code: str,
    text: str,
    signal_id: str | None = None,
) -> None:
    """A notice for the model (on the timeline) and its card."""
    effects.append(ev.RecordNotice(code, text, signal_id))
    effects.append(ev.EmitProgress("notice", state.round, f"{code}: {text}"))


def ignore(reason: str, state: DecisionState) -> Step:
    """The event changes nothing."""
    return state, (ev.Ignored(reason),)


def waiting_for(tasks: tuple[TaskRecord, ...]) -> str:
    return "waiting for " + ", ".join(f"{t.agent} (task {t.task_id})" for t in tasks)


def why(reason: str) -> str:
    return f" ({reason})" if reason else ""


def by(who: str) -> str:
    return f" by {who}" if who else ""
