"""``actline serve``, ``ask``, ``result`` and ``chat``: thin layers over ``Runtime``.

``serve`` runs a node until SIGINT/SIGTERM; ``ask`` submits one turn and streams it;
``result`` prints a turn's stored result; ``chat`` hands a configured ``Config`` to
``actline.terminal.chat``.

``serve`` without ``NATS_URL`` starts an embedded nats-server on ``--port``, else 4222 when
free, else the port its home kept from the last run (``actline.served``), and records itself
in the home while it runs: ``ask``, ``chat``, ``result`` and the others of ``JOINS`` then
join it, as clients, when no NATS URL is given (``--local-node``: with a node of their own).

Start-up problems surface as
``ConfigError`` (one line naming the fix), which ``actline.cli.main.main`` turns into exit code 2;
so does a NATS cluster without JetStream quorum while ``ask`` submits or follows its turn
(``NoQuorum``, a ``BusError``: what to do, and that the turns submitted are kept).

Cancellation: Ctrl-C during ``ask`` cancels the turn on the node (best effort) and the
``CancelledError`` propagates, so the runtime closes and the CLI exits with 130.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from actline import served
from actline.bus import BusError, StreamMissing
from actline.config import Config, ConfigError
from actline.messages import ErrorReply, ReActResult, StreamDelta
from actline.messages.ids import is_valid_id
from actline.runtime import Runtime, follow
from actline.terminal.attachments import read_attachments
from actline.terminal.cards import CanvasPanels, TurnPrinter

__all__ = ["load_config", "run_approval", "run_ask", "run_chat", "run_result", "run_serve"]

DEFAULT_DOCS = Path("examples") / "kb"
"""The knowledge folder used when neither ``--docs`` nor ``ACTLINE_DOCS`` names one."""
CANCEL_WAIT_S = 2.0


JOINS = frozenset(
    {"chat", "ask", "result", "conversations", "fork", "approve", "deny", "feedback"}
    | {"agent", "done", "agents"}
)
"""The commands that join the running ``actline serve`` of their home when neither
``NATS_URL`` nor ``--nats`` names a server (``actline.served``)."""
CLIENT_COMMANDS = frozenset(
    {"chat", "ask", "result", "conversations", "fork", "approve", "deny", "feedback"}
)
"""Of those, the ones that join with the client credentials ``actline serve`` recorded
(without ``--local-node``); the others connect as their own role."""


def load_config(args: argparse.Namespace) -> Config:
    """The settings of a command: its flags over the environment over the TOML file; for
    the ``JOINS`` commands without a NATS URL, the running ``actline serve`` of the home."""
    docs: Path | None = getattr(args, "docs", None)
    config = Config.load(
        args.config,
        nats_url=getattr(args, "nats", None),
        home=getattr(args, "home", None),
        model=getattr(args, "model", None),
        api=getattr(args, "api", None),
        base_url=getattr(args, "base_url", None),
        profile=getattr(args, "profile", None),
        knowledge_dir=docs,
        nats_creds=getattr(args, "creds", None),
        insecure=getattr(args, "insecure", None),
    )
    command = getattr(args, "command", None)
    if config.nats_url is None and command in JOINS:
        config = _join_served(config, client=command in CLIENT_COMMANDS and not local_node(args))
    if config.node.knowledge_dir is None and DEFAULT_DOCS.is_dir():
        config = config.with_node(knowledge_dir=DEFAULT_DOCS)
    return config


def local_node(args: argparse.Namespace) -> bool:
    """``--local-node``: run a node in this process even when a server runs."""
    return bool(getattr(args, "local_node", False))


def _join_served(config: Config, *, client: bool) -> Config:
    """``config`` joining the ``actline serve`` running for its home, when one does (with the
    client credentials it recorded when ``client``); a stale state file is said and ignored."""
    found, note = served.find(config.node.home)
    if note:
        print(f"actline: {note}", file=sys.stderr, flush=True)
    if found is None:
        return config
    creds = found.creds if client else None
    return config.joining(found.url, creds=creds, insecure=found.insecure)


def check_conversation_id(value: str | None) -> str | None:
    if value is not None and not is_valid_id(value):
        raise ConfigError(
            f"{value!r} is not a conversation id (letters, digits, _ : -); "
            "list the stored ones with actline timeline --list"
        )
    return value


def _say(console: Console, text: str, style: str = "") -> None:
    console.print(Text(text, style), highlight=False, soft_wrap=True)
    console.file.flush()


# -- serve -----------------------------------------------------------------------------------------


async def run_serve(args: argparse.Namespace, console: Console) -> int:
    """Run a node until SIGINT/SIGTERM; 0 after a clean stop."""
    config = _serve_port(load_config(args), getattr(args, "port", None))
    home = config.node.home
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    async with Runtime(config, node=True) as rt:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if rt.server is not None:  # what chat, ask, agent ... of this home join
                client = None if config.insecure else config.creds_for("client")
                state = served.Served(rt.nats_url, os.getpid(), client, config.insecure)
                served.record(home, state)
            assert rt.node is not None
            _say(console, f"node {rt.node.node_id} serving on {rt.nats_url}", "bold green")
            docs = config.node.knowledge_dir
            _say(
                console,
                f"  model {config.node.model} · profile {config.node.profile} · "
                f"docs {docs or '(none)'} · home {config.node.home}",
                "dim",
            )
            if rt.server is not None:
                creds = (
                    "" if config.insecure else f"ACTLINE_NATS_CREDS={config.creds_for('client')} "
                )
                same = "" if args.home is None else f" --home {args.home}"
                _say(
                    console, f"  from another shell: actline chat{same} (it joins this node)", "dim"
                )
                _say(
                    console,
                    f'  from elsewhere: NATS_URL={rt.nats_url} {creds}actline ask "..."',
                    "dim",
                )
            if args.http is None:
                await stop.wait()
            else:  # the HTTP API beside the node (actline.http)
                from actline.http import serve_http

                def say(text: str) -> None:
                    _say(console, text, "bold")

                async with serve_http(rt, config, args.http, args.http_host, say):
                    await stop.wait()
            _say(console, f"node {rt.node.node_id} stopping", "dim")
        finally:
            served.forget(home, os.getpid())
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    return 0


def _serve_port(config: Config, port: int | None) -> Config:
    """``config`` with the port of the home's embedded nats-server (``actline.served.pick_port``);
    ``ConfigError`` when a server of this home runs already or ``port`` is taken."""
    if config.nats_url is not None:
        if port is not None:
            raise ConfigError(
                f"--port is the embedded nats-server's; this node joins {config.nats_url} "
                "(NATS_URL or --nats): drop one of them"
            )
        return config
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"--port {port}: give a port from 1 to 65535")
    home = config.node.home
    running, note = served.find(home)
    if note:
        print(f"actline: {note}", file=sys.stderr, flush=True)
    if running is not None:
        raise ConfigError(
            f"actline serve already runs for {home} (pid {running.pid}) at {running.url}: "
            "stop it first (Ctrl-C there, or kill " + str(running.pid) + "), or give another --home"
        )
    try:
        chosen = served.pick_port(home, port)
    except served.PortTaken as exc:
        stop = f"stop it (kill {exc.holder.split()[1]}) or " if exc.holder else ""
        raise ConfigError(f"{exc}: {stop}choose another with --port N") from None
    return replace(config, nats_port=chosen)


# -- ask -------------------------------------------------------------------------------------------


async def run_ask(args: argparse.Namespace, console: Console) -> int:
    """Submit one turn, stream it, print where it is stored; 0 when it completed."""
    config = load_config(args)
    if not getattr(args, "verbose", 0):  # an outage of NATS is told by the one-line error
        logging.getLogger("actline.bus.conditions").setLevel(logging.ERROR)
    cid = check_conversation_id(args.conversation)
    attachments = read_attachments(getattr(args, "attach", None) or [], config.node)
    local = config.nats_url is None or args.local_node
    turn_config: dict[str, Any] = {}
    if args.model:
        turn_config["model"] = args.model
    if args.profile:  # also for a node elsewhere: the turn names it
        turn_config["profile"] = args.profile
    async with Runtime(config, node=local) as rt:
        if rt.server is not None and not args.json:
            _say(console, f"embedded nats-server at {rt.nats_url} (no NATS_URL set)", "dim")
        if cid is not None:
            rt.check_conversation(cid)  # only with a node here; a remote node starts it anew
        handle = await rt.submit(args.question, cid, config=turn_config, attachments=attachments)
        printer = TurnPrinter(console, show_thinking=not args.no_thinking)
        canvas = CanvasPanels()

        async def streamed() -> ReActResult | None:
            last: ReActResult | None = None
            async for event in follow(handle, timeout=args.timeout):
                if isinstance(event, ReActResult):
                    last = event
                elif not args.json:
                    printer.show(event)
                elif isinstance(event, StreamDelta) and event.key is not None:
                    canvas.add(event)
            return last

        try:  # NoQuorum (a BusError: one line, exit 2) when the NATS cluster lost quorum
            result = await rt.client.unless_no_quorum(
                streamed(),
                f"turn {handle.turn_id}",
                kept=f"the turn is kept and runs once the cluster has quorum again; see "
                f"its result then with actline result {handle.turn_id}",
            )
        except TimeoutError:
            print(
                f"actline: no result for turn {handle.turn_id} within {args.timeout:g} s; it may "
                f"still be running (see actline timeline {handle.conversation_id})",
                file=sys.stderr,
            )
            return 1
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CANCEL_WAIT_S):
                    await rt.cancel(handle.turn_id)
            raise
    assert result is not None
    if args.json:  # the result, and the canvas panels the turn streamed
        shown = {**result.model_dump(mode="json"), "canvas": canvas.as_json()}
        print(json.dumps(shown, ensure_ascii=False), flush=True)
    else:
        printer.show(result)
        _say(
            console,
            f"conversation {result.conversation_id} · turn {result.turn_id} · {result.status}",
            "bold" if result.status == "completed" else "bold red",
        )
        _say(console, f'continue: actline ask --conversation {result.conversation_id} "..."')
    return 0 if result.status == "completed" else 1


# -- result ----------------------------------------------------------------------------------------


async def run_result(args: argparse.Namespace, console: Console) -> int:
    """Print a turn's stored result; 0 when it completed, 1 when it did not or is unknown."""
    config = load_config(args)
    turn_id: str = args.turn
    if not is_valid_id(turn_id):
        raise ConfigError(f"{turn_id!r} is not a turn id (letters, digits, _ : -)")
    async with Runtime(config, node=False) as rt:
        try:
            result = await rt.result(turn_id)
        except StreamMissing:
            print(
                f"actline result: no results are stored on {rt.nats_url}: no node has "
                "published a turn result there yet (or the results stream was deleted)",
                file=sys.stderr,
            )
            return 1
    if result is None:
        days = config.node.result_retention_s / 86400
        print(
            f"actline result: turn {turn_id} is unknown, still running, or its result "
            f"expired (results are kept {days:g} days: ACTLINE_RESULT_RETENTION)",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), ensure_ascii=False), flush=True)
    else:
        TurnPrinter(console).show(result)
        usage = result.usage
        _say(
            console,
            f"conversation {result.conversation_id} · turn {result.turn_id} · {result.status}",
            "bold" if result.status == "completed" else "bold red",
        )
        _say(
            console,
            f"rounds {result.rounds} · tokens in {usage.input_tokens:,} · out "
            f"{usage.output_tokens:,} · cache read {usage.cache_read_tokens:,}",
            "dim",
        )
    return 0 if result.status == "completed" else 1


