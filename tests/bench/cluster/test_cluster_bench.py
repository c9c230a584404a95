"""The cluster benchmark runs end to end in its quick mode on a real local Ray and real
nats-servers: every configuration warmed and complete, CPU accounted, the takeover's turns
finished elsewhere (no timing is asserted: the targets are the benchmark's verdict)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cluster import main


@pytest.mark.timeout(300)
def test_the_cluster_benchmark_completes_every_turn_of_every_configuration(
    tmp_path: Path,
) -> None:
    out = tmp_path / "cluster.json"
    status = main(["--quick", "--out", str(out)])
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert [(r["model"], r["nodes"]) for r in runs] == [
        ("io", 1),
        ("io", 2),
        ("cpu", 1),
        ("cpu", 2),
    ]
    for run in runs:
        assert run["completed"] == run["turns"] == 12 * run["nodes"]
        assert run["warmup_completed"] == run["warmup_turns"]
        assert run["warmup_turns"] == 4 * run["nodes"] * run["warmup_batches"]
        assert all(taken > 0 for taken in run["warmup_taken"])  # every node actor warmed
        assert sum(run["taken"]) == run["turns"]
        assert run["calls_per_turn"] >= 1 and run["node_cpu_ms_per_turn"] > 0
        assert run["bound"] in run["bounds"]
    assert set(runs[0]["bounds"]) == {"core_per_node", "concurrency", "machine"}
    assert "concurrency" not in runs[2]["bounds"]  # the cpu model has no latency to wait on
    kill = result["takeover"]
    assert kill["completed"] == kill["turns"] == 16
    assert kill["victim_completed"] == kill["victim_turns"] > 0
    assert set(result["targets"]) == {"io_one_fraction", "io_two_vs_one", "takeover_s"}
    met = all(t["met"] for t in result["targets"].values())
    assert status == (0 if met else 1)
