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

At the prompt, Ctrl-C once prints a hint and twice within ``DOUBLE_PRESS_S`` quits; Ctrl-D,
``/quit`` and ``/exit`` quit; ``/new`` starts a new conversation; ``/id`` prints its id.

Exit codes: 0 after ``/quit``, ``/exit`` or the end of input (Ctrl-D; at the end of the turn
then running); 130 when Ctrl-C quits (twice at the prompt, or a third time in a turn), as a
shell reports an interrupted program; 143 when SIGTERM ends it; 129 when SIGHUP does (the
terminal was closed: nothing more is printed). A start-up problem (no NATS,
an unwritable home, an unknown conversation) raises ``ConfigError`` naming the fix, which
``actline.cli.main`` reports in one line. Whichever way it ends, the running turn is cancelled and
given
``QUIT_GRACE_S`` to record its end, then the runtime (and an embedded nats-server) closes.

Cancellation contract: the SIGINT, SIGTERM and SIGHUP handlers are installed with
``loop.add_signal_handler`` once the runtime has started and removed after it has closed, so a
Ctrl-C before that raises ``KeyboardInterrupt`` as usual. Controls and followups are sent from
background tasks that are awaited before the runtime closes; cancelling ``run_chat`` closes the
runtime and propagates.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.text import Text

from actline.actors.client.client import TurnHandle
from actline.bus import BusError
from actline.config import Config, ConfigError
from actline.messages import Ack, Attachment, ErrorReply
from actline.ratings import RATING_WORDS
from actline.runtime import Runtime, follow

from .attachments import check_attachments, read_attachment
from .cards import TurnPrinter

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

DOUBLE_PRESS_S = 1.5
"""Two Ctrl-C presses at most this far apart (seconds) count as one double press."""
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
PROMPT = "you> "
HELP = (
    "type a message; while a turn runs, a line joins it as a followup. "
    "Ctrl-C: once skips waiting, twice cancels the turn, a third time quits. "
    "Commands: /new, /id, /skip, /cancel, /approve [ID], /deny [ID] [reason], /attach FILE, "
    "/feedback [up|down] [text], /quit (or Ctrl-D)"
)

Action = Literal["skip", "cancel", "quit", "hint"]


@dataclass(frozen=True, slots=True)
class Presses:
    """The Ctrl-C presses so far: how many in the current quick series, and when."""

    count: int = 0
    last: float | None = None
    last_idle: float | None = None
    """When the last press at the idle prompt was (None after a press during a turn)."""


def press(
    presses: Presses, now: float, *, running: bool, window: float = DOUBLE_PRESS_S
) -> tuple[Presses, Action]:
    """What one Ctrl-C at ``now`` (monotonic seconds) does, and the presses after it.

    A press within ``window`` of the previous one continues its series. During a turn the
    series goes skip, cancel, quit. At the prompt a press hints, and quits when it follows an
    idle press within ``window`` or is the third of a series begun during the turn.
    """
    quick = presses.last is not None and now - presses.last <= window
    count = presses.count + 1 if quick else 1
    if running:
        action: Action = "skip" if count == 1 else "cancel" if count == 2 else "quit"
        return Presses(count, now, None), action
    idle_quick = presses.last_idle is not None and now - presses.last_idle <= window
    return Presses(count, now, now), "quit" if idle_quick or count >= 3 else "hint"


