"""A node raises the collector's first threshold (``ACTLINE_GC_THRESHOLD``), never lowers it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.actors import Node, NodeSettings
from actline.actors.node.gc_tuning import tune_gc
from actline.bus import Bus


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, before[1], before[2])
    yield gc.get_threshold()
    gc.set_threshold(*before)


def test_the_first_threshold_is_raised_and_the_others_kept(
    thresholds: tuple[int, int, int],
) -> None:
    assert tune_gc(5000) == (5000, thresholds[1], thresholds[2])
    assert tune_gc(0) == (5000, thresholds[1], thresholds[2])  # 0 leaves it
    gc.set_threshold(20_000, thresholds[1], thresholds[2])
    assert tune_gc(5000)[0] == 20_000  # a higher one of the process's own stays


async def test_a_started_node_has_the_threshold_of_its_settings(
    thresholds: tuple[int, int, int], bus: Bus, tmp_path: Path
) -> None:
    settings = NodeSettings(home=tmp_path, node_id="n-gc", gc_threshold=12_000)
    node = Node(bus, settings)
    await node.start()
    try:
        assert gc.get_threshold() == (12_000, thresholds[1], thresholds[2])
    finally:
        await node.stop()
