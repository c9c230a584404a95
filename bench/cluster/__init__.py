"""``python -m bench cluster``: scale-out with 1 and 2 node actors, CPU per turn, takeover.

Real parts: a local Ray (``ray.init(num_cpus=2)``), a nats-server per measurement (from a
server factory: ``embedded`` today; a scenario takes the factory, so a cluster of servers
drops in), node actors in cluster mode (leases and the durable copy in JetStream), the
batch submitted by ``actline.actors.cluster.ray_job.run_requests`` (the Ray job's own client). Each
conversation has one turn (the offline model answers in 5 model calls).

Two model kinds: ``io``, the offline model behind a fixed 50 ms latency per call
(``actline.actors.cluster.ray_job.FixedLatency``: a node spends most of a turn waiting), and
``cpu``, the offline model alone (a node is busy for all of it).

Throughput. Every measurement starts a fresh nats-server and fresh node actors (same
state for 1 and 2 nodes), runs a warm-up batch (``--warmup`` conversations per node; every
node actor must have taken some of it: Ray worker start, imports, the knowledge index, the
streams and buckets are all paid before timing), then the timed batch of ``--per-node``
conversations per node actor. The configurations are interleaved (for each round: io 1,
io 2, cpu 1, cpu 2), ``--rounds`` times, and the medians are reported: on a machine
shared with others, load lands on one measurement, not on one configuration. Reported per
measurement: turns/s, per node, the node actors' process CPU per turn (read by an actor
method, ``time.process_time``), nats-server's and this driver's CPU per turn (``/proc``),
the CPU the rest of the machine used meanwhile (``/proc/stat`` minus ours: Ray's daemons
and other users), model calls per turn and turns in flight (sampled every 0.25 s).

Bounds of the io model on one node actor: its concurrency, ``min(max_active_turns,
streamers) / (calls per turn x 50 ms)`` turns/s, and one core, ``1 / node CPU per turn``;
the achieved fraction is against the lower. Two node actors on this 2-core machine also
share the cores with nats-server, the driver and Ray: ``cores / total CPU per turn``.

Adding a scenario (e.g. a nats-server killed in a cluster of three): a function
``(ray, servers, tmp, **sizes) -> dict`` built from ``start_nodes``, ``batch``, ``usages``
and ``stop_nodes`` like ``takeover``, called from ``main`` with its own factory
(``servers`` returns a context manager whose value has ``url`` and ``creds_path``;
``server_pids`` reads ``pids`` of a cluster for the CPU figures).

Takeover: 2 node actors (node TTL and ack wait 2 s, the defaults), io model; one is killed
(``ray.kill``) while it runs turns; reported: kill to the last result of the turns it was
running (from the results' node timestamps), against the node TTL + 2 s.

Targets: io, 1 node actor >= 0.7x of its lower bound; io, 2 vs 1 >= 1.6x
(median of the per-round ratios); takeover within node TTL + 2 s. The exit status is 1
when a turn did not complete or a target is missed.

The parts live in modules of their own: ``nodes`` (servers, node actors, batches, CPU
accounting), ``scenarios`` (a throughput measurement, its bounds, the takeover), ``report``
(medians, targets, the table) and ``run`` (the command line).

    python -m bench.cluster [--quick] [--rounds 3] [--per-node 300] [--warmup 40]
        [--models io,cpu] [--takeover 60] [--out bench/results/cluster.json]
"""

from bench.cluster.nodes import (
    BenchNode,
    ServerFactory,
    Servers,
    batch,
    embedded,
    local_ray,
    server_pids,
    start_nodes,
    stop_nodes,
    usages,
)
from bench.cluster.report import summarise, table, targets
from bench.cluster.run import main
from bench.cluster.scenarios import bounds, takeover, throughput

__all__ = [
    "BenchNode",
    "ServerFactory",
    "Servers",
    "batch",
    "bounds",
    "embedded",
    "local_ray",
    "main",
    "server_pids",
    "start_nodes",
    "stop_nodes",
    "summarise",
    "table",
    "takeover",
    "targets",
    "throughput",
    "usages",
]
