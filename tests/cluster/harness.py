"""Cluster-mode nodes for the takeover tests: in process, the extractive model over
``examples/kb``, a long lease (the tests end leases themselves) and no fsync."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actors import Node, NodeSettings
from bus import Bus
from llm import ExtractiveModel
from tools import KnowledgeSpace

KB = Path(__file__).resolve().parents[2] / "examples" / "kb"


async def start(url: str, home: Path, node_id: str, **changes: Any) -> Node:
    """A started cluster-mode node ``node_id`` with its own store under ``home`` (``changes``:
    other settings)."""
    bus = await Bus.connect(url)
    settings = NodeSettings(
        home=home / node_id,
        node_id=node_id,
        cluster=True,
        lease_ttl_s=30.0,
        ack_wait_s=5.0,
        followup_grace_s=0.0,
        storage_sync=False,
    ).with_(**changes)
    node = Node(bus, settings, model=ExtractiveModel(), knowledge=KnowledgeSpace(KB))
    await node.start()
    return node
