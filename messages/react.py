"""Decision-loop messages: progress cards, stream deltas and user controls."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import UtcDatetime, WireModel, utcnow
from .ids import Id

Phase = Literal["thinking", "tool_call", "tool_result", "waiting", "complete", "notice"]


class ReActProgress(WireModel):
    """One transition of the decision loop: a card on the client (public wire contract)."""

    kind: Literal["react.progress"] = "react.progress"
    conversation_id: Id
    turn_id: Id
    phase: Phase
    round: int = 0
    detail: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    ts: UtcDatetime = Field(default_factory=utcnow)


class StreamDelta(WireModel):
    """A piece of one output channel, in order by ``seq`` (public wire contract)."""

    kind: Literal["stream.delta"] = "stream.delta"
    conversation_id: Id
    turn_id: Id
    channel: str
    text: str
    seq: int
    round: int = 0
    completed: bool = False
    """True on the last delta of a channel that streamed text in one model call (its text
    is empty); a channel the call never wrote gets none."""
    key: str | None = None
    """Optional: the canvas key this delta belongs to (``channel`` ``canvas``): a top-level
    key of the model's canvas JSON object, or the path of a file written for display
    (``react.write`` on the canvas channel or with ``kind`` ``display``). None: the delta is
    text of the channel itself. A client shows one titled panel per key."""
    format: str = ""
    """Optional: how to render the text (``markdown``, ``text``, ``html``, ``json``, or a
    file's mime type for a written display); empty: the channel's own format."""
    replace: bool = False
    """Optional, keyed deltas only: True on the first delta of a key's value in one model
    call or write; the client drops what it showed for that key before adding this text."""
    unresolved: list[int] = Field(default_factory=list)
    """Optional, on a ``completed`` delta: the SIDs the channel (or key) cited that match no
    source in the conversation's pool. The text shows each as ``[?<sid>]``."""
    ts: UtcDatetime = Field(default_factory=utcnow)


class SkipWaiting(WireModel):
    """Stop waiting for outside agents and resume thinking (public wire contract)."""

    kind: Literal["react.skip_waiting"] = "react.skip_waiting"
    turn_id: Id
    reason: str = ""
    ts: UtcDatetime = Field(default_factory=utcnow)


class ApprovalDecision(WireModel):
    """Approve or deny a running turn's pending tool call(s) (a request on the approver's
    own ``al.approve.<role>.<name>.<tid>[.<tool>]``; the node answers ``ack`` or ``error``).

    ``approval_id`` None: every approval the turn has pending (of ``tool`` when the
    subject names one). ``reason`` says why. ``by`` (who decided) and ``tool`` are set by
    the node from the subject, which only that approver's credentials may publish to:
    what a sender writes there is replaced. Both reach the timeline."""

    kind: Literal["turn.approval"] = "turn.approval"
    turn_id: Id
    approval_id: Id | None = None
    approved: bool
    by: str = ""
    reason: str = ""
    tool: str = ""
    ts: UtcDatetime = Field(default_factory=utcnow)


class CancelReAct(WireModel):
    """Cancel the turn from any state (public wire contract)."""

    kind: Literal["react.cancel"] = "react.cancel"
    turn_id: Id
    reason: str = ""
    ts: UtcDatetime = Field(default_factory=utcnow)
