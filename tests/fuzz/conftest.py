"""The fuzz session's report: inputs tried per kind, printed at the end, and written as JSON
to ``ACTLINE_FUZZ_REPORT`` when it is set (``make fuzz`` sets ``bench/results/fuzz.json``)."""

from __future__ import annotations

import json
import os
import platform
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest

from .tally import EXAMPLES, FULL, KINDS, TALLY

_wall: dict[str, float] = defaultdict(float)
_started = time.time()


@pytest.fixture(autouse=True)
def _no_input_hangs() -> Iterator[None]:
    """An input slower than ``SLOW_S`` fails the test that tried it (reported at teardown)."""
    before = len(TALLY.slow)
    yield
    slow = TALLY.slow[before:]
    assert not slow, f"inputs slower than the limit: {slow}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _wall[report.nodeid.removeprefix("tests/fuzz/")] += report.duration


def _report() -> dict[str, Any]:
    kinds = {name: TALLY.kinds[name].as_dict() for name in sorted(TALLY.kinds)}
    return {
        "benchmark": "fuzz",
        "examples_per_kind": EXAMPLES,
        "fresh_randomness": FULL,
        "hypothesis": hypothesis.__version__,
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_started)),
        "wall_seconds_by_test": {name: round(s, 1) for name, s in sorted(_wall.items())},
        "kinds": kinds,
        "below_target": [k for k in KINDS if k in kinds and kinds[k]["inputs"] < EXAMPLES],
        "slow_inputs": [list(s) for s in TALLY.slow],
    }


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TALLY.kinds:
        return
    report = _report()
    write = terminalreporter.write_line
    terminalreporter.section(f"fuzz: inputs tried per kind (budget {EXAMPLES} per kind)")
    write(f"{'kind':<22}{'inputs':>10}{'accepted':>10}{'target s':>10}{'max ms':>10}  outcomes")
    for name, row in report["kinds"].items():
        outcomes = row["outcomes"]
        others = ", ".join(f"{k} {v}" for k, v in outcomes.items() if k != "accepted")
        write(
            f"{name:<22}{row['inputs']:>10}{outcomes.get('accepted', 0):>10}"
            f"{row['target_seconds']:>10.1f}{row['max_ms_per_input']:>10.1f}  {others}"
        )
    if FULL:
        for name, seconds in report["wall_seconds_by_test"].items():
            write(f"  {name}: {seconds:.1f} s")
    if report["below_target"]:
        write(f"below the budget of {EXAMPLES}: {', '.join(report['below_target'])}")
    target = os.environ.get("ACTLINE_FUZZ_REPORT")
    if target:
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        write(f"written to {path}")
