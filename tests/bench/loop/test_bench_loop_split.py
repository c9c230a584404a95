"""The split throughput benchmark runs end to end on a short run (no timing is asserted):
the clients in their own process complete every turn on the node, the same measurement
runs on a second checkout without changing it, and a folder that is not one is refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.loop import split as loop_split

ROOT = Path(__file__).resolve().parents[3]


def test_a_short_run_here_and_against_a_second_checkout(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True)
    assert listed.returncode == 0, f"git ls-files failed: {listed.stderr.decode()}"
    for name in listed.stdout.decode().split("\0"):  # the working tree, as a checkout
        if name and (ROOT / name).is_file():
            (other / name).parent.mkdir(parents=True, exist_ok=True)
            (other / name).write_bytes((ROOT / name).read_bytes())
    before = sorted(p.relative_to(other) for p in other.rglob("*"))
    out = tmp_path / "split.json"
    args = ["--conversations", "3", "--total-turns", "12", "--runs", "1"]
    assert loop_split.main([*args, "--against", str(other), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["trees"]) == {"this tree", "against"}
    for row in result["trees"].values():
        [run] = row["runs"]
        assert run["turns"] == 12 and run["conversations"] == 3
        assert run["turns_per_s"] > 0 and run["node_cpu_ms_per_turn"] > 0
        assert run["client_cpu_ms_per_turn"] > 0
    assert set(result["ratios"]) == {"turns_per_s", "node_cpu_ms_per_turn"}
    # nothing was written into the other checkout (no probe, no caches)
    after = sorted(p.relative_to(other) for p in other.rglob("*") if "__pycache__" not in p.parts)
    assert after == [p for p in before if "__pycache__" not in p.parts]


def test_a_folder_that_is_not_a_checkout_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        loop_split.main(["--against", str(tmp_path), "--runs", "1"])
    assert "not a checkout of actline" in capsys.readouterr().err
