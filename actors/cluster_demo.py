"""``make cluster-demo``: a local Ray cluster with 2 node actors serving the demo's conversations.

An embedded nats-server (JetStream on), ``ray.init`` on this machine, two node actors in
cluster mode (leases in JetStream KV, every round copied to JetStream), and the 12 turns of
``examples/cluster_turns.jsonl`` (6 conversations, 2 turns each) submitted through
``actors.ray_job``; the results go to ``.actline-cluster/results.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bus import EmbeddedNats

from .ray_job import main as ray_job

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    home = Path(".actline-cluster")
    with EmbeddedNats(store_dir=home / "nats") as server:
        print(f"nats-server at {server.url} (JetStream on)", flush=True)
        return ray_job(
            [
                "--nats",
                server.url,
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


if __name__ == "__main__":
    sys.exit(main())
