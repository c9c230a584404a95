"""Shared fixtures: one real embedded nats-server for the session, and per-test buses.

Every server here runs with authentication on, trusting one session ``Authority``; a
connection made in this process without credentials gets the admin ones of that
server (``Bus.connect``), while the ``bus`` fixture connects with the ``node`` role
of its test's own prefix, so that most tests run under the permissions a node has.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from actline.bus import Authority, Bus, EmbeddedCluster, EmbeddedNats
from actline.messages import Subjects, new_id

from .serial import SERIAL

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# No per-example deadline (shared machines stall); CI replays a fixed set of examples so
# that a landing run is reproducible, while local runs keep exploring new ones.
settings.register_profile("local", deadline=None, print_blob=True)
settings.register_profile("ci", deadline=None, print_blob=True, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "local")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """The keys every test server trusts."""
    return Authority.open(tmp_path_factory.mktemp("auth"))


@pytest.fixture(scope="session")
def nats_server(authority: Authority) -> Iterator[EmbeddedNats]:
    """One embedded nats-server (JetStream and authentication on) shared by the session."""
    with EmbeddedNats(authority=authority) as server:
        yield server


@pytest.fixture
def fresh_nats(tmp_path: Path, authority: Authority) -> Iterator[EmbeddedNats]:
    """A nats-server of this test alone (for tests that stop or restart it)."""
    server = EmbeddedNats(store_dir=tmp_path / "nats", authority=authority)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_cluster(tmp_path: Path, authority: Authority) -> Iterator[EmbeddedCluster]:
    """Three nats-servers of this test alone with routes between them (JetStream on each,
    the session authority): ready, with a JetStream meta leader, when the test starts."""
    with EmbeddedCluster(3, root=tmp_path / "nats-cluster", authority=authority) as cluster:
        yield cluster


@pytest.fixture
def subject_names() -> Subjects:
    """A prefix of this test alone, so tests on the shared server never see each other."""
    return Subjects(f"t{new_id().lower()}")


@pytest.fixture
async def bus(nats_server: EmbeddedNats, subject_names: Subjects) -> AsyncIterator[Bus]:
    """A connected Bus on the session server, closed after the test."""
    creds = nats_server.creds_path("node", prefix=subject_names.prefix)
    connection = await Bus.connect(nats_server.url, subject_names=subject_names, creds=creds)
    try:
        yield connection
    finally:
        await connection.close()
