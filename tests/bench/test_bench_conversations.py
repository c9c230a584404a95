"""The conversation-management benchmark runs end to end in its quick mode (no timing is
asserted): every size is in its JSON, each fork holds the original's blocks up to its turn,
each delete removed rows, and the list and searches found what the stores hold."""

from __future__ import annotations

import json
from pathlib import Path

from bench.storage.manage import LIST_TURNS, QUICK, main


def test_the_quick_conversations_benchmark_writes_every_size_with_sane_figures(
    tmp_path: Path,
) -> None:
    out = tmp_path / "conversations.json"
    assert main(["--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "conversations" and result["quick"] is True
    assert [f["turns"] for f in result["forks"]] == QUICK["turns"]
    assert [row["conversations"] for row in result["lists"]] == QUICK["conversations"]
    for f in result["forks"]:
        turns, original = f["turns"], f["original"]
        assert original["blocks"] > turns and original["rows"] > original["blocks"]
        assert f["load_p50_ms"] > 0
        for kind, at in (("fork_last", turns), ("fork_mid", turns // 2)):
            fork = f[kind]
            assert fork["at_turn"] == at and fork["p50_ms"] > 0 and fork["loads"] > 0
            assert fork["blocks"] == fork["expected_blocks"] > 0
            assert fork["bytes_written"] > fork["block_bytes"] > 0
        assert f["fork_last"]["blocks"] == original["blocks"]
        assert f["fork_mid"]["blocks"] < original["blocks"]
        assert f["fork_last"]["exact"] and not f["fork_mid"]["exact"]
        assert f["fork_last"]["files_shared"] == turns // 5  # a file every fifth turn
        assert original["file_bytes"] > 0  # shared by the forks, never copied
        delete = f["delete"]
        assert delete["rows"] > 0 and delete["blocks"] == original["blocks"]
        assert delete["p50_ms"] > 0 and delete["turns"] == turns
        assert f["delete_original"]["rows"] == original["rows"]
        assert f["delete_original"]["artifact_bytes"] == original["file_bytes"]
    for row in result["lists"]:
        count = row["conversations"]
        assert row["turns_each"] == LIST_TURNS
        assert row["list"]["found"] == count and row["search_miss"]["found"] == 0
        assert 0 < row["search_hit"]["found"] < count
        for kind in ("list", "search_hit", "search_miss"):
            assert row[kind]["p50_ms"] > 0
            assert row[kind]["per_conversation_us"] == row[kind]["p50_ms"] * 1e3 / count
    trip = result["round_trip"]
    assert trip["turns"] == QUICK["turns"][0] and trip["blocks"] > 0
    assert min(trip["store_p50_ms"], trip["shortcut_p50_ms"], trip["nats_p50_ms"]) > 0
