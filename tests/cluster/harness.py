"""Cluster-mode nodes for the takeover tests: in process, the extractive model over
``examples/kb``, a long lease (the tests end leases themselves) and no fsync."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actline.actors import Node, NodeSettings
from actline.bus import Bus
from actline.llm import ExtractiveModel
from actline.messages import Subjects
from actline.tools import KnowledgeSpace

KB = Path(__file__).resolve().parents[2] / "examples" / "kb"


async def start(
    url: str,
    home: Path,
    node_id: str,
    *,
    subject_names: Subjects | None = None,
    **overrides: Any,
) -> Node:
    """A started cluster-mode node ``node_id`` with its own store under ``home``.

    ``url``: one server, or a cluster's servers comma-separated (``EmbeddedCluster.url``).
    ``overrides``: other ``NodeSettings`` (``cluster=False`` for a single-mode node).
    """
    bus = await Bus.connect(url, subject_names=subject_names)
    settings = NodeSettings(
        **{
            "home": home / node_id,
            "node_id": node_id,
            "cluster": True,
            "ack_wait_s": 5.0,
            "followup_grace_s": 0.0,
            "storage_sync": False,
            **overrides,
        }
    )
    # BM25 knowledge search, as the node processes of the kill loops run (ACTLINE_EMBEDDINGS=0):
    # their answers are compared with these nodes'
    knowledge = KnowledgeSpace(KB, embedder=None)
    node = Node(bus, settings, model=ExtractiveModel(), knowledge=knowledge)
    try:
        await node.start()
    except BaseException:
        await bus.close()
        raise
    return node
