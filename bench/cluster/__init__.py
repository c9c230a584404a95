"""``python -m bench cluster``: scale-out on a replicated NATS cluster: single mode against
cluster mode with 1 and 2 node actors, CPU per turn, takeover, quorum loss, a frozen server.

Real parts: a local Ray (``ray.init(num_cpus=2)``), the NATS of each measurement from a
server factory (``--servers cluster``, the default: three nats-servers on loopback with
routes, every stream and bucket at three replicas, ``bus.EmbeddedCluster``; ``--servers
server``: one), node actors (cluster mode: leases and the durable copy in JetStream; single
mode: one node, its LMDB the only copy), the batch submitted by
``actline.actors.cluster.ray_job.run_requests`` (the Ray job's own client: a conversation's
turns one after another, conversations at once). Conversations have ``--turns`` turns (3):
a later turn may be pulled by the node that does not hold its conversation, which passes it
to the one that does (``turn.handoff``).

Two model kinds: ``io``, the offline model behind a fixed 50 ms latency per call
(``actline.actors.cluster.ray_job.FixedLatency``: a node spends most of a turn waiting), and
``cpu``, the offline model alone (a node is busy for all of it).

Throughput. Every measurement starts fresh NATS and fresh node actors, runs a warm-up batch
(``--warmup`` conversations per node; every node actor must have taken some of it: Ray
worker start, imports, the knowledge index, the streams and buckets are all paid before
timing), then the timed batch of ``--per-node`` conversations per node actor. The
configurations (``--configs``: single x1, cluster x1, cluster x2) are interleaved per model
kind, ``--rounds`` times, and the medians are reported: on a machine shared with others,
load lands on one measurement, not on one configuration. Reported per measurement: turns/s,
per node, the node actors' process CPU per turn (read by an actor method,
``time.process_time``), nats-server's (every member) and this driver's CPU per turn
(``/proc``), the CPU the rest of the machine used meanwhile (``/proc/stat`` minus ours),
model calls per turn, turns in flight (sampled every 0.25 s), requests handed back to the
queue and requests handed to the node holding their conversation.

Bounds of the io model on one node actor: its concurrency, ``min(max_active_turns,
streamers) / (calls per turn x 50 ms)`` turns/s, and one core, ``1 / node CPU per turn``;
the achieved fraction is against the lower. Two node actors on this 2-core machine also
share the cores with nats-server, the driver and Ray: ``cores / total CPU per turn``.

Takeover: 2 node actors (node TTL and ack wait 2 s, the defaults), io model; one is killed
(``ray.kill``) while it runs turns; reported: kill to the last result of the turns it was
running (from the results' node timestamps), against the node TTL + 2 s.

Targets: io, cluster x1 >= 0.7x of its lower bound; io, cluster x2 >= 1.0x cluster x1 (two
node actors share this machine's two cores with three nats-servers, the driver and Ray;
median of the per-round ratios); cluster x1 node CPU per turn <= 1.3x single mode's and
nats-server CPU per turn <= 2x (medians of per-round ratios); takeover within node TTL +
2 s. The exit status is 1 when a turn did not complete or a target is missed.

Faults (``faults``, on three replicated servers, each against the same batch without the
fault): two of the three servers killed for 20 s under two node actors (a client submitting
meanwhile must be told the cluster has no quorum within 10 s; every turn completes once they
are back, with the calm run's answers), and one server frozen for 15 s (no lease taken over
from a live node, the calm run's answers).

The parts live in modules of their own: ``nodes`` (servers, node actors, batches, CPU
accounting), ``scenarios`` (a throughput measurement, its bounds, the takeover), ``faults``
(quorum loss, a frozen server), ``report`` (medians, targets, the table) and ``run`` (the
command line).

    python -m bench.cluster [--quick] [--rounds 3] [--per-node 100] [--warmup 40]
        [--models io,cpu] [--servers cluster|server] [--turns 3] [--configs single,1,2]
        [--takeover 60] [--faults quorum,freeze] [--out bench/results/cluster.json]
"""

from bench.cluster.nodes import (
    BenchNode,
    ServerFactory,
    Servers,
    batch,
    embedded,
    local_ray,
    replicated,
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
    "replicated",
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
