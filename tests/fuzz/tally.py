"""The fuzz budget, its Hypothesis settings, and the tally of inputs tried per kind.

Every fuzz test calls its target through ``TALLY.run(kind, fn, *args)``, which counts the
input, times it and notes how it ended (``accepted`` or the exception's class name); the
conftest prints the tally at the end of the session.
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 300
EXAMPLES = int(os.environ.get("ACTLINE_FUZZ_EXAMPLES") or DEFAULT_EXAMPLES)
"""Inputs per kind: a short run by default, ``make fuzz`` sets 100,000."""
FULL = bool(os.environ.get("ACTLINE_FUZZ_EXAMPLES"))
"""An explicit budget is a fuzzing run: fresh randomness even where the CI profile
derandomizes (the short run inside ``make test`` follows the project's profile)."""
SLOW_S = 5.0
"""One input taking longer than this counts as a hang."""

KINDS = ("messages.decode", "channels.stream", "timeline.paths", "turn.config")
"""The kinds the issue asks 100,000 inputs of; tests may tally finer kinds too."""

T = TypeVar("T")


def fuzz_settings(examples: int = EXAMPLES) -> settings:
    """Hypothesis settings of a fuzz test running ``examples`` examples."""
    extra: dict[str, Any] = {"derandomize": False} if FULL else {}
    return settings(
        max_examples=max(1, examples),
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
        **extra,
    )


@dataclass
class KindTally:
    """Inputs of one kind: how many, how long, how they ended."""

    inputs: int = 0
    seconds: float = 0.0
    max_s: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "target_seconds": round(self.seconds, 3),
            "max_ms_per_input": round(self.max_s * 1000, 3),
            "outcomes": dict(self.outcomes.most_common()),
        }


@dataclass
class Tally:
    """Every kind's tally, plus the inputs that took longer than ``SLOW_S``."""

    kinds: dict[str, KindTally] = field(default_factory=dict)
    slow: list[tuple[str, float, str]] = field(default_factory=list)

    def run(self, kind: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, counted under ``kind``; exceptions pass through."""
        entry = self.kinds.get(kind)
        if entry is None:
            entry = self.kinds[kind] = KindTally()
        outcome = "accepted"
        collecting = gc.isenabled()
        gc.disable()  # a collection of the generator's garbage is not the input's time
        start = time.perf_counter()
        try:
            return fn(*args)
        except Exception as exc:
            outcome = type(exc).__name__
            raise
        finally:
            elapsed = time.perf_counter() - start
            if collecting:
                gc.enable()
            entry.inputs += 1
            entry.seconds += elapsed
            entry.max_s = max(entry.max_s, elapsed)
            entry.outcomes[outcome] += 1
            if elapsed > SLOW_S:
                self.slow.append((kind, elapsed, repr(args)[:300]))


TALLY = Tally()
