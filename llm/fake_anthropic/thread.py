"""Run a ``FakeAnthropicServer`` on its own event loop in a daemon thread (for sync clients)."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Protocol

from actline.messages.lifecycle import Stoppable


class FakeAnthropicServer(Protocol):
    """What the thread runs (``server.FakeAnthropicServer``; a protocol, since that module
    imports this one)."""

    @property
    def base_url(self) -> str: ...

    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> object: ...


class ServerThread(Stoppable):
    """A started server in a daemon thread; ``stop()`` (or leaving the ``with``) ends it
    (``actline.messages.lifecycle.Stoppable``: ``with`` does not start it, ``start`` does).

    The server's state (``requests``, ``usage_totals``...) is readable from the
    calling thread once a client call has returned.
    """

    def __init__(self, server: FakeAnthropicServer, *, start_timeout: float = 10.0) -> None:
        self.server = server
        self._start_timeout = start_timeout
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: Exception | None = None

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def start(self) -> ServerThread:
        """Start serving; returns once the port is bound (or raises why it could not be)."""
        self._thread = threading.Thread(target=self._run, name="fake-anthropic", daemon=True)
        self._thread.start()
        if not self._ready.wait(self._start_timeout):
            raise TimeoutError(f"fake anthropic server did not start in {self._start_timeout}s")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # handed to the starting thread
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.server:
            self._ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join()
            self._thread = None
