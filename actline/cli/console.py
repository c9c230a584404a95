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
import secrets
import signal

import uvicorn
from rich.console import Console
from starlette.applications import Starlette

from actline.config import ConfigError
from actline.hosting import bind, is_loopback, server_for, started, url_host
from actline.runtime import Runtime

from .turns import load_config

__all__ = ["check_host", "run_console"]

DEFAULT_PORT = 8765
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def check_host(host: str, allow_remote: bool) -> None:
    """``ConfigError`` naming ``--allow-remote`` when ``host`` is not a loopback address."""
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"--host {host} is not a loopback address: anyone who can reach it could use the "
            "console (the token still applies); pass --allow-remote to bind it anyway"
        )


def _stop(server: uvicorn.Server, app: Starlette) -> None:
    server.should_exit = True
    app.state.hub.shutdown()


async def run_console(args: argparse.Namespace, console: Console) -> int:
    """Serve the console until SIGINT/SIGTERM."""
    from actline.web import make_app  # imported here: only this command needs Starlette

    check_host(args.host, args.allow_remote)
    config = load_config(args)
    sock = bind(args.host, args.port, fix="pick another --port (0: any free)")
    sock.set_inheritable(True)
    token = secrets.token_urlsafe(24)
    async with Runtime(config, node=config.nats_url is None) as rt:
        app = make_app(rt, token, home=config.node.home)
        server = server_for(app)
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, _stop, server, app)
        try:
            await started(server, serving, "the console's web server")
            port = sock.getsockname()[1]
            print(
                f"actline console: http://{url_host(args.host)}:{port}/?token={token}", flush=True
            )
            await serving
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            sock.close()
    return 0