# -- approve / deny ------------------------------------------------------------------------------


async def run_approval(args: argparse.Namespace, console: Console) -> int:
    """``actline approve|deny TURN``: 0 when the node applied it, 1 when it refused."""
    approved = args.command == "approve"
    for what, value in (("TURN_ID", args.turn), ("--approval", args.approval)):
        if value is not None and not is_valid_id(value):
            raise ConfigError(f"{what} {value!r} is not an id (letters, digits, _ : -)")
    config = load_config(args)
    if config.nats_url is None:
        raise ConfigError(
            f"actline {args.command} joins a running NATS server: pass --nats nats://host:4222 "
            "or set NATS_URL (the URL actline serve prints), or start actline serve with this "
            f"home ({config.node.home})"
        )
    async with Runtime(config, node=False) as rt:
        ended = await _ended(rt, args.turn)
        if ended is not None:
            _say(
                console,
                f"refused: turn {args.turn} has ended ({ended.status}): nothing of it waits "
                f"for approval (see actline result {args.turn})",
                "bold red",
            )
            return 1
        decide = rt.approve if approved else rt.deny
        verdict = await decide(
            args.turn,
            approval_id=args.approval,
            reason=args.reason,
            by=args.by or "",
            timeout=args.timeout,
        )
    if isinstance(verdict, ErrorReply):
        _say(console, f"refused: {verdict.code}: {verdict.message}", "bold red")
        return 1
    _say(console, f"{'approved' if approved else 'denied'}: {verdict.detail}", "green")
    return 0


