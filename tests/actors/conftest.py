"""Fixtures of the actor tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from actline.actors.client.client import Client
from actline.bus import Bus


@pytest.fixture
async def client(bus: Bus) -> AsyncIterator[Client]:
    """A client on the test's bus, closed after the test."""
    c = Client(bus)
    yield c
    await c.close()
