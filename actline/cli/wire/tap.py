"""``actline tap``: every message under the prefix as it passes, decoded, one line each.

It subscribes to ``<prefix>.>`` (node or admin credentials; by default the admin
credentials of this home's keys) and, when the credentials allow it (admin, or a server
without authentication), to ``_INBOX.>`` too: the replies (``llm.result``, ``tool.result``,
``turn.accepted`` of a request, ``ack``, ``error.reply``), which node credentials cannot
read. Every payload is decoded with ``actline.messages.decode``; one that does not decode
is shown as undecodable with the reason (under the prefix; on a reply inbox it is
JetStream's own traffic, counted and not shown), and JetStream's deliveries to an inbox
(a pulled turn request, a direct get: copies of what was published under the prefix, or
stored earlier) are skipped the same way. Nothing is answered and nothing is sent.

- ``--conversation CID``: on a subject that names a conversation (``stream.<cid>``,
  ``conv.<cid>.*``, ``blocks.<cid>``) only CID's; elsewhere only the messages whose
  ``conversation_id`` is CID (an undecodable one there is dropped);
- ``--kinds k1,k2``: only those kinds (``undecodable`` for the payloads that do not decode);
- ``--jsonl FILE``: also one JSON object per message shown: ``time`` (seconds since the
  epoch), ``subject``, ``reply``, ``kind`` (null when undecodable), ``size`` (bytes),
  ``ids`` (conversation, turn, round, call, task, agent, node: those it carries), and
  ``message``, the decoded message as a dict (or ``error``, why it did not decode);
- ``--count N`` / ``--seconds S``: stop after N messages shown, or after S seconds; else at
  SIGINT or SIGTERM. It ends with one line counting what it saw (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import signal
import time
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.text import Text

from actline.bus import PermissionDenied
from actline.bus.tap import Seen, may_watch, watch
from actline.config import Config, ConfigError
from actline.messages import DecodeError, Message, Subjects, decode

from ..turns import load_config
from .pool import connect

__all__ = ["Tapped", "run_tap", "tapped"]

ID_FIELDS = ("conversation_id", "turn_id", "round", "call_id", "task_id", "agent", "node")
"""The fields of a message shown as its ids (those it has)."""
REPLIES = "_INBOX.>"
STOP = (signal.SIGINT, signal.SIGTERM)
UNDECODABLE = "undecodable"
_NAMED_BY_SUBJECT = ("stream", "conv", "blocks")
"""Subjects whose second token is a conversation id: ``<prefix>.stream.<cid>``, ..."""
_TEXT_FIELDS = ("text", "detail", "answer", "summary", "content", "message", "error", "tool")


class Tapped:
    """One message seen: its routing facts and its decoded message (None when undecodable)."""

    __slots__ = ("at", "error", "message", "seen")

    def __init__(self, seen: Seen, at: float) -> None:
        self.seen = seen
        self.at = at
        self.message: Message | None = None
        self.error = ""
        try:
            self.message = decode(seen.data)
        except DecodeError as exc:
            self.error = exc.reason

    @property
    def kind(self) -> str:
        return self.message.kind if self.message is not None else UNDECODABLE

    @property
    def ids(self) -> dict[str, Any]:
        if self.message is None:
            return {}
        found = {name: getattr(self.message, name, None) for name in ID_FIELDS}
        return {k: v for k, v in found.items() if v not in (None, "")}

    def record(self) -> dict[str, Any]:
        """The JSON object of ``--jsonl``."""
        out: dict[str, Any] = {
            "time": round(self.at, 6),
            "subject": self.seen.subject,
            "reply": self.seen.reply or None,
            "kind": self.message.kind if self.message is not None else None,
            "size": len(self.seen.data),
            "ids": self.ids,
        }
        if self.message is not None:
            out["message"] = _plain(self.message.model_dump(mode="python"))
        else:
            out["error"] = self.error
        return out


def tapped(seen: Seen, at: float | None = None) -> Tapped:
    """``seen`` decoded (``at``: when it arrived, seconds since the epoch; now when None)."""
    return Tapped(seen, time.time() if at is None else at)


def _plain(value: Any) -> Any:
    """``value`` with what JSON cannot hold made plain: bytes as base64, times as ISO text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    iso = getattr(value, "isoformat", None)
    return iso() if callable(iso) else str(value)


def conversation_in(subject: str, subjects: Subjects) -> str | None:
    """The conversation id a subject names (``stream.<cid>``, ``conv.<cid>.*``,
    ``blocks.<cid>``), else None."""
    head = subjects.prefix + "."
    if not subject.startswith(head):
        return None
    tokens = subject[len(head) :].split(".")
    if len(tokens) >= 2 and tokens[0] in _NAMED_BY_SUBJECT:
        return tokens[1]
    return None


def _kept(item: Tapped, subjects: Subjects, conversation: str | None, kinds: set[str]) -> bool:
    if kinds and item.kind not in kinds:
        return False
    if conversation is None:
        return True
    named = conversation_in(item.seen.subject, subjects)
    if named is not None:
        return named == conversation
    return item.message is not None and getattr(item.message, "conversation_id", None) == (
        conversation
    )


