"""The eval benchmark runs the shipped cases on the offline model and writes the score."""

from __future__ import annotations

import json
from pathlib import Path

from bench.eval import main


def test_eval_benchmark_scores_the_first_shipped_cases(tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    assert main(["--limit", "3", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "eval" and result["model"] == "extractive"
    assert result["cases_file"] == "examples/eval/kb.jsonl"
    assert [c["id"] for c in result["cases"]][:1] == ["retention-default"]
    total = result["aggregate"]
    assert total["cases"] == 3 and total["passed"] + total["failed"] == 3
    assert 0.0 < total["score"] <= 1.0 and total["tokens_mean"] > 0
    assert all(c["statuses"] == ["completed"] for c in result["cases"])
