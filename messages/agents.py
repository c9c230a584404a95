"""Outside-agent messages: the task handed to an agent and its DONE signal."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ArtifactRef, UtcDatetime, WireModel, utcnow
from .ids import AgentName, Id, new_id


class AgentTask(WireModel):
    """Work handed to an outside agent on ``al.agent.<agent>.inbox`` (public wire contract)."""

    kind: Literal["agent.task"] = "agent.task"
    agent: AgentName
    conversation_id: Id
    turn_id: Id
    task_id: Id
    text: str
    done_subject: str
    ts: UtcDatetime = Field(default_factory=utcnow)


class DoneSignal(WireModel):
    """An outside agent's answer on ``al.agent.done`` (public wire contract).

    ``turn_id`` and ``task_id`` may be absent (a human typing DONE): the node then
    routes the signal to the oldest outstanding task of ``agent``.
    """

    kind: Literal["agent.done"] = "agent.done"
    agent: AgentName
    turn_id: Id | None = None
    task_id: Id | None = None
    signal_id: Id = Field(default_factory=new_id)
    summary: str = ""
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    ts: UtcDatetime = Field(default_factory=utcnow)
