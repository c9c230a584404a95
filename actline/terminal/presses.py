"""Ctrl-C in ``actline chat``: what one press does, given the presses before it.

A pure function of the presses so far and the time, so the chat's SIGINT handler only
applies its answer: during a turn a quick series goes skip, cancel, quit; at the prompt a
press hints and a quick second one quits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["DOUBLE_PRESS_S", "Action", "Presses", "press"]

DOUBLE_PRESS_S = 1.5
"""Two Ctrl-C presses at most this far apart (seconds) count as one double press."""

Action = Literal["skip", "cancel", "quit", "hint"]


@dataclass(frozen=True, slots=True)
class Presses:
    """The Ctrl-C presses so far: how many in the current quick series, and when."""

    count: int = 0
    last: float | None = None
    last_idle: float | None = None
    """When the last press at the idle prompt was (None after a press during a turn)."""


def press(
    presses: Presses, now: float, *, running: bool, window: float = DOUBLE_PRESS_S
) -> tuple[Presses, Action]:
    """What one Ctrl-C at ``now`` (monotonic seconds) does, and the presses after it.

    A press within ``window`` of the previous one continues its series. During a turn the
    series goes skip, cancel, quit. At the prompt a press hints, and quits when it follows an
    idle press within ``window`` or is the third of a series begun during the turn.
    """
    quick = presses.last is not None and now - presses.last <= window
    count = presses.count + 1 if quick else 1
    if running:
        action: Action = "skip" if count == 1 else "cancel" if count == 2 else "quit"
        return Presses(count, now, None), action
    idle_quick = presses.last_idle is not None and now - presses.last_idle <= window
    return Presses(count, now, now), "quit" if idle_quick or count >= 3 else "hint"
