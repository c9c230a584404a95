"""Just enough HTTP/1.1 for the Messages API: keep-alive, Content-Length and chunked bodies.

``Connection`` buffers what it reads itself, so a watcher can wait for the
client to close the connection while a reply is produced without losing any
bytes the client sends meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    529: "Overloaded",
}


class BadHttp(Exception):
    """The bytes on the connection are not an HTTP/1.1 request we can answer."""


@dataclass(slots=True)
class HttpRequest:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        return connection != "close" and (self.version == "HTTP/1.1" or connection == "keep-alive")


class Connection:
    """A buffered reader over one socket, so a watcher can detect EOF without losing bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self.writer = writer
        self._buffer = bytearray()
        self.keep_alive = True

    async def _fill(self) -> bool:
        try:
            data = await self._reader.read(65536)
        except ConnectionError:
            data = b""
        self._buffer += data
        return bool(data)

    async def read_until(self, sep: bytes, limit: int) -> bytes | None:
        """Bytes up to and including ``sep``; None on EOF before any byte."""
        while (i := self._buffer.find(sep)) < 0:
            if len(self._buffer) > limit:
                raise BadHttp("header section too large")
            if not await self._fill():
                if self._buffer:
                    raise BadHttp("connection closed mid-request")
                return None
        out = bytes(self._buffer[: i + len(sep)])
        del self._buffer[: i + len(sep)]
        return out

    async def read_exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if not await self._fill():
                raise BadHttp("connection closed mid-body")
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    async def wait_peer_closed(self) -> None:
        """Return when the client closes its side; any bytes it sends meanwhile are kept."""
        while await self._fill():
            pass

    @property
    def connection(self) -> str:
        """The value of the response's Connection header."""
        return "keep-alive" if self.keep_alive else "close"

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()


async def read_request(conn: Connection) -> HttpRequest | None:
    head = await conn.read_until(b"\r\n\r\n", MAX_HEAD)
    if head is None:
        return None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise BadHttp(f"bad request line {lines[0][:80]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise BadHttp("bad header line")
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = await conn.read_until(b"\r\n", 1024)
            try:
                size = int((size_line or b"").split(b";")[0].strip(), 16)
            except ValueError:
                raise BadHttp("bad chunk size") from None
            if size == 0:
                while await conn.read_until(b"\r\n", MAX_HEAD) not in (b"\r\n", None):
                    pass  # trailers
                break
            if len(body) + size > MAX_BODY:
                raise BadHttp("body too large")
            body += await conn.read_exactly(size)
            if await conn.read_exactly(2) != b"\r\n":
                raise BadHttp("bad chunk framing")
        return HttpRequest(method, target, version, headers, bytes(body))
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise BadHttp("bad content-length") from None
    if not 0 <= length <= MAX_BODY:
        raise BadHttp("bad content-length")
    return HttpRequest(method, target, version, headers, await conn.read_exactly(length))


def response_head(status: int, headers: Sequence[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked response body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
