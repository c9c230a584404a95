"""The cluster benchmark runs end to end in its quick mode on a real local Ray and a real
cluster of three nats-servers: every configuration (single mode, cluster mode with one and
two node actors) warmed and complete over three-turn conversations, CPU accounted, the
takeover's turns finished elsewhere (no timing is asserted: the targets are the
benchmark's verdict)."""

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
    assert result["servers"] == "cluster" and result["turns_per_conversation"] == 3
    assert [(r["model"], r["config"]) for r in runs] == [  # quick: the io model only
        ("io", "single x1"),
        ("io", "cluster x1"),
        ("io", "cluster x2"),
    ]
    for run in runs:
        assert run["completed"] == run["turns"] == 3 * 12 * run["nodes"]
        assert run["warmup_completed"] == run["warmup_turns"]
        assert run["warmup_turns"] == 3 * 4 * run["nodes"] * run["warmup_batches"]
        assert all(taken > 0 for taken in run["warmup_taken"])  # every node actor warmed
        assert sum(run["taken"]) == run["turns"]
        assert run["calls_per_turn"] >= 1 and run["node_cpu_ms_per_turn"] > 0
        assert run["bound"] in run["bounds"]
    assert set(runs[0]["bounds"]) == {"core_per_node", "concurrency", "machine"}
    two = [r for r in runs if r["config"] == "cluster x2"]
    # a later turn pulled by the node without its conversation goes to the node holding it
    assert all(r["handed_off"] <= r["deferred"] + r["ordered"] for r in two)
    kill = result["takeover"]
    assert kill["completed"] == kill["turns"] == 16
    assert kill["victim_completed"] == kill["victim_turns"] > 0
    assert set(result["targets"]) == {
        "io_one_fraction",
        "io_two_vs_one",
        "io_node_cpu_vs_single",
        "io_nats_cpu_vs_single",
        "takeover_s",
    }
    met = all(t["met"] for t in result["targets"].values())
    assert status == (0 if met else 1)
