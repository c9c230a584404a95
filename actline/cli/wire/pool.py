"""``actline pool models|tools``: a process that serves only model calls or only tool calls.

A node with ``ACTLINE_STREAMERS=0`` (or ``ACTLINE_TOOL_WORKERS=0``) sends its model calls
(tool calls) over NATS to whatever serves them; a pool process is such a server on its own,
with credentials of its own (``actline creds pool-models`` / ``pool-tools``: nothing but
its queue group, its replies and, for models, the deltas; ``bus.roles``).

- ``actline pool models`` hosts one ``StreamerActor`` in the queue group ``streamers`` on
  ``<prefix>.llm.generate`` (and hears ``<prefix>.llm.cancel``), with the models a node of
  the same settings serves (``--model``, ``--api``, ``--base-url``, ``--config``,
  ``ACTLINE_*``: ``NodeModels``); deltas go to ``<prefix>.stream.<cid>`` as from a node.
- ``actline pool tools`` hosts one ``ToolExecutorActor`` in the queue group ``tools`` on
  ``<prefix>.tools.exec``, with the tools a node of the same settings serves: the built-in
  ones, the skills folder, the MCP servers (``actline.actors.pools.toolbox``).

Back-pressure: a member runs at most ``--concurrency`` calls at once (default: the node's
``streamers`` / ``tool_workers``) and lets at most ``--queue`` more wait for a slot (default:
as many as run). NATS hands each call of a queue group to a member picked at random, so
without the bound a call could wait behind long ones on a full member while another sat
idle; past the bound the member answers at once ``ErrorReply(code="busy")`` and the node
sends the call again, at most ``BUSY_TRIES`` times with a short growing pause
(``actline.actors.turn.remote``), each time to a member picked anew. When every try finds a
full member the model call fails with ``model_busy`` (a tool call: an error the model reads).
``--queue 0`` refuses whatever cannot run at once.

Prints one ``pool models serving ...`` line once it serves, and stops cleanly on SIGINT or
SIGTERM (exit 0): the subscription ends, calls in flight are cancelled (their callers'
requests end unanswered), MCP servers stop. It cannot start without NATS (``--nats`` or
``NATS_URL``; exit 2 naming the fix), and says which permission its credentials lack and
which credentials to issue when the server would refuse its subscription.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from rich.console import Console
from rich.text import Text

from actline.actors.pools.standalone import Pool
from actline.bus import AuthRefused, Bus, ConnectFailed, PermissionDenied
from actline.config import Config, ConfigError
from actline.llm import ModelConfigError

from ..turns import load_config

__all__ = ["KINDS", "connect", "run_pool"]

KINDS = ("models", "tools")


def role_of(kind: str) -> str:
    """The credentials' role of a pool of ``kind``."""
    return f"pool-{kind}"


def _credentials(config: Config, role: str) -> str | None:
    """The credentials file to connect with: ``--creds`` / ``ACTLINE_NATS_CREDS``, else the
    pool role's from this home's keys; ``ConfigError`` naming the fix when neither is there."""
    try:
        path = config.creds_for(role)
    except ConfigError:
        if config.nats_creds is not None:
            raise
        raise ConfigError(
            f"NATS at {config.nats_url} needs credentials: issue them where the deployment's "
            f"keys are with `actline creds {role} --out FILE` and pass --creds FILE (or "
            "ACTLINE_NATS_CREDS), or --insecure for a server without authentication"
        ) from None
    return None if path is None else str(path)


async def connect(url: str, creds: str | None, *, name: str, role: str) -> Bus:
    """A connection to the deployment's NATS, or ``ConfigError`` naming the fix: these
    commands join a running server, they never start one."""
    try:
        return await Bus.connect(url, name=name, connect_attempts=2, creds=creds)
    except AuthRefused as exc:
        raise ConfigError(
            f"NATS at {url} refused the connection ({exc.reason}): issue credentials where "
            f"the deployment's keys are with `actline creds {role} --out FILE` and pass "
            "--creds FILE (or ACTLINE_NATS_CREDS), or --insecure for a server without "
            "authentication"
        ) from None
    except ConnectFailed as exc:
        raise ConfigError(
            f"cannot reach NATS at {url} ({exc.reason}): pass the URL of the deployment's "
            "nats-server with --nats URL or NATS_URL (`actline serve` prints it)"
        ) from None


def _refused(exc: PermissionDenied, bus: Bus, role: str) -> ConfigError:
    """The error of credentials that may not serve this pool, with the fix."""
    identity = bus.identity
    fix = f"issue pool credentials with `actline creds {role} --out FILE` and pass --creds FILE"
    if identity is not None and identity.prefix and identity.prefix != bus.subjects.prefix:
        fix = (
            f"these credentials are for tenant {identity.prefix!r}, the subjects for "
            f"{bus.subjects.prefix!r}: set ACTLINE_SUBJECT_PREFIX={identity.prefix} or " + fix
        )
    return ConfigError(f"{exc.who} may not {exc.action} {exc.subject!r}: {fix}")


async def run_pool(args: argparse.Namespace, console: Console) -> int:
    """Serve model or tool calls until SIGINT/SIGTERM; 0 after a clean stop."""
    config = load_config(args)
    if config.nats_url is None:
        raise ConfigError(
            "a pool joins a running deployment: pass --nats URL or set NATS_URL "
            "(`actline serve` prints it)"
        )
    kind: str = args.kind
    role = role_of(kind)
    settings = config.node
    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError(f"--concurrency {args.concurrency}: give 1 or more")
    if args.queue is not None and args.queue < 0:
        raise ConfigError(f"--queue {args.queue}: give 0 or more")
    concurrency = args.concurrency or (
        settings.streamers if kind == "models" else settings.tool_workers
    )
    if concurrency < 1:
        raise ConfigError(
            f"a {kind} pool needs a concurrency of 1 or more: pass --concurrency N "
            f"(ACTLINE_{'STREAMERS' if kind == 'models' else 'TOOL_WORKERS'} is {concurrency})"
        )
    waiting = concurrency if args.queue is None else args.queue
    if kind == "models":
        config.check_model()
        await config.check_model_server()
    creds = _credentials(config, role)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    bus = await connect(config.nats_url, creds, name=f"actline-pool-{kind}", role=role)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(bus.close)
        pool = Pool(
            "models" if kind == "models" else "tools",
            bus,
            settings,
            llm=config.llm,
            concurrency=concurrency,
            waiting=waiting,
        )
        try:
            await pool.start()
        except ModelConfigError as exc:
            raise ConfigError(str(exc)) from None
        except PermissionDenied as exc:
            raise _refused(exc, bus, role) from None
        finally:
            stack.push_async_callback(pool.stop)
        subject, queue, serves = pool.subject, pool.queue, pool.serves
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            console.print(
                Text(
                    f"pool {kind} serving {subject} (queue group {queue}) on {bus.url} · "
                    f"concurrency {concurrency} · queue {waiting} · {serves}",
                    "bold green",
                ),
                soft_wrap=True,
            )
            console.file.flush()
            await stop.wait()
            console.print(Text(f"pool {kind} stopping", "dim"))
            console.file.flush()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    return 0
