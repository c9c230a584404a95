"""Fixtures of the role tests: connections with the credentials of a role, a second tenant,
and the table of every attempt with its answers, printed once the tests here are done."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from actline.bus import Authority, Bus, EmbeddedNats
from actline.bus.auth import write_secret
from actline.messages import Subjects, new_id
from tests.security.attempts import LEDGER
from tests.security.roles import Connect


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="package", autouse=True)
def attempts_table(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print every attempt of the role tests with its answers once they are done."""
    yield
    title = "roles on a real nats-server: attempts and answers"
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        if reporter is None:
            print(f"\n{title}\n{LEDGER.table()}")
            return
        reporter.write_line("")
        reporter.section(title)
        reporter.write_line(LEDGER.table())


@pytest.fixture
async def connect(
    nats_server: EmbeddedNats, authority: Authority, subject_names: Subjects, tmp_path: Path
) -> AsyncIterator[Connect]:
    """Connections to the session server with the credentials of a role (the test's prefix
    unless another is given), all closed after the test. ``fresh``: a user of its own
    (another key, so another reply inbox) rather than the role's shared credentials."""
    opened: list[Bus] = []

    async def open_as(
        role: str,
        *,
        name: str = "",
        prefix: str | None = None,
        fresh: bool = False,
        approver: bool = False,
    ) -> Bus:
        tenant = prefix or subject_names.prefix
        if fresh or approver:
            text = authority.issue(role, name=name, prefix=tenant, approver=approver)
            creds = write_secret(tmp_path / f"{role}-{new_id()}.creds", text)
        else:
            creds = nats_server.creds_path(role, name=name, prefix=tenant)
        bus = await Bus.connect(
            nats_server.url, name=f"security-{role}", subject_names=Subjects(tenant), creds=creds
        )
        opened.append(bus)
        return bus

    yield open_as
    for bus in opened:
        await bus.close()


@pytest.fixture
def other_tenant() -> Subjects:
    """A second deployment on the same server."""
    return Subjects(f"t{new_id().lower()}")
