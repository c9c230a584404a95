"""The tests ``make test`` runs after the others, one at a time (marker ``serial``, set by
``tests/conftest.py``): they start Ray or NATS clusters, or kill processes on a schedule,
so they run alone rather than beside the two workers of the first pass.

Entries are node-id prefixes. ``python -m tests.serial`` prints their files, which the
Makefile hands to the serial pass so that it collects only those.
"""

from __future__ import annotations

SERIAL = (
    "tests/bench/cluster/test_cluster_bench.py",  # a Ray cluster per configuration
    "tests/cluster/ray/test_ray_job.py",  # Ray clusters
    "tests/cluster/ray/test_ray_model.py",
    "tests/cluster/ray/test_ray_submit.py",
    "tests/cluster/ray/test_cluster_yaml.py",
    "tests/cluster/test_kill_loop_cluster.py",  # nodes killed in a loop
    "tests/cluster/nats/test_nats_failover.py",  # nats-servers killed under load
    "tests/cluster/nats/test_start_together.py",  # NATS clusters, nodes started at once
    "tests/cluster/ray/test_ray_node_ids.py",  # Ray clusters
    "tests/cluster/nats/test_no_quorum.py",  # two of three nats-servers killed
    "tests/cluster/nats/test_frozen_server.py",  # a nats-server stopped with SIGSTOP
    "tests/cluster/test_handoff.py::test_on_three_replicated_servers_the_holder_takes_the_turns_passed_to_it",
    "tests/actors/node/test_kill_loop.py",
    "tests/actors/node/test_parking.py::test_parked_turns_of_a_killed_node_resume",
    "tests/cluster/test_parking_cluster.py::test_turns_parked_on_a_killed_cluster_node",
    "tests/cli/test_cli.py::test_make_demo_from_the_readme_runs",  # the checkout's ./.actline
    "tests/cli/test_serve_client.py::test_an_agent_resumes_after_serve_restarts_on_the_same_port",
)


def files() -> list[str]:
    """The files that hold the serial tests, each once, in order."""
    return sorted({entry.partition("::")[0] for entry in SERIAL})


if __name__ == "__main__":
    print(" ".join(files()))
