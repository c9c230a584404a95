"""Cluster-mode nodes started at the same moment on a fresh three-server NATS cluster (every
stream and bucket at 3 replicas) all start and serve: they make the same streams, buckets and
consumers together, and each waits for what the other made (and for its leader) instead of
crashing on its first write. Each attempt has a subject prefix of its own, so its nodes make
everything anew (a fresh prefix crashed a node as often as a fresh cluster did).

The attempts are ``bench.cluster.start_together``'s (its ``--attempts 10`` is the longer run).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actline.bus import EmbeddedCluster
from bench.cluster.start_together import attempt

pytestmark = pytest.mark.timeout(600)

ATTEMPTS = 2
"""Per node count: before nodes waited for each other, about two attempts in three crashed
a node (7 of 10 with two nodes, 6 of 10 with three)."""


@pytest.mark.parametrize("count", [2, 3])
async def test_nodes_started_together_all_start_and_a_turn_completes(
    nats_cluster: EmbeddedCluster, tmp_path: Path, count: int
) -> None:
    for i in range(ATTEMPTS):
        got = await attempt(nats_cluster.url, tmp_path / f"a{i}", count)
        assert got.errors == [] and got.started == count, got
        assert got.turn == "completed", got


async def test_node_processes_started_together_all_start_and_a_turn_completes(
    nats_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    got = await attempt(nats_cluster.url, tmp_path, 3, "procs")
    assert got.errors == [] and got.started == 3, got
    assert got.turn == "completed", got
