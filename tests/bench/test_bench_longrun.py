"""The long-run benchmark runs end to end on a short conversation (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.longrun import REREAD_EVERY, ScriptedAgent, fact, main, page_text


def test_pages_carry_their_planted_fact_and_the_agent_rereads_every_fourth_round() -> None:
    code, value = fact(3)
    assert f"PLANTED|code={code}|value={value}" in page_text(5, 200, {5: 3})
    assert "PLANTED" not in page_text(6, 200, {5: 3})
    assert REREAD_EVERY == 4 and ScriptedAgent(10).rounds_per_turn == 10


def test_a_short_long_run_accounts_every_profile_row_with_and_without_the_watchdog(
    tmp_path: Path,
) -> None:
    out = tmp_path / "longrun.json"
    args = ["--turns", "2", "--rounds-per-turn", "6", "--result-tokens", "300"]
    assert main([*args, "--profiles", "fast", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {(r["profile"], r["watchdog"]): r for r in result["runs"]}
    assert set(rows) == {("fast", True), ("fast", False)}
    for row in rows.values():
        assert row["rounds"] == 12 and row["model_calls"] >= 12
        assert row["facts_planted"] == 2 and row["facts_recalled"] == 2  # all still in view
        assert 0 < row["cache_read_pct"] < 100 and row["peak_context_tokens"] > 0
