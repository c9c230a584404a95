"""``make cluster-demo``: a local Ray cluster with 2 node actors serving the demo's conversations.

A local NATS cluster (``bus.EmbeddedCluster``: three nats-servers with routes between them,
JetStream on each), ``ray.init`` on this machine, two node actors in cluster mode (leases in
JetStream KV, every round copied to JetStream; every stream and bucket with 3 replicas, as
the cluster has three servers), and the 12 turns of ``examples/cluster_turns.jsonl``
(6 conversations, 2 turns each) submitted through ``actline.actors.cluster.ray_job`` with every
server's URL; the results go to ``.actline-cluster/results.jsonl``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from actline.bus import Bus, EmbeddedCluster

from .ray_job import main as ray_job

ROOT = Path(__file__).resolve().parents[2]


async def _replicas(url: str) -> dict[str, int]:
    """Each actline stream's replica count (the admin credentials of this process's cluster)."""
    bus = await Bus.connect(url, name="actline-cluster-demo")
    try:
        infos = await bus.nc.jetstream().streams_info()
        return {str(i.config.name): int(i.config.num_replicas or 1) for i in infos}
    finally:
        await bus.close()


def main() -> int:
    home = Path(".actline-cluster")
    with EmbeddedCluster(3, root=home / "nats") as cluster:
        print(f"NATS cluster of 3 servers at {cluster.url} (JetStream on each)", flush=True)
        code = ray_job(
            [
                "--nats",
                cluster.url,
                "--creds",
                str(cluster.creds_path("node")),
                "--nodes",
                "2",
                "--cpus-per-node",
                "0.5",
                "--home",
                str(home),
                "--docs",
                str(ROOT / "examples" / "kb"),
                "--requests",
                str(ROOT / "examples" / "cluster_turns.jsonl"),
                "--out",
                str(home / "results.jsonl"),
            ]
        )
        replicas = asyncio.run(_replicas(cluster.url))
        print(
            "replicas: " + ", ".join(f"{name} {count}" for name, count in sorted(replicas.items())),
            flush=True,
        )
        return code


if __name__ == "__main__":
    sys.exit(main())
