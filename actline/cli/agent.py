"""``actline agent NAME -- CMD ...``, ``actline done NAME "summary"``, ``actline agents``.

``agent`` joins an existing NATS server as the outside agent ``NAME`` through its durable inbox
(``actline.actors.client.agent.AgentInbox``: a hello, then its tasks pulled from its own consumer, a
hello every beat so nodes know it is connected): every ``agent.task`` runs ``CMD`` once, the
task text on its stdin (and ``ACTLINE_AGENT``, ``ACTLINE_TASK_ID``, ``ACTLINE_TURN_ID``,
``ACTLINE_CONVERSATION_ID`` in its environment). Tasks sent while it was not running wait for
it. Its stdout, stripped and capped, becomes the ``agent.done`` summary (on the agent's own
DONE subject); a non-zero exit, a command that cannot start, or one that outlives
``--timeout`` answers with a summary saying it failed (the stderr tail included) so the turn
never waits for nothing. Tasks run one at a time, in arrival order. It stops on SIGINT/SIGTERM
(a running command is killed, its task left open: it is delivered again when the agent is
back).

``done`` publishes one ``agent.done`` and prints the node's verdict. ``agents`` lists the
agents the nodes know: connected or not, last seen, open tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from actline.actors.client.agent import AgentInbox
from actline.agents import list_agents
from actline.config import Config, ConfigError
from actline.messages import AgentTask, ErrorReply
from actline.messages.ids import is_valid_id, is_valid_name
from actline.runtime import Runtime

from .turns import load_config

__all__ = [
    "AgentRunner",
    "Outcome",
    "run_agent",
    "run_agents",
    "run_command",
    "run_done",
]

MAX_SUMMARY = 8000
"""Characters of the command's stdout kept in the DONE summary."""
STDERR_TAIL = 600
DEFAULT_TIMEOUT_S = 600.0


def _need_nats(config: Config, command: str) -> str:
    if config.nats_url is None:
        raise ConfigError(
            f"actline {command} joins a running NATS server: pass --nats nats://host:4222 or "
            "set NATS_URL (the URL actline serve prints)"
        )
    return config.nats_url


def _check_name(name: str) -> str:
    if not is_valid_name(name):
        raise ConfigError(
            f"agent name {name!r} is not valid: use letters, digits, _ and - (up to 64)"
        )
    return name


def _say(console: Console, text: str, style: str = "") -> None:
    console.print(Text(text, style), highlight=False, soft_wrap=True)
    console.file.flush()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one run of the command produced: the DONE summary and whether it worked."""

    summary: str
    ok: bool


async def run_command(
    argv: Sequence[str], stdin: str, *, timeout: float, env: dict[str, str] | None = None
) -> Outcome:
    """Run ``argv`` with ``stdin``; its stdout as the summary, or a failure summary."""
    shown = shlex.join(argv)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
    except OSError as exc:
        return Outcome(f"failed: {shown} could not start ({exc.strerror or exc})", False)
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate(stdin.encode())
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return Outcome(f"failed: {shown} did not finish within {timeout:g} s", False)
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip()[-STDERR_TAIL:]
        detail = f": {tail}" if tail else ""
        return Outcome(f"failed: {shown} exited with code {proc.returncode}{detail}", False)
    if len(text) > MAX_SUMMARY:
        text = text[:MAX_SUMMARY] + f"\n… ({len(text) - MAX_SUMMARY} more characters cut)"
    return Outcome(text or f"{shown} finished without output", True)


class AgentRunner:
    """Takes the tasks of one agent name and answers each with the command's output."""

    def __init__(
        self, inbox: AgentInbox, argv: Sequence[str], timeout: float, out: Console
    ) -> None:
        self.inbox = inbox
        self.name = inbox.name
        self.argv = list(argv)
        self.timeout = timeout
        self.out = out
        self.answered = 0

    async def work(self) -> None:
        """Run the tasks one at a time, forever."""
        async for task in self.inbox:
            _say(self.out, f"task {task.task_id} of turn {task.turn_id} received", "bold")
            await self.answer(task)

    async def answer(self, task: AgentTask) -> None:
        env = dict(os.environ)
        env.update(
            ACTLINE_AGENT=self.name,
            ACTLINE_TASK_ID=task.task_id,
            ACTLINE_TURN_ID=task.turn_id,
            ACTLINE_CONVERSATION_ID=task.conversation_id,
        )
        outcome = await run_command(self.argv, task.text, timeout=self.timeout, env=env)
        try:
            verdict = await self.inbox.done(task, outcome.summary)
        except Exception as exc:  # the node is gone: say so and keep serving
            _say(self.out, f"task {task.task_id}: could not send DONE ({exc})", "red")
            return
        self.answered += 1
        status = "answered" if outcome.ok else "answered (failed)"
        if isinstance(verdict, ErrorReply):
            text = f"task {task.task_id} {status}; node: {verdict.code}: {verdict.message}"
            _say(self.out, text, "red")
        else:
            _say(self.out, f"task {task.task_id} {status}; node: {verdict.detail or 'ok'}")


