"""The prompt-cache benchmark runs end to end on a short conversation (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from actline.tools import KnowledgeSpace
from bench.cache import SCENARIOS, SINGLE, generate_kb, main, questions

STRATEGIES = ("none", "last block", SINGLE, "actline")
SHORT = ("standard", "wide", "hide", "retention", "compaction")


def test_every_turn_of_the_benchmark_has_the_same_six_rounds_shape() -> None:
    texts = questions(4)
    assert "Ask reviewer" in texts[0] and "earlier" in texts[1]
    assert len(set(texts)) == 4


def test_the_generated_knowledge_space_gives_each_question_its_own_documents(
    tmp_path: Path,
) -> None:
    kb = KnowledgeSpace(generate_kb(tmp_path, 24))
    hits = kb.search("the default retention", top_k=24)
    assert len(hits) == 24 and all(h.path.startswith("ks:topic0-") for h in hits)


def test_cache_benchmark_accounts_every_strategy_on_the_same_conversation(tmp_path: Path) -> None:
    out = tmp_path / "cache.json"
    args = ["--turns", "3", "--out", str(out)]
    status = main([*args, "--scenarios", ",".join(SHORT), "--strategies", ",".join(STRATEGIES)])
    result = json.loads(out.read_text())
    assert status == (0 if result["targets_met"] else 1)
    rows = {(r["scenario"], r["strategy"]): r for r in result["strategies"]}
    assert set(rows) == {(s, k) for s in SHORT for k in STRATEGIES}
    for (scenario, _strategy), row in rows.items():
        # a hide adds a seventh round to turns that read more than one new document
        assert set(row["rounds_per_turn"]) <= ({6, 7} if SCENARIOS[scenario].hide else {6})
        assert row["turns"] == 3
        total = row["uncached_input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"]
        assert total == row["input_tokens_total"] > 0
        # every strategy saw the same conversation, so the same prompts
        assert row["input_tokens_total"] == rows[(scenario, "none")]["input_tokens_total"]
    assert rows[("standard", "none")]["cost_vs_no_cache"] == 1.0
    assert rows[("standard", "last block")]["read_pct"] == 0.0
    assert rows[("standard", "actline")]["read_pct"] > 50
    # what each scenario is about happened
    assert rows[("hide", "actline")]["hides"] >= 1
    assert rows[("retention", "actline")]["retained_results"] > 0
    assert rows[("compaction", "actline")]["compactions"] > 0
    assert rows[("wide", "actline")]["blocks"] > rows[("standard", "actline")]["blocks"] + 30
    assert (
        rows[("wide", "actline")]["weighted_input_tokens"]
        < 0.9 * rows[("wide", SINGLE)]["weighted_input_tokens"]
    )
    assert result["targets"][0]["figure"] == "standard: actline read %"
