"""The actors of actline (DESIGN.md §2): the node and what it hosts.

- ``Node`` (``actors.node``): pulls turn requests from the durable queue, hosts the
  conversation-scoped actors and this node's pools, routes DONE signals.
- ``ConversationActor``: one conversation's timeline, its turns one after another.
- ``DecisionActor``: one turn's state machine, a pure ``transition(state, event) ->
  (state, effects)`` (``actors.state``, events and effects in ``actors.events``)
  whose effects it executes.
- ``StreamerActor`` (queue group ``streamers``) and ``ToolExecutorActor`` (queue group
  ``tools``): model calls and external tools.
- ``Client``: the turn protocol from the outside; ``AgentInbox``: an outside agent's
  durable inbox (hello, pull, beat, DONE).
"""

from .agent_side import AgentInbox
from .client import Client, TurnHandle
from .conversation import ConversationActor
from .decision import DecisionActor
from .errors import NoTurnQueue
from .events import Effect, Event, Limits, event_from_message
from .node import Node
from .settings import NodeSettings
from .state import DecisionState, TurnPhase, transition
from .streamer import StreamerActor
from .tool_executor import ToolExecutorActor, ToolOutput, ToolRegistry

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
