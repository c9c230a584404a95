"""Tool-execution messages between a decision loop and the ToolExecutorActor pool."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import ArtifactRef, UtcDatetime, WireModel, utcnow
from .ids import Id


class ToolCall(WireModel):
    """One call of an external tool."""

    kind: Literal["tool.call"] = "tool.call"
    conversation_id: Id
    turn_id: Id
    call_id: Id
    tool: str
    params: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = 60.0
    ts: UtcDatetime = Field(default_factory=utcnow)


class ToolResult(WireModel):
    """The outcome of one tool call; ``ok`` is False with ``error`` set on failure."""

    kind: Literal["tool.result"] = "tool.result"
    conversation_id: Id
    turn_id: Id
    call_id: Id
    tool: str
    ok: bool = True
    content: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    error: str | None = None
    ts: UtcDatetime = Field(default_factory=utcnow)