async def run_agent(args: argparse.Namespace, console: Console) -> int:
    """Serve ``args.name``'s inbox until SIGINT/SIGTERM; 0 after a clean stop."""
    name = _check_name(args.name)
    argv = list(args.cmd)
    if not argv:
        raise ConfigError("actline agent needs a command: actline agent NAME -- CMD ARGS ...")
    if shutil.which(argv[0]) is None:
        raise ConfigError(f"command {argv[0]!r} not found; give a path or a program on PATH")
    config = load_config(args)
    url = _need_nats(config, "agent")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with Runtime(config, node=False, role="agent", agent_name=name) as rt:
            inbox = AgentInbox(rt.bus, name)
            runner = AgentRunner(inbox, argv, args.timeout, console)
            waited: list[str] = []

            def waiting(reason: str) -> None:
                if not waited:  # said once: the hello is retried quietly
                    _say(console, f"agent {name}: waiting for a node ({reason})", "yellow")
                waited.append(reason)

            start = asyncio.create_task(inbox.start(waiting=waiting))
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({start, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not start.done():
                start.cancel()
                await asyncio.gather(start, return_exceptions=True)
                await inbox.close()
                return 0
            stopped.cancel()
            start.result()
            worker = asyncio.create_task(runner.work(), name=f"agent:{name}")
            try:
                subject = rt.bus.subjects.agent_inbox(name)
                _say(console, f"agent {name} listening on {subject} at {url}", "bold green")
                _say(console, f"  each task runs: {shlex.join(argv)}", "dim")
                await stop.wait()
            finally:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
                await inbox.close()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    _say(console, f"agent {name} stopped after {runner.answered} task(s)", "dim")
    return 0


async def run_done(args: argparse.Namespace, console: Console) -> int:
    """Publish one ``agent.done``; 0 when the node applied it, 1 when it refused."""
    name = _check_name(args.name)
    for what, value in (("task", args.task), ("turn", args.turn)):
        if value is not None and not is_valid_id(value):
            raise ConfigError(f"--{what} {value!r} is not an id (letters, digits, _ : -)")
    config = load_config(args)
    _need_nats(config, "done")
    async with Runtime(config, node=False, role="agent", agent_name=name) as rt:
        verdict = await rt.send_done(name, args.summary, task_id=args.task, turn_id=args.turn)
    if isinstance(verdict, ErrorReply):
        _say(console, f"refused: {verdict.code}: {verdict.message}", "bold red")
        return 1
    ref = f" ({verdict.ref})" if verdict.ref else ""
    _say(console, f"accepted{ref}: {verdict.detail or 'the DONE was applied'}", "green")
    return 0


async def run_agents(args: argparse.Namespace, console: Console) -> int:
    """Print the agents the nodes know: connected or not, last seen, open tasks."""
    config = load_config(args)
    _need_nats(config, "agents")
    async with Runtime(config, node=False) as rt:
        listed = await list_agents(rt.bus)
    if args.json:
        for row in listed.agents:
            console.print_json(row.model_dump_json())
        return 0
    if not listed.agents:
        _say(console, "no agent is connected or has open tasks", "dim")
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("agent", "connected", "last seen", "open tasks"):
        table.add_column(column)
    now = datetime.now(UTC)
    for row in listed.agents:
        ago = None if row.last_seen is None else (now - row.last_seen).total_seconds()
        seen = "-" if ago is None else f"{max(ago, 0.0):.0f} s ago"
        tasks = ", ".join(f"{t.task_id} (turn {t.turn_id})" for t in row.open_tasks) or "-"
        table.add_row(row.agent, "yes" if row.present else "no", seen, tasks)
    console.print(table)
    return 0
