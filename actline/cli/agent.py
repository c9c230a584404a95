"""``actline agent NAME -- CMD ...``, ``actline done NAME "summary"``, ``actline agents``.

``agent`` joins an existing NATS server as the outside agent ``NAME`` through its durable inbox
(``actline.actors.client.agent.AgentInbox``: a hello, then its tasks pulled from its own consumer, a
hello every beat so nodes know it is connected): every ``agent.task`` runs ``CMD`` once, the
task text on its stdin (and ``ACTLINE_AGENT``, ``ACTLINE_TASK_ID``, ``ACTLINE_TURN_ID``,
``ACTLINE_CONVERSATION_ID`` in its environment). Tasks sent while it was not running wait for
it. Tasks run one at a time, in arrival order.

How the command answers its task (one ``agent.done`` per task, on the agent's own DONE
subject, the same durable path as ``actline done``):

- **A DONE line.** A line of its stdout that is ``DONE(summary)`` or ``DONE(NAME, summary)``
  (``NAME`` this agent's name), alone on its line (surrounding whitespace allowed; the summary
  may hold parentheses and commas), answers the task at once with that summary, while the
  command may still run. Only the first counts: a second one is logged and dropped. A DONE
  inside a longer line or a fenced code block is output, not a signal; ``DONE(other, ...)``
  naming another agent is ignored with a warning (a single word before the first comma is
  read as a name).
- **Its output.** Without a DONE line, its stdout, stripped and capped, is the summary once
  it exits; a non-zero exit, a command that cannot start, or one that outlives ``--timeout``
  answers with a summary saying it failed (the stderr tail included), so the turn never
  waits for nothing.

It stops on SIGINT/SIGTERM (a running command is killed; a task not answered yet is left
open: it is delivered again when the agent is back). When the server goes away it says
"disconnected from URL: retrying", reconnects to the same URL for as long as it takes (a
restarted ``actline serve`` keeps its port), says "reconnected to URL" and takes tasks again.
Without ``--nats`` or ``NATS_URL`` it joins the running ``actline serve`` of its home.

``done`` publishes one ``agent.done`` and prints the node's verdict. ``agents`` lists the
agents the nodes know: connected or not, last seen, open tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shlex
import shutil
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
    "DoneLine",
    "DoneScanner",
    "Outcome",
    "parse_done_line",
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
            "set NATS_URL (the URL actline serve prints), or start actline serve with this "
            f"home ({config.node.home})"
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


DONE_LINE = re.compile(r"^\s*DONE\((?P<body>.*)\)\s*$", re.DOTALL)
"""A line that is a DONE signal: ``DONE(...)`` and nothing else but whitespace."""
FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
"""The opening or closing line of a fenced code block (Markdown)."""
NOT_OPEN = frozenset(
    {
        "no_outstanding_task",
        "unknown_task",
        "unknown_turn",
        "done_already_answered",
        "done_unknown_task",
    }
)
"""Verdict codes that mean the DONE found no open task to answer."""


@dataclass(frozen=True, slots=True)
class DoneLine:
    """A ``DONE(...)`` line of a command's output: its summary and the agent name it gave
    (None: ``DONE(summary)``, which names no one)."""

    summary: str
    name: str | None = None


def parse_done_line(line: str) -> DoneLine | None:
    """The DONE signal ``line`` is, or None when it is not one.

    ``DONE(summary)`` or ``DONE(name, summary)``, alone on the line (whitespace around it
    allowed). The summary runs to the line's last ``)``, so it may hold parentheses and
    commas; the text before the first comma is a name only when it is one word that is a
    valid agent name, else the whole body is the summary."""
    found = DONE_LINE.match(line)
    if found is None:
        return None
    body = found.group("body").strip()
    head, comma, rest = body.partition(",")
    if comma and is_valid_name(head.strip()):
        return DoneLine(rest.strip(), head.strip())
    return DoneLine(body)


class DoneScanner:
    """Reads a command's output line by line and finds its DONE lines, skipping fenced code
    blocks (a DONE quoted in a code block is output, not a signal)."""

    def __init__(self) -> None:
        self._fence: str | None = None

    def feed(self, line: str) -> DoneLine | None:
        """The DONE signal ``line`` carries, given the lines fed before it (None: none)."""
        fence = FENCE.match(line)
        if fence is not None:
            mark = fence.group("fence")
            if self._fence is None:
                self._fence = mark
            elif (
                mark[0] == self._fence[0] and len(mark) >= len(self._fence) and line.strip() == mark
            ):
                self._fence = None
            return None
        if self._fence is not None:
            return None
        return parse_done_line(line)


def _cap(text: str) -> str:
    if len(text) > MAX_SUMMARY:
        return text[:MAX_SUMMARY] + f"\n… ({len(text) - MAX_SUMMARY} more characters cut)"
    return text


async def run_command(
    argv: Sequence[str],
    stdin: str,
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> Outcome:
    """Run ``argv`` with ``stdin``; its stdout as the summary, or a failure summary.

    ``on_line`` is told each line of stdout as it comes (without its line break), while the
    command runs."""
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
            out, err = await _talk(proc, stdin.encode(), on_line)
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
    return Outcome(_cap(text) or f"{shown} finished without output", True)


async def _talk(
    proc: asyncio.subprocess.Process, data: bytes, on_line: Callable[[str], None] | None
) -> tuple[bytes, bytes]:
    """Write ``data`` to the command's stdin while its stdout (line by line to ``on_line``)
    and stderr are read; then wait for it to exit."""
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    assert stdin is not None and stdout is not None and stderr is not None

    async def feed() -> None:
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):  # it did not read its stdin
            pass
        finally:
            stdin.close()

    async def read_out() -> bytes:
        chunks: list[bytes] = []
        pending = bytearray()
        while chunk := await stdout.read(65536):
            chunks.append(chunk)
            if on_line is None:
                continue
            pending.extend(chunk)
            while (cut := pending.find(b"\n")) >= 0:
                on_line(pending[:cut].decode(errors="replace"))
                del pending[: cut + 1]
        if on_line is not None and pending:
            on_line(pending.decode(errors="replace"))
        return b"".join(chunks)

    async with asyncio.TaskGroup() as group:
        group.create_task(feed())
        out = group.create_task(read_out())
        err = group.create_task(stderr.read())
    await proc.wait()
    return out.result(), err.result()


@dataclass(slots=True)
class _Answering:
    """One task while its command runs: the DONE its output signalled, if any."""

    task: AgentTask
    scanner: DoneScanner = field(default_factory=DoneScanner)
    sending: asyncio.Task[None] | None = None
    """Sending the DONE of the first DONE line (None: no DONE line yet)."""


class AgentRunner:
    """Takes the tasks of one agent name and answers each: by the command's DONE line, or
    with its output."""

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
        """Run the command for ``task``; its DONE line answers it, else its output does."""
        env = dict(os.environ)
        env.update(
            ACTLINE_AGENT=self.name,
            ACTLINE_TASK_ID=task.task_id,
            ACTLINE_TURN_ID=task.turn_id,
            ACTLINE_CONVERSATION_ID=task.conversation_id,
        )
        state = _Answering(task)
        try:
            outcome = await run_command(
                self.argv,
                task.text,
                timeout=self.timeout,
                env=env,
                on_line=lambda line: self._line(state, line),
            )
        except asyncio.CancelledError:
            if state.sending is not None:  # stored or not: the node's verdict decides
                state.sending.cancel()
                await asyncio.gather(state.sending, return_exceptions=True)
            raise
        if state.sending is not None:
            await state.sending
            if not outcome.ok:
                text = f"task {task.task_id}: after its DONE line, {outcome.summary}"
                _say(self.out, text + "; nothing more was sent", "yellow")
            return
        await self._send(task, outcome.summary, "answered" if outcome.ok else "answered (failed)")

    def _line(self, state: _Answering, line: str) -> None:
        """One line of the command's output: a DONE line answers the task, once."""
        found = state.scanner.feed(line)
        if found is None:
            return
        task_id = state.task.task_id
        if found.name is not None and found.name != self.name:
            _say(
                self.out,
                f"task {task_id}: ignored a DONE line naming agent {found.name!r}, not "
                f"{self.name!r}: write DONE({self.name}, summary) or DONE(summary)",
                "yellow",
            )
            return
        if not found.summary:
            _say(self.out, f"task {task_id}: ignored a DONE line without a summary", "yellow")
            return
        if state.sending is not None:
            _say(self.out, f"task {task_id}: its DONE was sent already; a second DONE line ignored")
            return
        summary = _cap(found.summary)
        state.sending = asyncio.create_task(
            self._send(state.task, summary, "answered by its DONE line", line=True),
            name=f"agent:{self.name}:done:{task_id}",
        )

    async def _send(
        self, task: AgentTask, summary: str, status: str, *, line: bool = False
    ) -> None:
        """Send the DONE of ``task`` (the same path as ``actline done``) and say the verdict."""
        try:
            verdict = await self.inbox.done(task, summary)
        except Exception as exc:  # the node is gone: say so and keep serving
            _say(self.out, f"task {task.task_id}: could not send DONE ({exc})", "red")
            return
        if isinstance(verdict, ErrorReply):
            if line and verdict.code in NOT_OPEN:
                text = f"task {task.task_id}: its DONE line found no open task to answer"
                _say(self.out, f"{text}; node: {verdict.code}: {verdict.message}", "red")
                return
            self.answered += 1
            text = f"task {task.task_id} {status}; node: {verdict.code}: {verdict.message}"
            _say(self.out, text, "red")
            return
        self.answered += 1
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
            rt.bus.on_outage(
                lambda: _say(console, f"disconnected from {url}: retrying", "yellow"),
                lambda: _say(console, f"reconnected to {url}", "green"),
            )
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
