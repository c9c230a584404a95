"""The memsearch benchmark runs end to end on small indexes (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.memsearch import main


def test_the_memsearch_benchmark_writes_its_table_as_json(tmp_path: Path) -> None:
    out = tmp_path / "memsearch.json"
    status = main(["--sizes", "300,1200", "--samples", "3", "--scan-budget", "0.05", "--quick",
                   "--out", str(out)])  # fmt: skip
    data = json.loads(out.read_text())
    assert status in (0, 1)  # 1 only when the 100,000-row target was not measured or missed
    assert [r["rows"] for r in data["sizes"]] == [300, 1200]
    for row in data["sizes"]:
        assert row["bm25"]["p50_ms"] > 0 and row["bm25"]["p99_ms"] >= row["bm25"]["p50_ms"]
        assert row["hybrid"]["p50_ms"] > 0
        assert row["scan"] is None or row["scan"]["n"] >= 1  # skipped past its time budget
    assert data["embedder"].startswith("all-MiniLM-L6-v2")
    assert data["updates"]["bm25_add_us"] > 0 and data["updates"]["embed"]
