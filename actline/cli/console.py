"""``actline console``: the web console (``actline.web``) served with uvicorn.

Like ``actline chat`` it starts an embedded nats-server and a node when no ``--nats`` (or
``NATS_URL``) is given, or joins that server as a client (the conversations and traces are
then read from ``--home``). It binds ``--host`` (default 127.0.0.1) and ``--port`` (default
8765; 0 picks a free one) and prints one line, ``actline console: http://HOST:PORT/?token=T``,
once the server accepts connections. The token (``secrets.token_urlsafe(24)``) is new on
each start; a host other than loopback needs ``--allow-remote`` and keeps the token.
SIGINT, SIGTERM and SIGHUP stop it cleanly (open event streams are closed, then the runtime).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import secrets
import signal
import socket

import uvicorn
from rich.console import Console
from starlette.applications import Starlette

from actline.config import ConfigError
from actline.runtime import Runtime

from .turns import load_config

__all__ = ["check_host", "run_console"]

DEFAULT_PORT = 8765
LOOPBACK_NAMES = ("localhost",)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def check_host(host: str, allow_remote: bool) -> None:
    """``ConfigError`` naming ``--allow-remote`` when ``host`` is not a loopback address."""
    if allow_remote or host in LOOPBACK_NAMES:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"--host {host} is not a loopback address: anyone who can reach it could use the "
            "console (the token still applies); pass --allow-remote to bind it anyway"
        )


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (``run_console`` installs the handlers),
    with an event set once it accepts connections."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


def _stop(server: uvicorn.Server, app: Starlette) -> None:
    server.should_exit = True
    app.state.hub.shutdown()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port (0: any free)"
        ) from None
    sock.set_inheritable(True)
    return sock


async def run_console(args: argparse.Namespace, console: Console) -> int:
    """Serve the console until SIGINT/SIGTERM."""
    from actline.web import make_app  # imported here: only this command needs Starlette

    check_host(args.host, args.allow_remote)
    config = load_config(args)
    sock = _bind(args.host, args.port)
    token = secrets.token_urlsafe(24)
    async with Runtime(config, node=config.nats_url is None) as rt:
        app = make_app(rt, token, home=config.node.home)
        server = _Server(
            uvicorn.Config(
                app,
                log_level="warning",
                lifespan="on",
                timeout_graceful_shutdown=2,
                access_log=False,
            )
        )
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, _stop, server, app)
        try:
            ready = asyncio.create_task(server.ready.wait())
            await asyncio.wait({ready, serving}, return_when=asyncio.FIRST_COMPLETED)
            ready.cancel()
            if serving.done():
                serving.result()
                raise ConfigError("the console's web server stopped while starting")
            port = sock.getsockname()[1]
            shown = f"[{args.host}]" if ":" in args.host else args.host
            print(f"actline console: http://{shown}:{port}/?token={token}", flush=True)
            await serving
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            sock.close()
    return 0
