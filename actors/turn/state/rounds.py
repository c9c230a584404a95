"""The transitions of a round (``actline.actors.turn.state``): the model's events while the
turn is thinking and the end of its tool round while it is acting. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from .. import events as ev
from .approval_wait import approvals_of, await_approvals
from .record import DecisionState, Step, TaskRecord, TurnPhase
from .steps import complete, ignore, model_checkpoint, notice, wait_checkpoint


def on_model_event(state: DecisionState, event: ev.ModelEvent) -> Step:
    """What the model call of the running round came back with (stale ones are ignored)."""
    name = type(event).__name__
    if state.phase is not TurnPhase.THINKING:
        return ignore(f"{name}(round {event.round}) while {state.phase}", state)
    if event.round != state.round:
        return ignore(f"{name}(round {event.round}) is stale: round {state.round} runs", state)
    state = replace(state, tokens_used=state.tokens_used + max(event.tokens, 0))
    effects: list[ev.Effect] = []
    match event:
        case ev.ModelAnswered():
            return complete(state, effects, "completed", answer=event.answer)
        case ev.ModelFailed():
            return complete(state, effects, "failed", error=f"model call failed: {event.error}")
        case ev.AnswerDeferred():
            detail = f"answer deferred: {event.reason or 'new user input'}"
            effects.append(ev.EmitProgress("notice", state.round, detail))
            return model_checkpoint(state, effects)
        case ev.ProtocolViolation():
            return violated(state, effects, event.code, event.detail or event.code)
        case ev.CallRefused():
            count = state.consecutive_refusals + 1
            state = replace(state, consecutive_refusals=count)
            notice(state, effects, f"protocol_violation.{event.code}", event.detail or event.code)
            if count >= state.limits.max_consecutive_refusals:
                error = f"{count} decisions in a row were refused (last: {event.code})"
                return complete(state, effects, "failed", error=error)
            return model_checkpoint(state, effects)
        case ev.ModelDecided():
            return _decided(state, event, effects)
    return ignore(f"unknown model event {name}", state)  # pragma: no cover - closed union


def _decided(state: DecisionState, event: ev.ModelDecided, effects: list[ev.Effect]) -> Step:
    if not event.calls and not event.agent_calls:
        return violated(
            state, effects, "empty_decision", "the decision had no tool call and no answer"
        )
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
    state = replace(
        state,
        consecutive_refusals=0,
        consecutive_violations=0,
        tasks=state.tasks + tuple(new_tasks),
    )
    if not event.calls:
        return wait_checkpoint(state, effects)
    if any(c.approval_id is not None for c in event.calls):
        state = replace(state, held=event.calls, approvals=approvals_of(event.calls))
        return await_approvals(state, effects)
    effects.append(ev.RunTools(state.round, event.calls))
    return replace(state, phase=TurnPhase.ACTING), tuple(effects)


def violated(state: DecisionState, effects: list[ev.Effect], code: str, text: str) -> Step:
    """A reply broke the decision protocol: a notice, and a repair round while the turn has
    one left; past ``max_repair_rounds`` in a row the turn ends ``protocol_failed`` with an
    answer salvaged from what the model said."""
    count = state.consecutive_violations + 1
    state = replace(state, consecutive_violations=count)
    notice(state, effects, f"protocol_violation.{code}", text)
    repairs = state.limits.max_repair_rounds
    if count > repairs:
        error = (
            f"the model broke the decision protocol {count} times in a row "
            f"({repairs} repair round{'s' if repairs != 1 else ''}; last: {code}: {text})"
        )
        return complete(state, effects, "protocol_failed", error=error, from_replies=True)
    return model_checkpoint(state, effects)


def on_tools_finished(state: DecisionState, event: ev.ToolsFinished) -> Step:
    """The round's tools are done: the wait checkpoint (stale ones are ignored)."""
    if state.phase is not TurnPhase.ACTING:
        return ignore(f"ToolsFinished(round {event.round}) while {state.phase}", state)
    if event.round != state.round:
        return ignore(f"ToolsFinished(round {event.round}) is stale: round {state.round}", state)
    effects: list[ev.Effect] = [
        ev.EmitProgress("tool_result", state.round, event.detail or "tools done")
    ]
    return wait_checkpoint(state, effects)
