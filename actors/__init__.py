"""The actors of actline: the node and what it hosts, and the client side of the protocol.

Sub-packages, lowest first (a package imports only those listed before it, and the
modules at this level: ``base``, the actor primitive, and ``errors``):

- ``configuration``: the node's settings, the settings file, profiles, input checks and
  a turn's settings;
- ``ownership``: where a conversation lives (leases, the durable copy of timelines);
- ``client``: the turn protocol from outside (``Client``), an outside agent's side of its
  inbox, the durable results both sides read;
- ``tracing``: trace spans, their sinks, the diagnostic log lines;
- ``pools``: the StreamerActor (model calls) and ToolExecutorActor (external tools);
- ``services``: what a node shares with the actors it hosts (the task book, parked
  turns, background embedding);
- ``turn``: the DecisionActor and its pure state machine, events, replies, tool rounds,
  approvals, the watchdog;
- ``conversation``: the ConversationActor (intake, commits, files, compaction);
- ``agents``: outside agents' inboxes, the DONE queue and its routing;
- ``node``: the process that serves turns from the durable queue and hosts all of these;
- ``cluster``: actline as a Ray job (N node actors) and the local cluster demo.

The names below are loaded on first use, so that ``import actline.actors.client`` does
not pull in the node.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client.agent import AgentInbox
    from .client.client import Client, TurnHandle
    from .configuration.settings import NodeSettings
    from .configuration.turn_settings import Limits
    from .conversation.actor import ConversationActor
    from .errors import NoTurnQueue
    from .node.node import Node
    from .pools.streamer import StreamerActor
    from .pools.tool_executor import ToolExecutorActor, ToolOutput, ToolRegistry
    from .turn.decision import DecisionActor
    from .turn.events import Effect, Event, event_from_message
    from .turn.state import DecisionState, TurnPhase, transition

_WHERE = {
    "AgentInbox": "client.agent",
    "Client": "client.client",
    "TurnHandle": "client.client",
    "NodeSettings": "configuration.settings",
    "Limits": "configuration.turn_settings",
    "ConversationActor": "conversation.actor",
    "NoTurnQueue": "errors",
    "Node": "node.node",
    "StreamerActor": "pools.streamer",
    "ToolExecutorActor": "pools.tool_executor",
    "ToolOutput": "pools.tool_executor",
    "ToolRegistry": "pools.tool_executor",
    "DecisionActor": "turn.decision",
    "Effect": "turn.events",
    "Event": "turn.events",
    "event_from_message": "turn.events",
    "DecisionState": "turn.state",
    "TurnPhase": "turn.state",
    "transition": "turn.state",
}

__all__ = [
    "AgentInbox",
    "Client",
    "ConversationActor",
    "DecisionActor",
    "DecisionState",
    "Effect",
    "Event",
    "Limits",
    "NoTurnQueue",
    "Node",
    "NodeSettings",
    "StreamerActor",
    "ToolExecutorActor",
    "ToolOutput",
    "ToolRegistry",
    "TurnHandle",
    "TurnPhase",
    "event_from_message",
    "transition",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
