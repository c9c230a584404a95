"""Turn lifecycle messages: what a client submits and what it gets back; and the management
of stored conversations (``conv.manage``, below)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import Attachment, Cost, Usage, UtcDatetime, WireModel, utcnow
from .ids import Id

TurnStatus = Literal["completed", "cancelled", "budget_exhausted", "protocol_failed", "failed"]


class TurnRequest(WireModel):
    """A user turn submitted on ``al.turn.submit`` (public wire contract)."""

    kind: Literal["turn.request"] = "turn.request"
    conversation_id: Id
    turn_id: Id
    text: str
    attachments: list[Attachment] = Field(default_factory=list)
    user_id: str = ""
    timezone: str = "UTC"
    config: dict[str, Any] = Field(default_factory=dict)
    ts: UtcDatetime = Field(default_factory=utcnow)


class TurnHandoff(WireModel):
    """A turn request one node pulled, passed to the node that holds its conversation
    (cluster mode, on ``<prefix>.node.<node>.turns``), with the queue delivery it came in:
    the receiver settles that delivery itself (``ack_subject``), so the request never goes
    back through the queue. Answered ``ack`` (taken) or ``error.reply`` (the sender hands
    the request back to the queue)."""

    kind: Literal["turn.handoff"] = "turn.handoff"
    request: TurnRequest
    ack_subject: str
    """The JetStream ack subject of the delivery (``$JS.ACK.<stream>.<consumer>....``: it
    names the stream sequence and the delivery count too)."""
    from_node: str
    ts: UtcDatetime = Field(default_factory=utcnow)


class TurnAccepted(WireModel):
    """A node took the turn (public wire contract)."""

    kind: Literal["turn.accepted"] = "turn.accepted"
    conversation_id: Id
    turn_id: Id
    node: str
    ts: UtcDatetime = Field(default_factory=utcnow)


class ReActResult(WireModel):
    """The outcome of a turn, published on ``al.result.<turn_id>`` (public wire contract)."""

    kind: Literal["turn.result"] = "turn.result"
    conversation_id: Id
    turn_id: Id
    status: TurnStatus
    answer: str = ""
    followups: list[str] = Field(default_factory=list)
    sources_used: list[int] = Field(default_factory=list)
    """The SIDs the final answer and canvas cite that resolved against the pool."""
    usage: Usage = Field(default_factory=Usage)
    cost: Cost | None = None
    """What ``usage`` cost in USD (``actline.llm.pricing``); None from senders that do not
    price, and in results stored before turns were priced."""
    rounds: int = 0
    error: str | None = None
    ts: UtcDatetime = Field(default_factory=utcnow)


TurnResult = ReActResult
"""Alias: the turn result is the ReAct result."""


class Followup(WireModel):
    """A user message that lands while a turn is still running."""

    kind: Literal["turn.followup"] = "turn.followup"
    conversation_id: Id
    turn_id: Id
    text: str
    attachments: list[Attachment] = Field(default_factory=list)
    ts: UtcDatetime = Field(default_factory=utcnow)


class Feedback(WireModel):
    """User feedback on a finished turn (rating -1, 0 or +1, and free text)."""

    kind: Literal["turn.feedback"] = "turn.feedback"
    conversation_id: Id
    turn_id: Id
    rating: int = 0
    text: str = ""
    ts: UtcDatetime = Field(default_factory=utcnow)


# -- managing stored conversations: list, get, rename, delete, export, fork ----------------
#
# ``conv.manage`` is a request on ``<prefix>.conv.manage`` (``Subjects.conv_manage``), served
# by the nodes' queue group ``manage``; a node answers ``conv.managed`` or an ``error.reply``
# (``conversation_not_found``, ``conversation_busy``, ``invalid_input``, ``cluster_mode``,
# ``too_large``) whose ``detail`` names the conversation (and the running turn).
#
# What each operation takes and gives back:
#
# - ``list``: ``search`` (words, all must match), ``limit``; ``conversations`` newest first.
# - ``get``: ``conversation_id``; ``conversations`` holds it.
# - ``rename``: ``conversation_id``, ``title``; ``conversations`` holds it renamed.
# - ``delete``: ``conversation_id``; ``deleted`` says what was removed.
# - ``export``: ``conversation_id``, ``format`` (``json`` or ``markdown``); ``export``.
# - ``fork``: ``conversation_id``, ``at`` (a turn id, or its 1-based number as text),
#   ``title``; ``conversations`` holds the new conversation.

ManageOp = Literal["list", "get", "rename", "delete", "export", "fork"]


class ConversationManage(WireModel):
    """One management operation on the stored conversations (a request to the nodes)."""

    kind: Literal["conv.manage"] = "conv.manage"
    op: ManageOp
    conversation_id: Id | None = None
    title: str | None = None
    search: str | None = None
    limit: int | None = None
    format: str = "json"
    at: str | None = None
    """``fork``: the last turn kept, by id or by its 1-based number written as text."""
    ts: UtcDatetime = Field(default_factory=utcnow)


class ConversationSummary(WireModel):
    """One conversation as ``list``, ``get``, ``rename`` and ``fork`` give it back."""

    conversation_id: Id
    title: str = ""
    created: float = 0.0
    updated: float = 0.0
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float | None = None
    forked_from: Id | None = None
    forked_at_turn: Id | None = None


class ConversationRemoved(WireModel):
    """What a ``delete`` removed."""

    conversation_id: Id
    blocks: int = 0
    turns: int = 0
    files: int = 0
    artifacts: int = 0


class ConversationManaged(WireModel):
    """A node's answer to ``conv.manage``."""

    kind: Literal["conv.managed"] = "conv.managed"
    op: ManageOp
    conversations: list[ConversationSummary] = Field(default_factory=list)
    deleted: ConversationRemoved | None = None
    export: str = ""
    ts: UtcDatetime = Field(default_factory=utcnow)
