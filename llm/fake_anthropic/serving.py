"""What the local model servers share: listening, one task per connection serving its
HTTP/1.1 requests in turn (keep-alive), stopping with every connection cancelled, and the
usage totals of the requests they recorded.

A server subclasses ``LocalServer`` and gives ``_handle`` (one request: False closes the
connection) and ``_refuse`` (a request that is not HTTP, answered in the API's own error
shape). ``FakeAnthropicServer`` (the Messages API) and
``actline.llm.fake_openai.FakeOpenAIServer`` (Chat Completions) are the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self

from actline.messages import Usage

from ._http import BadHttp, Connection, HttpRequest, read_request
from .thread import ServerThread

logger = logging.getLogger("actline.llm.fake_anthropic")


class LocalServer:
    """Listening and connection handling of a local model server (module docstring)."""

    name = "local model server"

    def __init__(self, host: str, port: int) -> None:
        self.requests: list[Any] = []
        """The records of the requests answered, in order (each has ``usage``)."""
        self.connections = 0
        """TCP connections accepted (a keep-alive client reuses one)."""
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._connection_tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def calls(self) -> list[Any]:
        """The records of the model calls (POST requests) among ``requests``: without the
        probe a node makes of its server at start (a GET)."""
        return [record for record in self.requests if record.method == "POST"]

    @property
    def usage_totals(self) -> Usage:
        """The sum of the usage of every answered request."""
        total = Usage()
        for record in self.requests:
            if record.usage is not None:
                total += record.usage
        return total

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_connection, self._host, self._port)
        self._port = self._server.sockets[0].getsockname()[1]
        logger.info("%s listening on %s", self.name, self.base_url)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        tasks = list(self._connection_tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def run_in_thread(self) -> ServerThread:
        """Serve from a daemon thread with its own loop (for sync clients); stop it to end."""
        return ServerThread(self).start()

    async def _handle(self, conn: Connection, http: HttpRequest) -> bool:
        """Answer one request; False closes the connection."""
        raise NotImplementedError

    async def _refuse(self, conn: Connection, message: str) -> None:
        """Answer a request that is not HTTP (400, in the API's error shape)."""
        raise NotImplementedError

    def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback spawning a task of ours: asyncio 3.11 reports a cancelled
        # coroutine callback as an error, and stop() must be able to cancel connections.
        self.connections += 1
        task = asyncio.create_task(self._serve(reader, writer))
        self._connection_tasks.add(task)
        task.add_done_callback(self._connection_done)

    def _connection_done(self, task: asyncio.Task[None]) -> None:
        self._connection_tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("connection handler failed", exc_info=exc)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(reader, writer)
        try:
            while (request := await read_request(conn)) is not None:
                conn.keep_alive = request.keep_alive
                if not await self._handle(conn, request) or not request.keep_alive:
                    break
        except BadHttp as exc:
            logger.info("bad HTTP from client: %s", exc)
            conn.keep_alive = False
            with contextlib.suppress(ConnectionError):
                await self._refuse(conn, str(exc))
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _race_peer(
        self, conn: Connection, work: Coroutine[Any, Any, None], exchange: Any
    ) -> bool:
        """Run ``work`` while watching the connection; True when the client left before
        the whole reply was written (``exchange.sent_all`` still false)."""
        task = asyncio.create_task(work)
        watcher = asyncio.create_task(conn.wait_peer_closed())
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
            await asyncio.wait({task, watcher})
        if task.cancelled():
            return not exchange.sent_all
        exc = task.exception()
        if isinstance(exc, ConnectionError):
            return not exchange.sent_all
        if exc is not None:
            raise exc
        return False
