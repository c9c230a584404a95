"""The cluster benchmark's report: medians per model kind and node count, the targets and
the table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from rich.table import Table

from bench.harness import new_table

TARGET_IO_FRACTION = 0.7
TARGET_IO_RATIO = 1.0
"""Two cluster-mode node actors against one, sharing this machine's two cores."""
TARGET_NODE_CPU = 1.3
"""Cluster-mode node CPU per turn at most this times single mode's (one node each)."""
TARGET_NATS_CPU = 2.0
"""Cluster-mode nats-server CPU per turn at most this times single mode's."""
TARGET_TAKEOVER_SLACK_S = 2.0
TARGET_TOLD_S = 10.0
"""A client is told the cluster lost quorum within this (and the batch's answers hold)."""
SHORT = {"core_per_node": "core", "concurrency": "conc", "machine": "cores"}
ONE, TWO, SINGLE = "cluster x1", "cluster x2", "single x1"


def _median(rows: Sequence[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def _ratios(
    runs: Sequence[dict[str, Any]], model: str, top: str, bottom: str, key: str
) -> list[float]:
    """Per round, ``key`` of configuration ``top`` over ``bottom`` (the same round's)."""
    out: list[float] = []
    for round_ in sorted({r["round"] for r in runs}):
        rows = {r["config"]: r for r in runs if r["model"] == model and r["round"] == round_}
        if top in rows and bottom in rows and float(rows[bottom][key]):
            out.append(float(rows[top][key]) / float(rows[bottom][key]))
    return out


def summarise(runs: Sequence[dict[str, Any]], models: Sequence[str]) -> dict[str, Any]:
    """Medians per model kind and configuration, and the medians of the per-round ratios:
    ``ratio`` (cluster x2 over cluster x1 turns/s), ``node_cpu_ratio`` and
    ``nats_cpu_ratio`` (cluster x1 over single x1, CPU per turn)."""
    out: dict[str, Any] = {}
    keys = ("turns_per_s", "per_node_turns_per_s", "node_cpu_ms_per_turn",
            "nats_cpu_ms_per_turn", "driver_cpu_ms_per_turn", "total_cpu_ms_per_turn",
            "others_cores", "node_cores", "inflight_mean", "calls_per_turn", "ceiling",
            "fraction", "left_ceiling", "left_fraction", "quiet_waited_s", "deferred",
            "ordered", "handed_off")  # fmt: skip
    for model in models:
        entry: dict[str, Any] = {"configs": {}}
        configs = sorted({r["config"] for r in runs if r["model"] == model})
        for config in configs:
            rows = [r for r in runs if r["model"] == model and r["config"] == config]
            entry["configs"][config] = {k: _median(rows, k) for k in keys} | {
                "bound": statistics.mode(r["bound"] for r in rows),
                "nodes": rows[0]["nodes"],
                "mode": rows[0]["mode"],
            }
        for name, top, bottom, key in (
            ("ratio", TWO, ONE, "turns_per_s"),
            ("node_cpu_ratio", ONE, SINGLE, "node_cpu_ms_per_turn"),
            ("nats_cpu_ratio", ONE, SINGLE, "nats_cpu_ms_per_turn"),
        ):
            ratios = _ratios(runs, model, top, bottom, key)
            if ratios:
                entry[f"{name}s"] = ratios
                entry[name] = statistics.median(ratios)
        out[model] = entry
    return out


def targets(
    summary: dict[str, Any],
    kill: dict[str, Any] | None,
    faults: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    quorum = (faults or {}).get("quorum_loss")
    if quorum is not None:
        out["quorum_loss_told_s"] = {
            "value": quorum.get("told_s"),
            "target": TARGET_TOLD_S,
            "met": bool(quorum["told_within_target"]) and bool(quorum["same_answers"]),
        }
    freeze = (faults or {}).get("server_freeze")
    if freeze is not None:
        out["server_freeze_taken_over"] = {
            "value": freeze["taken_over"],
            "target": 0,
            "met": freeze["taken_over"] == 0 and bool(freeze["same_answers"]),
        }
    io = summary.get("io")
    if io is not None and ONE in io["configs"]:
        one = io["configs"][ONE]
        out["io_one_fraction"] = {
            "value": one["fraction"],
            "target": TARGET_IO_FRACTION,
            "bound": one["bound"],
            "met": one["fraction"] >= TARGET_IO_FRACTION,
            "of_cores_left": one["left_fraction"],
        }
    for model, entry in summary.items():
        checks = (
            ("two_vs_one", "ratio", TARGET_IO_RATIO, True),
            ("node_cpu_vs_single", "node_cpu_ratio", TARGET_NODE_CPU, False),
            ("nats_cpu_vs_single", "nats_cpu_ratio", TARGET_NATS_CPU, False),
        )
        for name, key, target, at_least in checks:
            if key not in entry or (model != "io" and name == "two_vs_one"):
                continue
            value = float(entry[key])
            out[f"{model}_{name}"] = {
                "value": value,
                "target": target,
                "met": value >= target if at_least else value <= target,
            }
    if kill is not None:
        limit = kill["node_ttl_s"] + TARGET_TAKEOVER_SLACK_S
        out["takeover_s"] = {
            "value": kill["resume_s"],
            "target": limit,
            "met": kill["resume_s"] <= limit,
        }
    return out


def table(result: dict[str, Any]) -> Table:
    columns = ("model", "config", "turns/s", "/node", "node ms", "nats ms", "drv ms",
               "others", "in flight", "deferred", "handed", "bound/s: got", "vs")  # fmt: skip
    out = new_table(
        f"cluster on {result['servers']}: {result['turns_per_conversation']}-turn "
        f"conversations, {result['rounds']} round(s), medians",
        columns,
        caption="ms: CPU per turn; others: cores the rest of the machine used meanwhile; "
        "deferred: requests handed back to the queue; handed: requests passed to the node "
        "holding their conversation; bound: the lowest of one core per node, concurrency "
        "and the machine's cores; vs: cluster x2 over x1 turns/s, cluster x1 over single "
        "node and nats CPU per turn",
    )
    for model, entry in result["summary"].items():
        for config, row in entry["configs"].items():
            versus = ""
            if config == TWO and "ratio" in entry:
                versus = f"{entry['ratio']:.2f}x"
            elif config == ONE and "node_cpu_ratio" in entry:
                versus = f"cpu {entry['node_cpu_ratio']:.2f}x / {entry['nats_cpu_ratio']:.2f}x"
            out.add_row(
                model,
                config,
                f"{row['turns_per_s']:.1f}",
                f"{row['per_node_turns_per_s']:.1f}",
                f"{row['node_cpu_ms_per_turn']:.1f}",
                f"{row['nats_cpu_ms_per_turn']:.1f}",
                f"{row['driver_cpu_ms_per_turn']:.1f}",
                f"{row['others_cores']:.2f}",
                f"{row['inflight_mean']:.0f}",
                f"{row['deferred']:.0f}",
                f"{row['handed_off']:.0f}",
                f"{SHORT[row['bound']]} {row['ceiling']:.0f}: {row['fraction']:.2f}",
                versus,
            )
    kill = result.get("takeover")
    if kill is not None:
        out.caption = (
            f"{out.caption}\nkill 1 of 2: {kill['victim_completed']}/{kill['victim_turns']} "
            "of its turns done "
            f"{kill['resume_s']:.1f} s after the kill (node TTL {kill['node_ttl_s']:g} s); "
            f"{kill['completed']}/{kill['turns']} in all; {result['cpus']} cores, shared"
        )
    return out
