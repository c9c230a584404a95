"""Outside-agent messages: the task handed to an agent, its DONE signal, and the agent's
hello and the agent list.

``agent.task`` and ``agent.done`` are public wire contract. The others
are how an agent joins its durable inbox and how operators see agents; they may still
change (a plain nats-py agent uses them as ``docs/architecture.md`` shows):

- ``agent.hello`` (a request on ``<prefix>.agent.<name>.hello``), answered by
  ``agent.welcome``: the stream and durable consumer the agent pulls its tasks from, and
  how often to say hello again (presence).
- ``agents.list`` (a request on ``<prefix>.agents.list``), answered by ``agents.listed``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ArtifactRef, UtcDatetime, WireModel, utcnow
from .ids import AgentName, Id, new_id


class AgentTask(WireModel):
    """Work handed to an outside agent on ``al.agent.<agent>.inbox`` (public wire contract).

    Stored in the task stream until it is answered or no longer awaited; ``done_subject``
    is the agent's own DONE subject (``al.agent.<agent>.done``).
    """

    kind: Literal["agent.task"] = "agent.task"
    agent: AgentName
    conversation_id: Id
    turn_id: Id
    task_id: Id
    text: str
    done_subject: str
    ts: UtcDatetime = Field(default_factory=utcnow)


class DoneSignal(WireModel):
    """An outside agent's answer on its own ``al.agent.<agent>.done`` (public wire contract;
    the shared ``al.agent.done`` is accepted only with authentication off).

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


class AgentHello(WireModel):
    """An agent says it is there (a request on ``<prefix>.agent.<agent>.hello``).

    ``first`` on the first hello after the agent started: every task still open for it is
    delivered (again). Repeated every ``agent.welcome.beat_s`` with ``first=False`` to stay
    present.
    """

    kind: Literal["agent.hello"] = "agent.hello"
    agent: AgentName
    first: bool = False
    ts: UtcDatetime = Field(default_factory=utcnow)


class AgentWelcome(WireModel):
    """A node's answer to ``agent.hello``: pull tasks from the durable consumer ``consumer``
    of the stream ``stream`` (explicit ack), and say hello again every ``beat_s`` seconds."""

    kind: Literal["agent.welcome"] = "agent.welcome"
    agent: AgentName
    stream: str
    consumer: str
    beat_s: float
    node: str = ""
    ts: UtcDatetime = Field(default_factory=utcnow)


class OpenTask(WireModel):
    """A task still waiting for its agent (in ``agents.listed``)."""

    task_id: Id
    turn_id: Id
    conversation_id: Id
    sent_at: UtcDatetime


class AgentStatus(WireModel):
    """One agent in ``agents.listed``: connected or not, last seen, its open tasks."""

    agent: AgentName
    present: bool
    last_seen: UtcDatetime | None = None
    """The last hello a node recorded (None: none seen while its presence lasted)."""
    node: str = ""
    """The node that recorded that hello."""
    open_tasks: list[OpenTask] = Field(default_factory=list)


class AgentsList(WireModel):
    """Which agents are there? (a request on ``<prefix>.agents.list``, served by nodes)."""

    kind: Literal["agents.list"] = "agents.list"
    ts: UtcDatetime = Field(default_factory=utcnow)


class AgentsListed(WireModel):
    """The answer to ``agents.list``: every agent present or with an open task, by name."""

    kind: Literal["agents.listed"] = "agents.listed"
    agents: list[AgentStatus] = Field(default_factory=list)
    ts: UtcDatetime = Field(default_factory=utcnow)
