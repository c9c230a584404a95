"""The transitions of the wait for outside agents (``actline.actors.turn.state``): a DONE
(classified open, refused or late), a skip, the wait timeout. Pure.

DONE classification (a given turn id selects the turn): *open* when the running turn has
the task open (no task id: the agent's oldest open task not claimed by a queued DONE);
*refused* with ``done_wrong_agent``, ``done_already_answered`` or ``done_unknown_task``;
*late* otherwise (its turn ended).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import events as ev
from .approval_wait import resolve
from .record import RUNNING, DecisionState, QueuedDone, Step, TaskRecord, TurnPhase
from .steps import apply_done, ignore, model_checkpoint, notice, stop_waiting, waiting_for, why


def on_done(state: DecisionState, event: ev.DoneSignal) -> Step:
    """A DONE: applied in waiting, queued in thinking or acting, else refused or late."""
    if event.signal_id in state.seen_signals:
        return ignore(f"duplicate DONE {event.signal_id} from {event.agent}", state)
    effects: list[ev.Effect] = []
    verdict = _classify(state, event)
    if isinstance(verdict, _Refused):
        # not remembered: the agent may send the same signal again, corrected
        notice(state, effects, verdict.code, verdict.text, event.signal_id)
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
    state = apply_done(state, effects, event, verdict.task_id)
    if state.awaited:
        effects.append(ev.EmitProgress("waiting", state.round, waiting_for(state.awaited)))
        return state, tuple(effects)
    effects.append(ev.CancelWaitTimer(state.wait_generation))
    return model_checkpoint(state, effects)


def on_skip(state: DecisionState, event: ev.SkipWaiting) -> Step:
    """Stop waiting now (in waiting), or at the next wait for agents (queued)."""
    if state.phase not in RUNNING:
        return ignore(f"SkipWaiting while {state.phase}: nothing to skip", state)
    if event.turn_id not in (None, state.turn_id):
        return ignore(f"SkipWaiting for turn {event.turn_id}; turn {state.turn_id} runs", state)
    if state.phase is TurnPhase.WAITING and state.pending_approvals:
        decision = ev.ApprovalDecided(None, None, False, "", event.reason or "waiting skipped")
        return resolve(state, [], decision, "approval_skipped")
    if state.phase is TurnPhase.WAITING:
        effects: list[ev.Effect] = [ev.CancelWaitTimer(state.wait_generation)]
        state = stop_waiting(state, effects, "wait_skipped", f"waiting skipped{why(event.reason)}")
        return model_checkpoint(state, effects)
    if any(isinstance(p, ev.SkipWaiting) for p in state.pending):
        return ignore("SkipWaiting already queued", state)
    state = replace(state, pending=(*state.pending, event))
    return state, (ev.EmitProgress("notice", state.round, "skip queued: the next wait is skipped"),)


def on_wait_timeout(state: DecisionState, event: ev.WaitTimeout) -> Step:
    """The current wait's timer fired (an earlier wait's is stale)."""
    if state.phase is not TurnPhase.WAITING or event.generation != state.wait_generation:
        return ignore(f"stale WaitTimeout({event.generation}) while {state.phase}", state)
    effects: list[ev.Effect] = []
    if state.pending_approvals:
        reason = f"no approval within {state.limits.wait_timeout_s:g} s"
        decision = ev.ApprovalDecided(None, None, False, "", reason)
        return resolve(state, effects, decision, "approval_timeout")
    text = f"no DONE within {state.limits.wait_timeout_s:g} s"
    state = stop_waiting(state, effects, "wait_timeout", text)
    return model_checkpoint(state, effects)


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
