"""The probe a node makes of its model server at start: any HTTP answer passes, a closed
port, a server that is not HTTP or one that never answers is an error naming the base
URL and the fix."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from actline.llm import LLMSettings, ModelConfigError
from actline.llm.fake_openai import FakeOpenAIServer
from actline.llm.reachable import check_reachable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start(answer: bytes | None) -> AsyncIterator[str]:
    """A TCP server that writes ``answer`` to each connection (None: it never writes)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if answer is None:
            await reader.read()  # holds the connection open until the client leaves
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
async def not_http() -> AsyncIterator[str]:
    async for url in start(b"SSH-2.0-OpenSSH_9.2\r\n"):
        yield url


@pytest.fixture
async def silent() -> AsyncIterator[str]:
    async for url in start(None):
        yield url


async def test_a_server_that_answers_http_passes_whatever_its_status() -> None:
    async with FakeOpenAIServer() as srv:
        await check_reachable(LLMSettings(model="m", api="openai", base_url=srv.base_url))


async def test_no_base_url_is_nothing_to_check() -> None:
    await check_reachable(LLMSettings(model="claude-sonnet-4-6", api_key="k"))


async def test_a_closed_port_names_the_base_url_and_the_fix() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ModelConfigError) as caught:
        await check_reachable(LLMSettings(model="my-local", base_url=url))
    text = str(caught.value)
    assert f"base URL {url}" in text and "'my-local' (messages API) does not answer" in text
    assert "fix --base-url / ACTLINE_BASE_URL" in text


async def test_a_server_that_is_not_http_is_refused(not_http: str) -> None:
    with pytest.raises(ModelConfigError, match="is not an HTTP server"):
        await check_reachable(LLMSettings(model="m", base_url=not_http))


async def test_a_server_that_never_answers_is_refused_after_the_timeout(silent: str) -> None:
    with pytest.raises(ModelConfigError, match=r"no answer within 0.2 s"):
        await check_reachable(LLMSettings(model="m", base_url=silent), timeout_s=0.2)
