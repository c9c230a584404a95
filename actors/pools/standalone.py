"""One model or tool pool member on its own, outside a node: what ``actline pool`` and a
Ray job's pool actors run.

``Pool("models", ...)`` hosts one ``StreamerActor`` in the queue group ``streamers`` on
``<prefix>.llm.generate`` with the models a node of the same settings serves
(``NodeModels``); ``Pool("tools", ...)`` one ``ToolExecutorActor`` in the queue group
``tools`` on ``<prefix>.tools.exec`` with the tools a node of the same settings registers
(``toolbox.register_node_tools``: built-ins, skills, MCP servers), reaching a conversation's
workspace through the node that holds it (``remote_files``). A member runs at most
``concurrency`` calls and lets ``waiting`` more wait; past that it answers ``busy`` and the
caller tries another member (``actline.actors.turn.remote``).
"""

from __future__ import annotations

import contextlib
from typing import Literal

from actline.actors.configuration.models import NodeModels
from actline.actors.configuration.settings import NodeSettings
from actline.actors.tracing import sinks as trace_sinks
from actline.bus import Bus
from actline.llm import LLMSettings
from actline.llm.protocol import Model
from actline.tools.registry import ToolRegistry

from .streamer import StreamerActor
from .tool_executor import ToolExecutorActor
from .toolbox import register_node_tools

PoolKind = Literal["models", "tools"]
KINDS: tuple[PoolKind, ...] = ("models", "tools")


class Pool:
    """A pool member: ``await start()`` (it then serves), ``await stop()``."""

    def __init__(
        self,
        kind: PoolKind,
        bus: Bus,
        settings: NodeSettings,
        *,
        llm: LLMSettings | None = None,
        model: Model | None = None,
        concurrency: int | None = None,
        waiting: int | None = None,
    ) -> None:
        self.kind = kind
        self.bus = bus
        self.settings = settings
        self.llm = llm
        self.model = model
        self.concurrency = concurrency or (
            settings.streamers if kind == "models" else settings.tool_workers
        )
        self.waiting = self.concurrency if waiting is None else waiting
        self.actor: StreamerActor | ToolExecutorActor | None = None
        self.serves = ""
        """What it serves: the models or the tool names."""
        self._stack = contextlib.AsyncExitStack()

    @property
    def subject(self) -> str:
        subjects = self.bus.subjects
        return subjects.llm_generate if self.kind == "models" else subjects.tools_exec

    @property
    def queue(self) -> str:
        return StreamerActor.QUEUE if self.kind == "models" else ToolExecutorActor.QUEUE

    async def start(self) -> None:
        """Build the actor and join the queue group (``ModelConfigError``: the models cannot
        be served here; ``PermissionDenied``: the credentials may not join)."""
        tracer = trace_sinks.tracer(self.settings)
        if self.kind == "models":
            models = NodeModels.of_node(self.settings.model, self.model, llm=self.llm)
            self.actor = StreamerActor(
                self.bus,
                models,
                concurrency=self.concurrency,
                timeout_s=self.settings.model_timeout_s,
                tracer=tracer,
                max_waiting=self.waiting,
            )
            self.serves = models.served()
        else:
            registry = ToolRegistry()
            await register_node_tools(self.settings, registry, self._stack)
            self.actor = ToolExecutorActor(
                self.bus,
                registry,
                concurrency=self.concurrency,
                tracer=tracer,
                max_waiting=self.waiting,
            )
            self.serves = ", ".join(registry.names()) or "(no tools)"
        await self.actor.start()

    async def stop(self) -> None:
        """Leave the queue group (calls in flight are cancelled) and stop MCP servers."""
        if self.actor is not None:
            await self.actor.stop()
            self.actor = None
        await self._stack.aclose()
