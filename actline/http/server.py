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
from collections.abc import AsyncIterator, Callable

from actline.bus import Authority

from ..config import Config, ConfigError
from ..hosting import bind, is_loopback, server_for, started, url_host
from ..runtime import Runtime
from .app import make_app
from .tenants import Gateway
from .tokens import TokenStore

__all__ = ["serve_http"]


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
    sock = bind(host, port, fix="pick another --http port (0: any free one)")
    server = server_for(app)
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="http-api")
    try:
        await started(server, serving, "the HTTP API's server")
        url = f"http://{url_host(host)}:{sock.getsockname()[1]}"
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
