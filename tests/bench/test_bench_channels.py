"""The channels benchmark runs end to end on a tiny stream (no timing is asserted)."""

from __future__ import annotations

from bench.channels import CHUNK_SIZES, make_stream, run


def test_synthetic_stream_is_deterministic_and_citation_heavy() -> None:
    first, cited = make_stream(0.05)
    second, _ = make_stream(0.05)
    assert first == second
    assert first.startswith("<channel:thinking>")
    assert first.rstrip().endswith('<channel:followup>["a", "b"]</channel:followup>')
    assert 0.25 < cited / len(first) < 0.35


def test_channels_benchmark_measures_every_chunk_size_and_matches_naive() -> None:
    result = run(mb=0.05, repeat=1)
    assert result["stream_bytes"] >= 50_000
    assert 0.25 < result["citation_share"] < 0.35
    assert result["naive_mb_per_s"] > 0
    assert result["answer_chars"] > 0
    assert [row["chunk_bytes"] for row in result["chunked"]] == list(CHUNK_SIZES)
    for row in result["chunked"]:
        assert row["answer_matches_naive"] is True
        assert row["answer_chars"] == result["answer_chars"]
        assert row["chunks"] == -(-result["stream_bytes"] // row["chunk_bytes"])
        assert row["mb_per_s"] > 0
        assert row["ratio_to_naive"] > 0
        assert 0 < row["p50_us"] <= row["p99_us"]
    assert {t["chunk_bytes"] for t in result["targets"]} == {16, 4096}
    for target in result["targets"]:
        assert isinstance(target["met"], bool)
        assert target["value"] > 0
    assert result["targets_met"] == all(t["met"] for t in result["targets"])
    assert result["python"]
