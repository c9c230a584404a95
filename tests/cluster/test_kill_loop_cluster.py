"""Repeated SIGKILLs of cluster-mode node processes (two, each on its own home, a killed one
restarted under its id) during a batch of multi-turn conversations, compared with the same
batch run without kills: every conversation's durable copy in JetStream holds its
turns in submission order, each once and contiguous, and every turn is answered exactly once
with the answer, status and stored notices of the run without kills. Nothing is lost.

The run without kills is the plainest one: one node in single mode (the answers do not
depend on the mode; a cluster run without kills must match it too, see ``make soak``).

The kill-to-result times are printed (``-s``), never asserted. The driver is
``tests/actors/killloop.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actline.bus import EmbeddedNats
from tests.actors.killloop import KillPlan, plan_batch, run_batch
from tests.actors.killreport import Report, order_problems

pytestmark = pytest.mark.timeout(600)

NODES = 2
CONVERSATIONS = 4
TURNS = 3
KILLS = 4


async def test_cluster_turns_keep_their_order_and_answers_across_repeated_node_kills(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    plans = plan_batch(CONVERSATIONS, TURNS)
    reference = await run_batch(nats_server.url, tmp_path / "reference", plans)  # one node
    assert not [t for t in reference.traces.values() if not t.results], "reference incomplete"
    assert order_problems(reference) == []

    run = await run_batch(
        nats_server.url,
        tmp_path / "killed",
        plans,
        mode="cluster",
        nodes=NODES,
        kills=KillPlan(kills=KILLS, seed=18),
    )
    report = Report.of(reference, run)
    print("\n" + report.describe())  # the figures for the closing note (kill to result, ...)

    assert report.kills >= 2 and report.kills_mid_turn >= 1, report.describe()
    assert report.lost == [], report.describe()
    assert report.answered_twice_differently == [], report.describe()
    assert report.conversations_out_of_order == [], report.describe()
    assert report.mismatches == [], report.describe()
