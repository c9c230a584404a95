"""Fixtures of the ownership tests: a second bus connection, as another node."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from actline.bus import Bus, EmbeddedNats
from actline.messages import Subjects


@pytest.fixture
async def other_bus(nats_server: EmbeddedNats, subject_names: Subjects) -> AsyncIterator[Bus]:
    """A second connection under the same prefix: another node."""
    connection = await Bus.connect(nats_server.url, subject_names=subject_names)
    try:
        yield connection
    finally:
        await connection.close()
