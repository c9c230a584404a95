"""What a node shares with the conversation-scoped actors it hosts.

``Services`` bundles the bus, the store, the settings, the in-loop tools, the names of
the external tools, the node's ``TaskBook`` (the outside-agent tasks it sent and the
turns running here, so that an ``agent.done`` finds its turn), the
agents' durable inboxes (``actline.actors.agents.inboxes``), the turn queue that settles requests,
and the ownership seam (``actline.actors.ownership.ownership``). These are services handed down to
the actors, never callbacks into the node.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from actline.actors.base import Actor, Ref
from actline.actors.configuration.settings import NodeSettings
from actline.actors.configuration.turn_settings import SettingsMemo, TurnSettings
from actline.actors.ownership.ownership import Ownership
from actline.actors.pools.streamer import StreamerActor
from actline.actors.tracing.spans import Tracer
from actline.bus import Bus
from actline.storage import Store
from actline.storage.committer import Committer
from actline.tools import KnowledgeSpace
from actline.tools.hooks import ToolHooks
from actline.tools.react.core import ReactTools

from .memory import BackgroundEmbedding
from .task_book import AgentInboxes, TaskBook


class Settler(Protocol):
    """Settles the queue message of a turn (the node's ``TurnQueue``)."""

    async def settle(self, turn_id: str) -> None:
        """The turn has its result: ack its request."""
        ...

    async def requeue(self, turn_id: str) -> None:
        """Hand the request back to the queue at once (another node owns it now)."""
        ...

    async def park(self, turn_id: str) -> None:
        """The turn waits on outside input: it holds no work slot
        (``actline.actors.services.parking``)."""
        ...

    async def unpark(self, turn_id: str) -> None:
        """The turn runs again: it holds a work slot (a no-op when it is not parked)."""
        ...


class Refs(Protocol):
    """How a conversation and the decision of its running turn reach each other: in process
    (``LocalRefs``, the local shortcut) or over NATS (``actline.actors.node.post``)."""

    def conversation(self, actor: Actor, conversation_id: str) -> Ref:
        """What the decision holds of its conversation's actor."""
        ...

    def turn(self, actor: Actor, turn_id: str) -> Ref:
        """What the conversation (and the node's routing) hold of a turn's decision."""
        ...


class LocalRefs:
    """The local shortcut: both ends in this process, messages passed as values."""

    def conversation(self, actor: Actor, conversation_id: str) -> Ref:
        return actor.ref()

    def turn(self, actor: Actor, turn_id: str) -> Ref:
        return actor.ref()


@dataclass
class Services:
    """Node-wide resources handed to every conversation and decision actor."""

    bus: Bus
    store: Store
    commits: Committer
    """Group commit of every round of this node's conversations (one fsync per batch)."""
    settings: NodeSettings
    react: ReactTools
    system_prompt: str
    settler: Settler
    """Settles each turn's queue message once its result is out (or hands it back)."""
    ownership: Ownership
    """Where conversations live: this node only, or leased with a durable copy."""
    agents: AgentInboxes
    """The outside agents' durable inboxes: where ``agent.send`` stores a task."""
    knowledge: KnowledgeSpace | None = None
    external_tools: Callable[[], list[str]] = list
    approval_tools: Callable[[], list[str]] = list
    """The registered tools whose calls need approval (``actline.actors.turn.approvals``)."""
    tool_hooks: ToolHooks | None = None
    """The permission callback and hooks around every tool call (``actline.tools.hooks``)."""
    streamer: StreamerActor | None = None
    """This node's streamer pool, called in process (None: use the pool over NATS)."""
    task_book: TaskBook = field(default_factory=TaskBook)
    clock: Callable[[], float] = time.time
    tracer: Tracer = field(default_factory=Tracer)
    """Trace sessions of this node's turns and their sinks (none: spans are not exported)."""
    local_tools: bool = False
    """This node runs a tool executor: external calls go to ``al.tools.exec.<node>``, where
    the conversation's workspace is (``ToolContext.files``)."""
    refs: Refs = field(default_factory=LocalRefs)
    """How the conversation and decision actors of a turn address each other."""
    embedding: BackgroundEmbedding | None = None
    """The node's backlog of committed rows to embed for conversations holding no memsearch
    index (None: each conversation queues its own)."""
    _settings: SettingsMemo | None = field(default=None, init=False, repr=False)

    def turn_settings(self, config: Mapping[Any, Any]) -> TurnSettings:
        """A turn's settings from its config and this node's defaults (``TurnSettings.parse``;
        ``InputRefused`` for a bad config), each distinct config parsed once."""
        if self._settings is None or self._settings.defaults is not self.settings:
            self._settings = SettingsMemo(self.settings)
        return self._settings.parse(config)

    async def aclose(self) -> None:
        """Finish the background work that writes to the store, before it closes (a node
        stopping): the trace exports, the step of background embedding in flight."""
        await self.tracer.aclose()
        if self.embedding is not None:
            await self.embedding.aclose()
