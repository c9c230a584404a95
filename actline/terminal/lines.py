"""Lines typed on the terminal (or piped in) as they come, without blocking the event loop.

``actline chat`` reads its prompt lines and, while a turn runs, its followups from here.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import threading

__all__ = ["LineReader"]


class LineReader:
    """Lines of a file descriptor as they come, without blocking the event loop.

    ``loop.add_reader`` where the descriptor can be polled (terminals, pipes); a daemon
    thread otherwise (a regular file). ``None`` in the queue means end of input.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        self._polled = False
        self._ended = False

    def start(self) -> None:
        try:
            self._loop.add_reader(self.fd, self._readable)
            self._polled = True
        except (OSError, NotImplementedError, ValueError):
            threading.Thread(
                target=self._read_blocking, name="actline-chat-stdin", daemon=True
            ).start()

    def close(self) -> None:
        if self._polled:
            self._loop.remove_reader(self.fd)
            self._polled = False

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:  # the terminal went away (EIO)
            data = b""
        self._feed(data)

    def _read_blocking(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            try:
                self._loop.call_soon_threadsafe(self._feed, data)
            except RuntimeError:  # the loop has closed
                return
            if not data:
                return

    def _feed(self, data: bytes) -> None:
        if self._ended:
            return
        text = self._partial + self._decoder.decode(data, final=not data)
        *lines, self._partial = text.split("\n")
        for line in lines:
            self.queue.put_nowait(line.rstrip("\r"))
        if not data:
            if self._partial:
                self.queue.put_nowait(self._partial)
                self._partial = ""
            self.queue.put_nowait(None)
            self._ended = True
            self.close()
