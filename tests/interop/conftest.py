"""Fixtures of the interop suite: the model endpoint of each kind and API.

The ``llama`` kind (marker ``interop``) runs only when asked for with ``-m interop`` (``make
interop``): elsewhere its tests are deselected, so that ``make test`` and a plain ``pytest``
need no llama-server. One llama-server serves the session, both APIs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from actline.llm import register_models

from .endpoints import APIS, Api, Endpoint, Kind, LlamaServer, LlamaServerFailed, local_endpoint
from .records import keep, server_timings

LLAMA_TEST_TIMEOUT_S = 900
"""A whole llama test (up to three turns of up to 120 s each, and a node's start)."""

KINDS = [
    pytest.param("local", id="local"),
    pytest.param(
        "llama", id="llama", marks=[pytest.mark.interop, pytest.mark.timeout(LLAMA_TEST_TIMEOUT_S)]
    ),
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the interop tests unless the marker expression names them."""
    if "interop" in (config.option.markexpr or ""):
        return
    kept = [item for item in items if item.get_closest_marker("interop") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.fixture(autouse=True)
def no_configured_models() -> Iterator[None]:
    """Each run registers its ``[models.NAME]`` table in this process: none outlives a test."""
    yield
    register_models(())


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-server with SmolLM2 on a free loopback port, healthy, for the session."""
    missing = LlamaServer.missing()
    if missing is not None:
        pytest.fail(missing)
    server = LlamaServer(tmp_path_factory.mktemp("llama") / "llama-server.log")
    try:
        server.start()
    except LlamaServerFailed as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        server.stop()
        keep({"server": {**server.facts(), "timings": server_timings(server.tail(10**8))}})


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> Api:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def endpoint(kind: Kind, api: Api, request: pytest.FixtureRequest) -> AsyncIterator[Endpoint]:
    """The model of ``kind`` through ``api``: a local server of this test, or the session's
    llama-server (still alive: a test that killed it fails here, not in the next test)."""
    if kind == "local":
        async with local_endpoint(api) as found:
            yield found
        return
    llama: LlamaServer = request.getfixturevalue("llama_server")
    if not llama.alive():
        pytest.fail(f"llama-server is gone; its log ends:\n{llama.tail()}")
    yield llama.endpoint(api)
    assert llama.alive(), f"llama-server died during the test; its log ends:\n{llama.tail()}"
