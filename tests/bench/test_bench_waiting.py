"""The waiting-turns benchmark runs end to end on a short run (no timing is asserted):
more turns wait than the node has slots, new turns still complete meanwhile, and every
waiting turn completes after its DONE."""

from __future__ import annotations

import json
from pathlib import Path

from bench.waiting import main


def test_a_short_run_serves_new_turns_beside_more_waiting_turns_than_slots(
    tmp_path: Path,
) -> None:
    out = tmp_path / "waiting.json"
    assert main(["--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    slots = result["max_active_turns"]
    [base, loaded] = result["rows"]
    assert (base["waiting"], loaded["waiting"]) == (0, 20) and slots == 4 < loaded["waiting"]
    # 20 turns waited beyond the 4 slots while the batch of new turns completed
    assert result["new_turns_completed"] == 8 * 2 * 3 + 4  # two batches a row, and the warm-up
    assert loaded["new_turns_per_s"] > 0 and loaded["rss_bytes"] > 0
    assert result["waiting_total"] == result["waiting_completed"] == 20
