"""The collector's first threshold on a node: fewer young collections on the round path.

A round allocates thousands of short-lived objects (messages, blocks, dicts), and CPython's
default first threshold (700 allocations) runs a young collection every few rounds; with 50
conversations on one node that was 0.7 to 1.0 ms of CPU per turn, 5,000 brings it to about
0.4 (``bench/loop.py``'s throughput part, interleaved runs). ``ACTLINE_GC_THRESHOLD`` sets it;
0 leaves the process's own. A process that set a higher one itself keeps it, and the older
generations' thresholds are never changed.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def tune_gc(threshold: int) -> tuple[int, int, int]:
    """Raise the first threshold to ``threshold`` (0: leave it); the thresholds after."""
    first, second, third = gc.get_threshold()
    if threshold and first < threshold:
        gc.set_threshold(threshold, second, third)
        log.debug("gc: first threshold %d -> %d", first, threshold)
    return gc.get_threshold()
