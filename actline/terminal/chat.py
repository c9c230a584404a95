"""``actline chat``: one conversation on the terminal, turn after turn, with the user in control.

Each line typed at ``you>`` is a turn of one conversation (the first turn creates it unless a
conversation id was given), streamed with ``TurnPrinter``. While a turn runs:

* a line typed on a terminal joins the running turn as a followup (the node's verdict is
  printed); when stdin is not a terminal, lines wait for the prompt and become turns;
* Ctrl-C once skips waiting for outside agents (``react.skip_waiting``), twice within
  ``DOUBLE_PRESS_S`` cancels the turn (``react.cancel``), a third time quits the chat;
* ``/skip``, ``/cancel``, ``/id`` and ``/quit`` do the same by name;
* ``/attach FILE`` attaches a file to the next message typed at the prompt, a turn or, while
  one runs, a followup (checked against the node's attachment limits at once);
  ``/feedback [up|down|-1|0|1] [text]`` rates the latest turn of the chat;
* a tool call waiting for approval shows its card (tool, arguments, the ``actline approve``
  and ``deny`` commands); ``/approve [ap-ID] [reason]`` and ``/deny [ap-ID] [reason]`` decide
  it from the chat (every pending one without an id). Skipping the wait denies them.

The chat is a client of the node serving ``config.nats_url`` (``node=False``: the CLI's choice
when a server runs) or runs a node itself. When the connection to NATS drops it says
"disconnected from URL: retrying" and, once it is back, "reconnected to URL" (dim lines).

At the prompt, Ctrl-C once prints a hint and twice within ``DOUBLE_PRESS_S`` quits; Ctrl-D,
``/quit`` and ``/exit`` quit; ``/new`` starts a new conversation; ``/id`` prints its id.

Exit codes: 0 after ``/quit``, ``/exit`` or the end of input (Ctrl-D; at the end of the turn
then running); 130 when Ctrl-C quits (twice at the prompt, or a third time in a turn), as a
shell reports an interrupted program; 143 when SIGTERM ends it; 129 when SIGHUP does (the
terminal was closed: nothing more is printed). A start-up problem (no NATS,
an unwritable home, an unknown conversation) raises ``ConfigError`` naming the fix, which
``actline.cli.main`` reports in one line. Whichever way it ends, the running turn is cancelled
and given ``QUIT_GRACE_S`` to record its end, then the runtime (and an embedded nats-server)
closes.

Cancellation contract: the SIGINT, SIGTERM and SIGHUP handlers are installed with
``loop.add_signal_handler`` once the runtime has started and removed after it has closed, so a
Ctrl-C before that raises ``KeyboardInterrupt`` as usual. Controls and followups are sent from
background tasks that are awaited before the runtime closes; cancelling ``run_chat`` closes the
runtime and propagates.

This module is the session loop (turns, followups, signals); the slash commands and the
chat's output lines are ``actline.terminal.commands``, what a Ctrl-C does is
``actline.terminal.presses`` and the reading of stdin ``actline.terminal.lines``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections import deque
from typing import Any

from rich.console import Console

from actline.actors.client.client import TurnHandle
from actline.bus import BusError
from actline.config import Config, ConfigError
from actline.messages import Ack, Attachment, ErrorReply
from actline.runtime import Runtime, follow

from .cards import TurnPrinter
from .commands import HELP, ChatCommands
from .lines import LineReader
from .presses import DOUBLE_PRESS_S, Action, Presses, press

__all__ = [
    "DOUBLE_PRESS_S",
    "EXIT_HANGUP",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "Action",
    "Presses",
    "press",
    "run_chat",
]

EXIT_INTERRUPTED = 130
"""The exit code when Ctrl-C quits the chat (128 + SIGINT, as shells report it)."""
EXIT_TERMINATED = 143
"""The exit code when SIGTERM ends the chat (128 + SIGTERM), after the same cleanup."""
EXIT_HANGUP = 129
"""The exit code when SIGHUP (the terminal closed) ends the chat, after the same cleanup."""
QUIT_GRACE_S = 3.0
"""How long a turn cancelled by quitting may take to record its end before the node stops."""
TURN_TIMEOUT_S = 24 * 3600.0
"""A turn may wait for outside agents for long; the user ends it with Ctrl-C."""


class _Chat(ChatCommands):
    """The chat's loop over its input; ``on_interrupt`` is the SIGINT handler."""

    def __init__(
        self,
        rt: Runtime,
        console: Console,
        conversation_id: str | None,
        lines: LineReader,
        *,
        interactive: bool,
        window: float,
        turn_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(rt, console, conversation_id, turn_config=turn_config)
        self.lines = lines
        self.interactive = interactive
        self.window = window
        self.presses = Presses()
        self.eof = False
        self.closing = False
        self.pending: deque[str] = deque()
        """Lines that become turns before the next one is read (a followup too late)."""
        self._followups: set[asyncio.Task[None]] = set()

    # -- signals -----------------------------------------------------------------------------------
    def on_interrupt(self) -> None:
        if self.closing:
            return
        self.presses, action = press(
            self.presses, time.monotonic(), running=self.running, window=self.window
        )
        open_line = self.printer is not None and self.printer.open_channel
        if self.console.is_terminal and not open_line:
            self.console.print()  # the terminal echoed ^C where the cursor was
        if action == "skip":
            self.skip()
        elif action == "cancel":
            self.cancel()
        elif action == "hint":
            self.say("(Ctrl-C again to quit, or /quit)")
            self.prompt()
        else:
            self.exit_code = EXIT_INTERRUPTED
            self.quit.set()

    def on_terminate(self) -> None:
        """SIGTERM: quit as Ctrl-C does, so the embedded nats-server is stopped too."""
        if not self.closing:
            self.exit_code = EXIT_TERMINATED
            self.quit.set()

    def on_hangup(self) -> None:
        """SIGHUP: the terminal was closed; quit without a word, stopping the nats-server."""
        self.hung_up = True
        if not self.closing:
            self.exit_code = EXIT_HANGUP
            self.quit.set()

    async def drain(self) -> None:
        """Wait for the controls and followups still being sent."""
        pending = self._controls | self._followups
        if pending:
            await asyncio.wait(pending)

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> int:
        if self.rt.node is None:
            self.say(
                f"actline chat · a client of the node on NATS {self.rt.nats_url}: "
                "outside agents answer there"
            )
        else:
            embedded = " (embedded)" if self.rt.server is not None else ""
            self.say(
                f"actline chat · model {self.rt.config.node.model} · "
                f"NATS {self.rt.nats_url}{embedded}: outside agents answer there"
            )
        self.say(HELP)
        if self.cid:
            self.say(f"continuing conversation {self.cid}")
        while not self.quit.is_set():
            text = self.pending.popleft() if self.pending else await self._next_line()
            if text is None:
                break
            text = text.strip()
            if not text:
                continue
            if text.startswith("/"):
                self.command(text)
            else:
                await self._turn(text)
            if self.eof and not self.pending:
                break
        return self.exit_code

    async def _next_line(self) -> str | None:
        self.prompt()
        get = asyncio.create_task(self.lines.queue.get())
        stop = asyncio.create_task(self.quit.wait())
        try:
            await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not get.done():
                get.cancel()
        if self.quit.is_set() or get.cancelled():
            return None
        line = get.result()
        if line is None:
            self.eof = True
            self.console.print()
        elif not self.interactive:
            self.console.print(line, highlight=False, markup=False)
        return line

    async def _turn(self, text: str) -> None:
        try:
            handle = await self.rt.submit(
                text, self.cid, config=dict(self.turn_config), attachments=self.attachments
            )
        except (ConfigError, BusError, TimeoutError) as exc:
            self.say(f"could not submit the turn: {exc}", "red")
            return
        self.attachments, self.last_turn = [], handle.turn_id
        if self.cid != handle.conversation_id:
            self.cid = handle.conversation_id
            self.conversations.append(self.cid)
        self.handle, self.printer, self.cancel_sent = handle, TurnPrinter(self.console), False
        show = asyncio.create_task(self._show(handle, self.printer))
        stop = asyncio.create_task(self.quit.wait())
        get: asyncio.Task[str | None] | None = None
        try:
            while not show.done() and not stop.done():
                if get is None and self.interactive and not self.eof:
                    get = asyncio.create_task(self.lines.queue.get())
                waiting = {show, stop} if get is None else {show, stop, get}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if get is not None and get.done():
                    self._during_turn(handle, get.result())
                    get = None
            if not show.done():
                await self._end_on_quit(handle, show)
            if self._followups:
                await asyncio.wait(self._followups)
        finally:
            for task in (stop, get, show):
                if task is not None and not task.done():
                    task.cancel()
            self.handle = self.printer = None

    async def _show(self, handle: TurnHandle, printer: TurnPrinter) -> None:
        try:
            async for event in follow(handle, timeout=TURN_TIMEOUT_S):
                printer.show(event)
        except TimeoutError:
            self.say(f"turn {handle.turn_id}: no result after {TURN_TIMEOUT_S:.0f} s", "red")

    async def _end_on_quit(self, handle: TurnHandle, show: asyncio.Task[None]) -> None:
        if not self.cancel_sent:
            self.cancel_sent = True
            with contextlib.suppress(BusError):
                await self.rt.cancel(handle.turn_id)
        await asyncio.wait({show}, timeout=QUIT_GRACE_S)

    def _during_turn(self, handle: TurnHandle, line: str | None) -> None:
        if line is None:
            self.eof = True
            self.say("(end of input: the chat ends after this turn)")
            return
        text = line.strip()
        if not text:
            return
        if text.startswith("/"):
            self.command(text)
            return
        attachments, self.attachments = self.attachments, []  # /attach: with this followup
        task = asyncio.create_task(self._followup(handle, text, attachments))
        self._followups.add(task)
        task.add_done_callback(self._followups.discard)

    async def _followup(self, handle: TurnHandle, text: str, attachments: list[Attachment]) -> None:
        try:
            verdict = await self.rt.followup(handle, text, attachments=attachments)
        except BusError as exc:
            verdict = ErrorReply(code="not_sent", message=str(exc))
        if isinstance(verdict, Ack):
            self.say(f"followup joined turn {verdict.ref}: {verdict.detail}", "cyan")
            return
        self.attachments = [*attachments, *self.attachments]  # not joined: they wait
        if verdict.code == "turn_not_running":
            self.say("the turn had ended: your line becomes the next turn", "cyan")
            self.pending.append(text)  # its attachments go with it
            return
        what = "not sent" if verdict.code == "not_sent" else f"not joined ({verdict.code})"
        self.say(f"followup {what}: {verdict.message}", "red")
        if attachments:
            self.say("its attachments wait for your next message", "red")


async def run_chat(
    config: Config,
    conversation_id: str | None,
    console: Console,
    *,
    stdin: int | None = None,
    double_press_s: float = DOUBLE_PRESS_S,
    turn_config: dict[str, Any] | None = None,
    node: bool = True,
) -> int:
    """Chat on the terminal until the user quits; returns the exit code (see the module doc).

    ``node``: run a node in this process (False: a client of the node serving
    ``config.nats_url``).

    ``ConfigError`` when the runtime cannot start or ``conversation_id`` is not stored.

    ``stdin`` is the descriptor lines are read from (default ``sys.stdin``); followups are
    sent only when it is a terminal. ``double_press_s`` is the Ctrl-C double-press window.
    ``turn_config`` goes with every turn (``--profile``: the profile also for a node elsewhere).
    """
    rt = await Runtime(config, node=node).start()
    try:
        if conversation_id is not None:
            rt.check_conversation(conversation_id)
    except ConfigError:
        await rt.close()
        raise
    fd = sys.stdin.fileno() if stdin is None else stdin
    lines = LineReader(fd)
    chat = _Chat(
        rt,
        console,
        conversation_id,
        lines,
        interactive=os.isatty(fd),
        window=double_press_s,
        turn_config=turn_config,
    )
    url = rt.nats_url
    rt.bus.on_outage(
        lambda: chat.say(f"disconnected from {url}: retrying", "dim"),
        lambda: chat.say(f"reconnected to {url}", "dim"),
    )
    loop = asyncio.get_running_loop()
    handled: list[int] = []
    for signum, handler in (
        (signal.SIGINT, chat.on_interrupt),
        (signal.SIGTERM, chat.on_terminate),
        (signal.SIGHUP, chat.on_hangup),
    ):
        try:
            loop.add_signal_handler(signum, handler)
            handled.append(signum)
        except (NotImplementedError, RuntimeError):  # no signal handlers on this loop or thread
            pass
    try:
        lines.start()
        code = await chat.run()
        chat.closing = True
        await chat.drain()
        if not chat.hung_up:
            chat.farewell()
        return code
    finally:
        chat.closing = True
        lines.close()
        await rt.close()
        for number in handled:
            loop.remove_signal_handler(number)
