"""``actline agent NAME -- CMD ...`` and ``actline done NAME "summary"``: outside agents.

``agent`` joins an existing NATS server as the outside agent ``NAME``: every ``agent.task`` on
its inbox runs ``CMD`` once, the task text on its stdin (and ``ACTLINE_AGENT``,
``ACTLINE_TASK_ID``, ``ACTLINE_TURN_ID``, ``ACTLINE_CONVERSATION_ID`` in its environment). Its
stdout, stripped and capped, becomes the ``agent.done`` summary; a non-zero exit, a command that
cannot start, or one that outlives ``--timeout`` answers with a summary saying it failed (the
stderr tail included) so the turn never waits for nothing. Tasks run one at a time, in arrival
order. It stops on SIGINT/SIGTERM (a running command is killed, its task left unanswered).

``done`` publishes one ``agent.done`` and prints the node's verdict.
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

from rich.console import Console
from rich.text import Text

from bus import Bus, Envelope
from messages import AgentTask, ErrorReply, Message
from messages.ids import is_valid_id, is_valid_name

from .cmd_turns import load_config
from .config import Config, ConfigError
from .runtime import Runtime

__all__ = ["AgentRunner", "Outcome", "run_agent", "run_command", "run_done"]

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
        self, bus: Bus, rt: Runtime, name: str, argv: Sequence[str], timeout: float, out: Console
    ) -> None:
        self.bus = bus
        self.rt = rt
        self.name = name
        self.argv = list(argv)
        self.timeout = timeout
        self.out = out
        self.queue: asyncio.Queue[AgentTask] = asyncio.Queue()
        self.answered = 0

    async def on_task(self, msg: Message, env: Envelope) -> None:
        if isinstance(msg, AgentTask):
            _say(self.out, f"task {msg.task_id} of turn {msg.turn_id} received", "bold")
            self.queue.put_nowait(msg)

    async def work(self) -> None:
        """Run the queued tasks one at a time, forever."""
        while True:
            task = await self.queue.get()
            env = dict(os.environ)
            env.update(
                ACTLINE_AGENT=self.name,
                ACTLINE_TASK_ID=task.task_id,
                ACTLINE_TURN_ID=task.turn_id,
                ACTLINE_CONVERSATION_ID=task.conversation_id,
            )
            outcome = await run_command(self.argv, task.text, timeout=self.timeout, env=env)
            try:
                verdict = await self.rt.send_done(
                    self.name, outcome.summary, task_id=task.task_id, turn_id=task.turn_id
                )
            except Exception as exc:  # the node is gone: say so and keep serving
                _say(self.out, f"task {task.task_id}: could not send DONE ({exc})", "red")
                continue
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
    async with Runtime(config, node=False) as rt:
        runner = AgentRunner(rt.bus, rt, name, argv, args.timeout, console)
        sub = await rt.bus.subscribe(rt.bus.subjects.agent_inbox(name), runner.on_task)
        worker = asyncio.create_task(runner.work(), name=f"agent:{name}")
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            inbox = rt.bus.subjects.agent_inbox(name)
            _say(console, f"agent {name} listening on {inbox} at {url}", "bold green")
            _say(console, f"  each task runs: {shlex.join(argv)}", "dim")
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
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
    async with Runtime(config, node=False) as rt:
        verdict = await rt.send_done(name, args.summary, task_id=args.task, turn_id=args.turn)
    if isinstance(verdict, ErrorReply):
        _say(console, f"refused: {verdict.code}: {verdict.message}", "bold red")
        return 1
    ref = f" ({verdict.ref})" if verdict.ref else ""
    _say(console, f"accepted{ref}: {verdict.detail or 'the DONE was applied'}", "green")
    return 0
