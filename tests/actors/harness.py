"""Shared pieces of the actor tests: scripted models per conversation, nodes, clients."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

from actline.actors import NodeSettings
from actline.actors.client.client import Client, TurnHandle
from actline.actors.configuration.models import NodeModels
from actline.actors.node.node import Node
from actline.actors.pools.streamer import StreamerActor
from actline.actors.pools.tool_executor import ToolExecutorActor, ToolRegistry
from actline.bus import Bus
from actline.llm import ReplayModel
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest
from actline.storage import Store
from actline.timeline.blocks import NOTICE, SIGNAL_DONE
from actline.tools import KnowledgeSpace

KB = Path(__file__).resolve().parents[2] / "examples" / "kb"
SHORTCUT = os.environ.get("ACTLINE_LOCAL_SHORTCUT", "1").strip().lower() not in ("0", "false")
"""``ACTLINE_LOCAL_SHORTCUT=0`` runs the actor tests with every hop of a turn over NATS
(``make test`` runs the turn behaviours both ways)."""


def say(
    thinking: str = "",
    *,
    calls: Iterable[tuple[str, Mapping[str, Any]]] = (),
    answer: str | None = None,
    followups: Iterable[str] = (),
    notes: str = "",
    decision: str | None = None,
) -> str:
    """One model output in the channel protocol."""
    parts = [f"<channel:thinking>{thinking}</channel:thinking>"] if thinking else []
    if decision is None:
        if answer is not None:
            body: dict[str, Any] = {"action": "complete"}
        else:
            body = {
                "action": "call_tools",
                "calls": [{"tool": t, "params": dict(p)} for t, p in calls],
            }
        if notes:
            body["notes"] = notes
        decision = json.dumps(body)
    parts.append(f"<channel:decision>{decision}</channel:decision>")
    if answer is not None:
        parts.append(f"<channel:answer>{answer}</channel:answer>")
        parts.append(f"<channel:followup>{json.dumps(list(followups))}</channel:followup>")
    return "".join(parts)


class Scripted:
    """A model whose outputs are scripted per conversation (ReplayModel each)."""

    name = "scripted"

    def __init__(self, scripts: Mapping[str, Iterable[str]] | None = None, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.models: dict[str, ReplayModel] = {}
        for cid, outputs in (scripts or {}).items():
            self.script(cid, outputs)

    def script(self, cid: str, outputs: Iterable[str]) -> ReplayModel:
        model = ReplayModel.of(list(outputs), **self.kwargs)
        self.models[cid] = model
        return model

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        return self.models[request.conversation_id].stream(request)


def settings(home: Path, **changes: Any) -> NodeSettings:
    base = NodeSettings(
        home=home,
        node_id="n1",
        followup_grace_s=0.0,
        ack_wait_s=5.0,
        wait_timeout_s=30.0,
        storage_sync=False,
        max_context_tokens=200_000,
        local_shortcut=SHORTCUT,
        model_titles=False,  # scripted model servers answer the turn's rounds only
    )
    return base.with_(**changes)


class PooledNode(Node):
    """A node whose model and tool calls go to pools on connections of their own (the
    local shortcut off): a ``StreamerActor`` with the test's model and a
    ``ToolExecutorActor`` with the node's tools and no workspace of its own (it reaches
    the conversation's files through the node, as a pool elsewhere does). They stop with
    the node."""

    pools: list[StreamerActor | ToolExecutorActor]
    pool_bus: Bus | None = None

    async def start_pools(self, model: Any, streamers: int, tool_workers: int) -> None:
        self.pools = []
        self.pool_bus = await Bus.connect(self.bus.url, subject_names=self.bus.subjects)
        if streamers:
            models = NodeModels.of_node(self.settings.model, model)
            self.pools.append(StreamerActor(self.pool_bus, models, concurrency=streamers))
        if tool_workers:
            executor = ToolExecutorActor(self.pool_bus, self.registry, concurrency=tool_workers)
            self.pools.append(executor)
        for pool in self.pools:
            await pool.start()

    async def stop(self) -> None:
        await super().stop()
        for pool in getattr(self, "pools", ()):
            await pool.stop()
        if self.pool_bus is not None:
            await self.pool_bus.close()
            self.pool_bus = None


async def start_node(
    bus: Bus,
    home: Path,
    model: Any,
    *,
    store: Store | None = None,
    registry: ToolRegistry | None = None,
    **changes: Any,
) -> Node:
    """A started node; with the local shortcut off (``SHORTCUT``) its model and tool calls
    go to pools on connections of their own (``PooledNode``)."""
    wanted = settings(home, **changes)
    if wanted.local_shortcut:
        node = Node(
            bus, wanted, model=model, store=store, registry=registry, knowledge=KnowledgeSpace(KB)
        )
        await node.start()
        return node
    pooled = PooledNode(
        bus,
        wanted.with_(streamers=0, tool_workers=0),
        model=model,
        store=store,
        registry=registry,
        knowledge=KnowledgeSpace(KB),
    )
    # the pools first: a turn the node resumes as it starts calls them at once (the tool
    # pool shares the node's registry, which the node fills as it starts)
    await pooled.start_pools(model, wanted.streamers, wanted.tool_workers)
    await pooled.start()
    return pooled


async def run_turn(client: Client, text: str, cid: str, **kwargs: Any) -> TurnHandle:
    handle = await client.submit(text, conversation_id=cid, **kwargs)
    await handle.wait(30)
    return handle


class BlockViews:
    """The blocks of a node's loaded conversations, for test setups that hold ``node``."""

    node: Node

    def blocks(self, cid: str) -> list[Any]:
        return list(self.node.conversations[cid].tl.blocks)

    def signals(self, cid: str, task_id: str) -> list[Any]:
        """The ``signal.done`` blocks of one task (on time or late)."""
        return [
            b
            for b in self.blocks(cid)
            if b.type == SIGNAL_DONE and (b.meta or {}).get("task_id") == task_id
        ]

    def notices(self, cid: str, code: str) -> list[Any]:
        return [b for b in self.blocks(cid) if b.type == NOTICE and b.meta.get("code") == code]
