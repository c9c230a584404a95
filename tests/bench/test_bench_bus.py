"""The bus benchmark runs end to end (tiny counts; no timing is asserted)."""

from __future__ import annotations

from bench.bus import run


async def test_bus_benchmark_measures_both_paths() -> None:
    result = await run(requests=40, warmup=5, blocks=2)
    for path in ("typed", "raw"):
        assert result[path]["n"] == 40
        assert 0 < result[path]["p50_us"] <= result[path]["p99_us"]
    assert result["ratio_p50"] > 0
    assert result["payload_bytes"]["request"] > 0
