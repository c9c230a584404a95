"""Serving an ASGI app with uvicorn inside a command's own event loop.

The console (``actline console``) and the HTTP API (``actline serve --http``) both bind their
socket first (so a taken port is a one-line error before anything starts), run uvicorn
without its own signal handling (the command installs its own), and print where they
listen once the server accepts connections (``started``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket

import uvicorn

from .config import ConfigError

__all__ = ["QuietServer", "bind", "is_loopback", "server_for", "started", "url_host"]


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling, with an event set once it accepts
    connections."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


def server_for(app: object) -> QuietServer:
    """A quiet uvicorn server of ``app``: warnings only, no access log, 2 s of grace."""
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
        access_log=False,
    )
    return QuietServer(config)


def bind(host: str, port: int, *, fix: str) -> socket.socket:
    """A socket bound to ``host:port``; ``ConfigError`` ending with ``fix`` when it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}); {fix}") from None
    return sock


async def started(server: QuietServer, serving: asyncio.Task[None], what: str) -> None:
    """Wait until ``server`` accepts connections; ``ConfigError`` naming ``what`` when it
    stopped first (its own error, when it raised one)."""
    ready = asyncio.create_task(server.ready.wait())
    await asyncio.wait({ready, serving}, return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if serving.done():
        serving.result()
        raise ConfigError(f"{what} stopped while starting")


def url_host(host: str) -> str:
    """``host`` as it stands in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
