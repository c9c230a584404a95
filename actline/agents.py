"""The outside agents the nodes know, asked over NATS (``agents.list``): ``actline agents``
and the web console show them."""

from __future__ import annotations

from actline.bus import Bus
from actline.config import ConfigError
from actline.messages import AgentsList, AgentsListed


async def list_agents(bus: Bus, *, timeout: float = 5.0) -> AgentsListed:
    """The nodes' answer to ``agents.list`` (``RemoteError`` when they could not read it)."""
    reply = await bus.request(bus.subjects.agents_list, AgentsList(), timeout=timeout)
    if not isinstance(reply, AgentsListed):
        raise ConfigError(f"the node answered agents.list with {reply.kind}")
    return reply