class _LineReader:
    """Lines of a file descriptor as they come, without blocking the event loop.

    ``loop.add_reader`` where the descriptor can be polled (terminals, pipes); a daemon
    thread otherwise (a regular file). ``None`` in the queue means end of input.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        self._polled = False
        self._ended = False

    def start(self) -> None:
        try:
            self._loop.add_reader(self.fd, self._readable)
            self._polled = True
        except (OSError, NotImplementedError, ValueError):
            threading.Thread(
                target=self._read_blocking, name="actline-chat-stdin", daemon=True
            ).start()

    def close(self) -> None:
        if self._polled:
            self._loop.remove_reader(self.fd)
            self._polled = False

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:  # the terminal went away (EIO)
            data = b""
        self._feed(data)

    def _read_blocking(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            try:
                self._loop.call_soon_threadsafe(self._feed, data)
            except RuntimeError:  # the loop has closed
                return
            if not data:
                return

    def _feed(self, data: bytes) -> None:
        if self._ended:
            return
        text = self._partial + self._decoder.decode(data, final=not data)
        *lines, self._partial = text.split("\n")
        for line in lines:
            self.queue.put_nowait(line.rstrip("\r"))
        if not data:
            if self._partial:
                self.queue.put_nowait(self._partial)
                self._partial = ""
            self.queue.put_nowait(None)
            self._ended = True
            self.close()


class _Chat:
    """The chat's state and its loop; ``on_interrupt`` is the SIGINT handler."""

    def __init__(
        self,
        rt: Runtime,
        console: Console,
        conversation_id: str | None,
        lines: _LineReader,
        *,
        interactive: bool,
        window: float,
        turn_config: dict[str, Any] | None = None,
    ) -> None:
        self.rt = rt
        self.turn_config = dict(turn_config or {})
        self.console = console
        self.cid = conversation_id
        self.conversations: list[str] = [conversation_id] if conversation_id else []
        self.lines = lines
        self.interactive = interactive
        self.window = window
        self.presses = Presses()
        self.quit = asyncio.Event()
        self.exit_code = 0
        self.eof = False
        self.closing = False
        self.handle: TurnHandle | None = None
        self.printer: TurnPrinter | None = None
        self.cancel_sent = False
        self.pending: deque[str] = deque()
        self.attachments: list[Attachment] = []
        """Files ``/attach`` took for the next message (a turn, or a followup)."""
        self.last_turn: str | None = None
        self.hung_up = False
        self._controls: set[asyncio.Task[None]] = set()
        self._followups: set[asyncio.Task[None]] = set()

    # -- output ------------------------------------------------------------------------------------
    def say(self, text: str, style: str = "dim") -> None:
        """A line of our own, after whatever the turn printer left open."""
        if self.hung_up:  # the terminal is gone
            return
        if self.printer is not None and self.printer.open_channel:
            self.console.print()
            self.printer.open_channel = ""
        self.console.print(Text(text, style), highlight=False)

    def prompt(self) -> None:
        if self.hung_up:
            return
        self.console.print(Text(PROMPT, "bold"), end="")

    def farewell(self) -> None:
        if not self.conversations:
            self.say("no conversation was started")
            return
        for cid in self.conversations:
            self.say(f"conversation {cid}", "bold")
            self.say(f"  continue it: actline chat --conversation {cid}")
            self.say(f"  see its timeline: actline timeline {cid}")

    # -- Ctrl-C ------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.handle is not None and not self.handle.result.done()

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

    def attach(self, words: str) -> None:
        """``/attach FILE``: the file goes with the next message."""
        if not words:
            names = ", ".join(a.name for a in self.attachments) or "none"
            self.say(f"usage: /attach FILE (attached for the next message: {names})")
            return
        try:
            attachment = read_attachment(words, self.rt.config.node)
            check_attachments([*self.attachments, attachment], self.rt.config.node)
        except ConfigError as exc:
            self.say(f"not attached: {exc}", "red")
            return
        self.attachments.append(attachment)
        size = len(attachment.data or b"")
        what = f"{attachment.name} ({size} bytes, {attachment.mime})"
        self.say(f"attached {what}: it goes with your next message (a followup while a turn runs)")

    def feedback(self, words: list[str]) -> None:
        """``/feedback [up|down|-1|0|1] [text]`` on the latest turn of this chat."""
        cid, turn = self.cid, self.last_turn
        if cid is None or turn is None:
            self.say("no turn yet to give feedback on", "red")
            return
        rating = 0
        if words and words[0].lower() in RATING_WORDS:
            rating = RATING_WORDS[words[0].lower()]
            words = words[1:]
        text = " ".join(words)
        if not text and rating == 0:
            self.say("usage: /feedback [up|down|-1|0|1] [text]", "red")
            return

        async def run() -> None:
            try:
                verdict = await self.rt.feedback(cid, text, turn_id=turn, rating=rating)
            except (BusError, ConfigError) as exc:
                self.say(f"feedback not sent: {exc}", "red")
                return
            if isinstance(verdict, ErrorReply):
                self.say(f"feedback refused: {verdict.code}: {verdict.message}", "red")
            else:
                self.say(f"feedback on turn {verdict.ref}: {verdict.detail}", "green")

        task = asyncio.create_task(run())
        self._controls.add(task)
        task.add_done_callback(self._controls.discard)

    def skip(self) -> None:
        if self.handle is None:
            return
        self.say("skip: not waiting for outside agents any more (Ctrl-C again to cancel)", "yellow")
        self._control(self.rt.skip_waiting, self.handle.turn_id)

    def decide(self, approved: bool, words: list[str]) -> None:
        """Approve or deny the running turn's pending tool call(s): ``[ap-ID] [reason]``."""
        if self.handle is None:
            return
        approval = words[0] if words and words[0].startswith("ap-") else None
        reason = " ".join(words[1:] if approval else words)
        turn_id, verb = self.handle.turn_id, "approved" if approved else "denied"

        async def run() -> None:
            decide = self.rt.approve if approved else self.rt.deny
            try:
                verdict = await decide(turn_id, approval_id=approval, reason=reason)
            except (BusError, ValueError) as exc:
                self.say(f"could not send the approval: {exc}", "red")
                return
            if isinstance(verdict, ErrorReply):
                self.say(f"refused: {verdict.code}: {verdict.message}", "red")
            else:
                self.say(f"{verb}: {verdict.detail}", "green")

        task = asyncio.create_task(run())
        self._controls.add(task)
        task.add_done_callback(self._controls.discard)

    def cancel(self) -> None:
        if self.handle is None:
            return
        self.say("cancelled: the turn stops (Ctrl-C again to quit)", "yellow")
        self.cancel_sent = True
        self._control(self.rt.cancel, self.handle.turn_id)

    def _control(self, send: Callable[[str], Coroutine[Any, Any, None]], turn_id: str) -> None:
        async def run() -> None:
            try:
                await send(turn_id)
            except BusError as exc:
                self.say(f"could not reach the node: {exc}", "red")

        task = asyncio.create_task(run())
        self._controls.add(task)
        task.add_done_callback(self._controls.discard)

    async def drain(self) -> None:
        """Wait for the controls and followups still being sent."""
        pending = self._controls | self._followups
        if pending:
            await asyncio.wait(pending)

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> int:
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
                self._command(text)
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

    def _command(self, text: str) -> None:
        name = text.split()[0].lower()
        if name in ("/quit", "/exit"):
            self.exit_code = 0
            self.quit.set()
        elif name == "/id":
            self.say(f"conversation {self.cid}" if self.cid else "no conversation yet", "bold")
        elif name == "/help":
            self.say(HELP)
        elif name == "/skip" and self.running:
            self.skip()
        elif name == "/cancel" and self.running:
            self.cancel()
        elif name in ("/approve", "/deny") and self.running:
            self.decide(name == "/approve", text.split()[1:])
        elif name == "/attach":
            self.attach(text[len(name) :].strip())
        elif name == "/feedback":
            self.feedback(text.split()[1:])
        elif name == "/new" and not self.running:
            self.cid = None
            self.say("new conversation: the next message starts it")
        elif name in ("/new", "/skip", "/cancel", "/approve", "/deny"):
            self.say(f"{name} {'waits for the turn to end' if self.running else 'needs a turn'}")
        else:
            self.say(f"unknown command {name}; /help lists them", "red")

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
            self._command(text)
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
) -> int:
    """Chat on the terminal until the user quits; returns the exit code (see the module doc).

    ``ConfigError`` when the runtime cannot start or ``conversation_id`` is not stored.

    ``stdin`` is the descriptor lines are read from (default ``sys.stdin``); followups are
    sent only when it is a terminal. ``double_press_s`` is the Ctrl-C double-press window.
    ``turn_config`` goes with every turn (``--profile``: the profile also for a node elsewhere).
    """
    rt = await Runtime(config).start()
    try:
        if conversation_id is not None:
            rt.check_conversation(conversation_id)
    except ConfigError:
        await rt.close()
        raise
    fd = sys.stdin.fileno() if stdin is None else stdin
    lines = _LineReader(fd)
    chat = _Chat(
        rt,
        console,
        conversation_id,
        lines,
        interactive=os.isatty(fd),
        window=double_press_s,
        turn_config=turn_config,
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
