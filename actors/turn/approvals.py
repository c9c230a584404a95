"""Approvals: which tool calls wait for a human (or an approver agent).

A call needs approval when its tool matches one of the turn's ``approval_tools`` patterns
(``fnmatch``, e.g. ``code.*``). The patterns are the union of the node's
``ACTLINE_APPROVE_TOOLS``, the tools registered with ``needs_approval`` (registry, MCP
config ``"approval": true``) and the turn config's ``approve_tools``: a turn may add
patterns, never remove one the node requires (a client must not lift an operator's
guard). ``agent.send`` is not an approval-gated tool (it only stores a task): a pattern
that names it alone (``agent.send``, ``agent.*``) is refused where the settings are read
(``actline.actors.configuration.profiles.ungated``): the node's setting at start, a turn config
when its turn arrives, rather than silently never matching.

The state machine (``actline.actors.turn.state``) holds a decision's calls in Waiting while an
approval is pending; the DecisionActor turns its ``DenyCall`` effects into the call's
blocks (``denied_writes``) and answers the sender of a ``turn.approval`` with
``approval_reply``. Nothing here does I/O.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from actline.messages import Ack, ErrorReply, new_id

from . import events as ev
from .blocks import call_block
from .mailbox import ToolOutcome, Write


def needs_approval(tool: str, patterns: Iterable[str]) -> bool:
    """True when ``tool`` matches one of ``patterns`` (fnmatch, case-sensitive)."""
    return any(fnmatch.fnmatchcase(tool, p) for p in patterns)


def gate(call: ev.ToolSpec, patterns: tuple[str, ...]) -> ev.ToolSpec:
    """``call`` with a fresh approval id when its tool needs approval."""
    if not patterns or not needs_approval(call.tool, patterns):
        return call
    return ev.ToolSpec(call.call_id, call.tool, call.params, new_id("ap-"))


def denied_writes(turn_id: str, effect: ev.DenyCall, ts: float) -> tuple[Write, ...]:
    """The call block and the failed result of a call that was not approved."""
    call = effect.call
    data = {"status": "error", "error": effect.text, "code": effect.code}
    return (
        call_block(turn_id, call.call_id, call.tool, call.params, ts),
        ToolOutcome(call.call_id, call.tool, False, data),
    )


def approval_reply(turn_id: str, effects: tuple[ev.Effect, ...]) -> Ack | ErrorReply:
    """What the sender of a ``turn.approval`` is told, from what the state machine did."""
    for effect in effects:
        if isinstance(effect, ev.ApprovalVerdict):
            if effect.ok:
                return Ack(ref=turn_id, detail=effect.text)
            return ErrorReply(code=effect.code, message=effect.text)
    return ErrorReply(code="not_waiting", message=f"turn {turn_id}: the approval was not applied")
