"""The checkpoint form of a running turn: what it persists each round, and the
``ResumeReAct`` that continues it from that record after a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from .. import events as ev
from .record import DecisionState, TurnPhase


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
        "consecutive_violations": state.consecutive_violations,
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
        consecutive_violations=int(record.get("consecutive_violations", 0)),
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


_STATUS: dict[str, Literal["pending", "approved", "denied"]] = {
    "pending": "pending",
    "approved": "approved",
    "denied": "denied",
}
