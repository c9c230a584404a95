"""Fixtures of the agent tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actline.actors.client.client import Client
from actline.bus import Bus
from tests.actors.agents.runtime import Runtime
from tests.actors.harness import Scripted, start_node


@pytest.fixture
async def rt(bus: Bus, tmp_path: Path) -> AsyncIterator[Runtime]:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        yield Runtime(model, node, client)
    finally:
        await client.close()
        await node.stop()
