"""The approval wait of the state machine (``actline.actors.turn.state``).

A decision with a call that needs approval holds every ordinary call of that decision in
Waiting, with the approval card, until each approval is resolved (``ApprovalDecided``, or
denied all at once by a skip or the wait timeout); then the denied calls get their
refusal and the others run as one tool round. Pure, as the state machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from .. import events as ev
from .record import DecisionState, Step, TurnPhase
from .steps import by, notice, wait_checkpoint, why


def on_approval(state: DecisionState, event: ev.ApprovalDecided) -> Step:
    """``ApprovalDecided``: refused (``ApprovalVerdict``) unless it names a pending
    approval of the running turn (or none: every pending one)."""
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
    if not any(_covers(event, a) for a in pending):
        tools = ", ".join(sorted({a.tool for a in pending}))
        text = (
            f"{event.by or 'this approver'} decides calls of {event.tool} only; "
            f"turn {state.turn_id} waits on {tools}: nothing was approved or denied"
        )
        return state, (ev.ApprovalVerdict(False, "not_approver_of_tool", text),)
    return resolve(state, [], event, "approval_denied")


def _covers(event: ev.ApprovalDecided, approval: ev.Approval) -> bool:
    """True when ``event`` decides ``approval``: its id (or none: every pending one), of
    the event's tool when the approver decides one tool only."""
    return event.approval_id in (None, approval.approval_id) and event.tool in ("", approval.tool)


def await_approvals(state: DecisionState, effects: list[ev.Effect]) -> Step:
    """Hold the decision's calls in Waiting until every approval is resolved."""
    generation = state.wait_generation + 1
    state = replace(state, phase=TurnPhase.WAITING, wait_generation=generation)
    effects.append(ev.StartWaitTimer(generation, state.limits.wait_timeout_s))
    effects.append(_approval_card(state))
    return state, tuple(effects)


def resolve(
    state: DecisionState, effects: list[ev.Effect], event: ev.ApprovalDecided, code: str
) -> Step:
    """Apply one approval decision (every pending approval when it names none); release
    the held calls once none is pending."""
    status: Literal["approved", "denied"] = "approved" if event.approved else "denied"
    resolved: list[ev.Approval] = []
    approvals: list[ev.Approval] = []
    for a in state.approvals:
        if a.status == "pending" and _covers(event, a):
            a = replace(a, status=status, by=event.by, reason=event.reason,
                        code="" if event.approved else code)  # fmt: skip
            resolved.append(a)
        approvals.append(a)
    state = replace(state, approvals=tuple(approvals))
    names = ", ".join(f"{a.tool} ({a.approval_id})" for a in resolved)
    verb = "approved" if event.approved else "denied"
    detail = f"{names} {verb}{by(event.by)}{why(event.reason)}"
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
            f"{by(found.by if found else '')}{why(found.reason if found else '')}"
        )
        effects.append(ev.DenyCall(call, code, text))
        notice(state, effects, code, text)
    state = replace(state, held=(), approvals=())
    if not run:
        return wait_checkpoint(state, effects)
    effects.append(ev.RunTools(state.round, tuple(run)))
    return replace(state, phase=TurnPhase.ACTING), tuple(effects)


def approvals_of(calls: tuple[ev.ToolSpec, ...]) -> tuple[ev.Approval, ...]:
    """A pending approval for each call that needs one."""
    return tuple(
        ev.Approval(c.approval_id, c.call_id, c.tool, c.params)
        for c in calls
        if c.approval_id is not None
    )


def resumed_approvals(
    held: tuple[ev.ToolSpec, ...], stored: tuple[ev.Approval, ...]
) -> tuple[ev.Approval, ...]:
    """Each held call's approval as stored (pending when none was stored: never approved
    by default); at least one stays pending, or the approval wait would not hold."""
    by_id = {a.approval_id: a for a in stored}
    approvals = tuple(
        replace(by_id.get(a.approval_id, a), call_id=a.call_id, tool=a.tool, params=a.params)
        for a in approvals_of(held)
    )
    if any(a.status == "pending" for a in approvals):
        return approvals
    return tuple(replace(a, status="pending", by="", reason="", code="") for a in approvals)


def approval_text(pending: tuple[ev.Approval, ...]) -> str:
    calls = ", ".join(f"{a.tool}({_args(a.params)}) [{a.approval_id}]" for a in pending)
    return f"waiting for approval of {calls}"


def _approval_card(state: DecisionState) -> ev.EmitProgress:
    pending = state.pending_approvals
    data = {
        "approvals": [
            {"approval_id": a.approval_id, "call_id": a.call_id, "tool": a.tool,
             "params": dict(a.params)}
            for a in pending
        ]
    }  # fmt: skip
    return ev.EmitProgress("waiting", state.round, approval_text(pending), data)


def _args(params: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return text if len(text) <= 200 else text[:199] + "…"
