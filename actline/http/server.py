"""``actline serve --http PORT``: the HTTP API served by uvicorn beside the node.

``serve_http(rt, config, port, host, say)`` is an async context manager: it binds
``host:port`` (0: a free port), serves the app on the runtime's event loop, says where
(``say``) once it accepts connections, and on exit ends the event streams and stops the
server (2 s of grace), then closes the tenants' connections. A host other than loopback
is allowed, with a warning: tokens travel in clear text unless TLS is put in front.

The tenants' credentials come from the deployment's keys: the embedded server's
``Authority``, else the keys under ``ACTLINE_HOME/auth`` when the server was started
from this home; without authentication (``--insecure``) none are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator, Callable

import uvicorn

from actline.bus import Authority

from ..config import Config, ConfigError
from ..runtime import Runtime
from .app import make_app
from .tenants import Gateway
from .tokens import TokenStore

__all__ = ["is_loopback", "serve_http"]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (the node's command has its own), with an
    event set once it accepts connections."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"the HTTP API cannot listen on {host}:{port} ({exc.strerror}); pick another "
            "--http port (0: any free one)"
        ) from None
    return sock


def _authority(rt: Runtime, config: Config) -> Authority | None:
    if rt.server is not None:
        return rt.server.authority
    if config.insecure:
        return None
    if (config.node.home / "auth" / "operator.nk").is_file():
        return config.authority()
    raise ConfigError(
        f"serve --http connects each tenant with credentials it issues from the deployment's "
        f"keys, and {config.node.home / 'auth'} has none: run it with the --home whose keys "
        "the NATS server trusts"
    )


@contextlib.asynccontextmanager
async def serve_http(
    rt: Runtime, config: Config, port: int, host: str, say: Callable[[str], None]
) -> AsyncIterator[str]:
    """Serve the API while inside; yields its base URL (module docstring)."""
    gateway = Gateway(rt.nats_url, _authority(rt, config))
    store = TokenStore(config.node.home / "auth")
    app = make_app(gateway, store, config.node)
    sock = _bind(host, port)
    server = _Server(
        uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2, access_log=False
        )
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="http-api")
    try:
        ready = asyncio.create_task(server.ready.wait())
        await asyncio.wait({ready, serving}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if serving.done():
            serving.result()
            raise ConfigError("the HTTP API's server stopped while starting")
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{sock.getsockname()[1]}"
        say(f"HTTP API at {url}/v1 (description: {url}/openapi.json)")
        say("  tokens: actline creds http NAME [--prefix TENANT] [--approver] [--ttl 30d]")
        if not is_loopback(host):
            say(
                f"  WARNING: {host} is not loopback: bearer tokens travel in clear text "
                "unless TLS (a reverse proxy) is put in front"
            )
        yield url
    finally:
        gateway.closing.set()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await serving
        await gateway.close()
        sock.close()