async def _ended(rt: Runtime, turn_id: str) -> ReActResult | None:
    """The stored result of ``turn_id`` when it has ended (None: running, or unknown)."""
    try:
        return await rt.result(turn_id)
    except BusError:  # no results stream yet, or NATS slow: the node answers for the turn
        return None


# -- chat ------------------------------------------------------------------------------------------


async def run_chat(args: argparse.Namespace, console: Console) -> int:
    """``actline.terminal.chat.run_chat`` with this command line's settings: a client of the
    server that runs (``NATS_URL``, ``--nats``, the home's ``actline serve``), else a node
    here on an embedded server; ``--local-node`` runs a node here in any case."""
    from actline.terminal.chat import run_chat as chat  # imported here: only this command needs it

    config = load_config(args)
    if config.nats_url is None and config.nats_creds is not None and not local_node(args):
        raise ConfigError(
            f"--creds / ACTLINE_NATS_CREDS ({config.nats_creds}) are a server's credentials, "
            f"and no actline serve runs for {config.node.home}: give the server's URL "
            "(--nats URL or NATS_URL), or --local-node to run a node here"
        )
    turn_config = {"profile": args.profile} if args.profile else None
    cid = check_conversation_id(args.conversation)
    node = config.nats_url is None or local_node(args)
    return await chat(config, cid, console, turn_config=turn_config, node=node)
