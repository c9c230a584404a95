"""The prompt-cache benchmark runs end to end on a short conversation (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.cache import STRATEGIES, main, questions


def test_every_turn_of_the_benchmark_has_the_same_six_rounds_shape() -> None:
    texts = questions(4)
    assert "Ask reviewer" in texts[0] and "earlier" in texts[1]
    assert len(set(texts)) == 4


def test_cache_benchmark_accounts_every_strategy_on_the_same_conversation(tmp_path: Path) -> None:
    out = tmp_path / "cache.json"
    status = main(["--turns", "3", "--out", str(out)])
    result = json.loads(out.read_text())
    assert status == (0 if result["targets_met"] else 1)
    rows = {(r["scenario"], r["strategy"]): r for r in result["strategies"]}
    assert set(rows) == {(s, k) for s in ("standard", "wide") for k in STRATEGIES}
    for (scenario, _strategy), row in rows.items():
        assert row["rounds_per_turn"] == [6] and row["turns"] == 3
        total = row["uncached_input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"]
        assert total == row["input_tokens_total"] > 0
        # every strategy saw the same conversation, so the same prompts
        assert row["input_tokens_total"] == rows[(scenario, "none")]["input_tokens_total"]
    assert rows[("standard", "none")]["cost_vs_no_cache"] == 1.0
    assert rows[("standard", "last block")]["read_pct"] == 0.0
    assert rows[("standard", "actline")]["read_pct"] > 50
    assert (
        rows[("wide", "actline")]["cost_vs_no_cache"]
        < rows[("wide", "last stable block")]["cost_vs_no_cache"]
    )
    assert result["targets"][0]["figure"] == "standard: actline read %"
