"""The slash commands of ``actline chat`` and the controls they send to the running turn.

``ChatCommands`` holds what a chat session and its commands share: the runtime, the
conversation, the running turn's handle and printer, the files ``/attach`` took, and the
chat's own output lines (``say``, ``prompt``, ``farewell``). ``command(text)`` runs one
``/...`` line: ``/quit`` and ``/exit``, ``/id``, ``/help``, ``/new``, ``/skip``, ``/cancel``,
``/approve`` and ``/deny``, ``/attach FILE`` and ``/feedback``. Controls, decisions and
feedback are sent from background tasks (``drain`` waits for them), so a command never blocks
the session loop (``actline.terminal.chat``), which builds on this class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from rich.console import Console
from rich.text import Text

from actline.actors.client.client import TurnHandle
from actline.bus import BusError
from actline.config import ConfigError
from actline.messages import Attachment, ErrorReply
from actline.ratings import RATING_WORDS
from actline.runtime import Runtime

from .attachments import check_attachments, read_attachment
from .cards import TurnPrinter

__all__ = ["HELP", "PROMPT", "ChatCommands"]

PROMPT = "you> "
HELP = (
    "type a message; while a turn runs, a line joins it as a followup. "
    "Ctrl-C: once skips waiting, twice cancels the turn, a third time quits. "
    "Commands: /new, /id, /skip, /cancel, /approve [ID], /deny [ID] [reason], /attach FILE, "
    "/feedback [up|down] [text], /quit (or Ctrl-D)"
)


class ChatCommands:
    """A chat's state, its own output lines and its slash commands."""

    def __init__(
        self,
        rt: Runtime,
        console: Console,
        conversation_id: str | None,
        *,
        turn_config: dict[str, Any] | None = None,
    ) -> None:
        self.rt = rt
        self.turn_config = dict(turn_config or {})
        self.console = console
        self.cid = conversation_id
        self.conversations: list[str] = [conversation_id] if conversation_id else []
        self.quit = asyncio.Event()
        self.exit_code = 0
        self.handle: TurnHandle | None = None
        self.printer: TurnPrinter | None = None
        self.cancel_sent = False
        self.attachments: list[Attachment] = []
        """Files ``/attach`` took for the next message (a turn, or a followup)."""
        self.last_turn: str | None = None
        self.hung_up = False
        self._controls: set[asyncio.Task[None]] = set()

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

    # -- the commands ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.handle is not None and not self.handle.result.done()

    def command(self, text: str) -> None:
        """Run one ``/...`` line (at the prompt, or typed while a turn runs)."""
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

        self._background(run())

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

        self._background(run())

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

        self._background(run())

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """Send from a task, kept until it ends (``drain`` waits for it)."""
        task = asyncio.create_task(work)
        self._controls.add(task)
        task.add_done_callback(self._controls.discard)
