"""Bus-level messages: acknowledgements, error replies and dead letters."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import UtcDatetime, WireModel, utcnow


class ErrorReply(WireModel):
    """The reply to a request that could not be served.

    ``code`` is a short machine-readable reason (``decode_error``,
    ``handler_error``, ``no_outstanding_task``, ...); ``message`` says what
    happened and what to do next.
    """

    kind: Literal["error.reply"] = "error.reply"
    code: str
    message: str
    subject: str = ""
    detail: dict[str, Any] = Field(default_factory=dict)
    ts: UtcDatetime = Field(default_factory=utcnow)


class Ack(WireModel):
    """The reply to a request that was accepted (a followup joined, a DONE routed).

    ``ref`` names what was accepted (a turn or task id); ``detail`` says what happens next.
    """

    kind: Literal["ack"] = "ack"
    ref: str = ""
    detail: str = ""
    ts: UtcDatetime = Field(default_factory=utcnow)


class DeadLetter(WireModel):
    """A payload that could not be decoded, republished on ``<prefix>.deadletter``."""

    kind: Literal["bus.deadletter"] = "bus.deadletter"
    subject: str
    reason: str
    raw: bytes
    raw_size: int
    truncated: bool = False
    ts: UtcDatetime = Field(default_factory=utcnow)