def _jetstream_copy(seen: Seen) -> bool:
    """A message JetStream delivered to an inbox: a pulled or fetched stored message (it
    keeps the subject it was published on)."""
    return seen.reply.startswith("$JS.") or "Nats-Stream" in seen.headers


def _summary(message: Message) -> str:
    for name in _TEXT_FIELDS:
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            text = " ".join(value.split())
            return text if len(text) <= 80 else text[:79] + "…"
    status = getattr(message, "status", None)
    return str(status) if status else ""


def line(item: Tapped) -> Text:
    """The terminal line of one message."""
    stamp = time.strftime("%H:%M:%S", time.localtime(item.at)) + f".{int(item.at % 1 * 1000):03d}"
    text = Text()
    text.append(stamp + " ", "dim")
    text.append(item.seen.subject, "cyan")
    text.append(" ")
    if item.message is None:
        text.append(f"{UNDECODABLE} ({item.error})", "bold red")
        text.append(f" {len(item.seen.data)} B", "dim")
        return text
    text.append(item.kind, "bold")
    text.append(f" {len(item.seen.data)} B", "dim")
    ids = " ".join(f"{k.removesuffix('_id')}={v}" for k, v in item.ids.items())
    if ids:
        text.append(" " + ids, "magenta")
    summary = _summary(item.message)
    if summary:
        text.append(" " + summary)
    return text


def _server(config: Config) -> str:
    """--nats / NATS_URL, else the embedded server this home runs."""
    if config.nats_url:
        return config.nats_url
    running = config.node.home / "nats" / "url"
    if running.is_file():
        return running.read_text().strip()
    raise ConfigError(
        "tap which server? pass --nats URL or set NATS_URL (`actline serve` prints it)"
    )


def _credentials(config: Config) -> str | None:
    try:
        path = config.creds_for("admin")
    except ConfigError:
        if config.nats_creds is not None:
            raise
        raise ConfigError(
            "the tap needs node or admin credentials: issue them where the deployment's keys "
            "are with `actline creds admin --out FILE` and pass --creds FILE"
        ) from None
    return None if path is None else str(path)


async def run_tap(args: argparse.Namespace, console: Console) -> int:
    """Print (and record) the messages until ``--count``, ``--seconds`` or a signal."""
    config = load_config(args)
    if args.count is not None and args.count < 1:
        raise ConfigError(f"--count {args.count}: give 1 or more")
    if args.seconds is not None and not args.seconds > 0:
        raise ConfigError(f"--seconds {args.seconds}: give a positive number")
    url = _server(config)
    creds = _credentials(config)
    kinds = {k.strip() for k in (args.kinds or "").split(",") if k.strip()}
    bus = await connect(url, creds, name="actline-tap", role="admin")
    seen: asyncio.Queue[tuple[Tapped, bool]] = asyncio.Queue()

    async def keep(message: Seen) -> None:
        seen.put_nowait((tapped(message), False))

    async def keep_reply(message: Seen) -> None:
        seen.put_nowait((tapped(message), True))

    counts = {"shown": 0, "undecodable": 0, "skipped": 0}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(bus.close)
        subjects = bus.subjects
        try:
            await watch(bus, subjects.all, keep)
        except PermissionDenied as exc:
            raise ConfigError(
                f"{exc.who} may not subscribe to {exc.subject!r}: the tap needs node or admin "
                "credentials (`actline creds admin --out FILE`, then --creds FILE)"
            ) from None
        replies = may_watch(bus, REPLIES)
        if replies:
            await watch(bus, REPLIES, keep_reply)
        out: IO[str] | None = None
        if args.jsonl is not None:
            path = Path(args.jsonl)
            try:
                out = stack.enter_context(await asyncio.to_thread(path.open, "a", encoding="utf-8"))
            except OSError as exc:
                raise ConfigError(f"--jsonl {path}: {exc.strerror or exc}") from None
        for sig in STOP:
            loop.add_signal_handler(sig, stop.set)
            stack.callback(loop.remove_signal_handler, sig)
        if args.seconds is not None:
            loop.call_later(args.seconds, stop.set)
        console.print(
            Text(
                f"tapping {subjects.all}"
                + (f" and {REPLIES}" if replies else " (replies need admin credentials)")
                + f" on {bus.url}",
                "bold green",
            ),
            soft_wrap=True,
        )
        console.file.flush()
        stopped = asyncio.ensure_future(stop.wait())
        stack.callback(stopped.cancel)
        while not stop.is_set():
            taking = asyncio.ensure_future(seen.get())
            done, _ = await asyncio.wait({taking, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if taking not in done:
                taking.cancel()
                break
            item, via_inbox = taking.result()
            if via_inbox and (item.message is None or _jetstream_copy(item.seen)):
                counts["skipped"] += 1
                continue
            if not _kept(item, subjects, args.conversation, kinds):
                continue
            counts["shown"] += 1
            counts["undecodable"] += item.message is None
            console.print(line(item), soft_wrap=True, highlight=False)
            if out is not None:
                out.write(json.dumps(item.record(), ensure_ascii=False) + "\n")
                out.flush()
            if args.count is not None and counts["shown"] >= args.count:
                break
        console.print(
            Text(
                f"tap: {counts['shown']} messages ({counts['undecodable']} undecodable); "
                f"{counts['skipped']} JetStream replies skipped",
                "dim",
            )
        )
        console.file.flush()
    return 0
