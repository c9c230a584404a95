"""The node ids of a Ray job's node actors name the job: two jobs on one NATS (on one Ray
cluster, or each on a Ray of its own) never share a node id, so never a node key or a lease
owner. Real local Rays; the second job is a driver process of its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.actors.cluster.ray_job import job_tag, node_ids
from actline.messages import Subjects, is_valid_id

ROOT = Path(__file__).resolve().parents[3]
DRIVER = (
    "import sys, ray\n"
    "from actline.actors.cluster.ray_job import job_tag\n"
    "ray.init(address=sys.argv[1] or None, num_cpus=None if sys.argv[1] else 1,"
    " include_dashboard=False, log_to_driver=False)\n"
    "print(ray.get_runtime_context().get_job_id(), job_tag())\n"
    "ray.shutdown()\n"
)
"""A second job: a driver that joins the Ray cluster at ``argv[1]`` (empty: starts a local
Ray of its own) and prints its job id and tag."""


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def other_job(address: str) -> tuple[str, str]:
    """The job id and tag of a driver process on the Ray at ``address`` ("": its own Ray)."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, address],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    job, tag = done.stdout.split()[-2:]
    return job, tag


def test_node_ids_name_the_job_and_are_subject_tokens() -> None:
    first = node_ids("01000000-23aac354", 2)
    assert first == ["ray-01000000-23aac354-node-0", "ray-01000000-23aac354-node-1"]
    second = node_ids("02000000-23aac354", 2)
    assert not set(first) & set(second)
    for node_id in first + second:
        assert is_valid_id(node_id)
        Subjects().kv_key(node_id)  # a key of the nodes and leases buckets


def test_a_second_job_on_the_same_ray_cluster_gets_other_node_ids(ray_local: Any) -> None:
    context = ray_local.get_runtime_context()
    mine = job_tag()
    assert mine.startswith(f"{context.get_job_id()}-") and job_tag() == mine
    job, theirs = other_job(context.gcs_address)
    assert job != context.get_job_id()
    assert theirs.startswith(f"{job}-")
    assert not set(node_ids(mine, 4)) & set(node_ids(theirs, 4))


def test_a_job_on_a_ray_of_its_own_gets_other_node_ids(ray_local: Any) -> None:
    mine = job_tag()
    job, theirs = other_job("")
    assert job == ray_local.get_runtime_context().get_job_id()  # both Rays' first job
    assert not set(node_ids(mine, 4)) & set(node_ids(theirs, 4))
