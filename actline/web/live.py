"""The console's live events: the turns of the conversations it shows, as JSON events.

``Hub`` follows each ``TurnHandle`` the console submits (``actline.runtime.follow``) and,
once a page opens a conversation (``Hub.watch``), the turns other clients submit in it (a
Ray job, ``actline ask``): their cards and deltas from the conversation's stream subject,
their result from ``result.<turn>`` (or the results stream, when it came before the
subscription). Every event, converted by ``event_json``, goes to one ordered log. A
server-sent-events stream (``Hub.stream``) replays a conversation's events from the log and
then waits for new ones; each event's SSE id is its index in the log, so a browser that
reconnects with ``Last-Event-ID`` resumes where it was. ``connection`` events (for every
conversation) say when the console's NATS connection drops (``reconnecting``) and comes back
(``connected``), told by the bus's hooks (``Bus.on_disconnect`` calls ``disconnected``,
``Bus.on_reconnect`` ``reconnected``).

After a NATS restart the client resubscribes and recovers the results of pending turns from
the results stream (``actors.client``); deltas published while it was away are lost to the
page, the result is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from actors.client import Client, TurnHandle
from bus import Bus, BusError, Envelope, Subscription
from messages import Message, ReActProgress, ReActResult, StreamDelta, TurnAccepted

from ..runtime import follow

__all__ = ["Hub", "card_kind", "event_json"]

log = logging.getLogger(__name__)

TURN_TIMEOUT_S = 24 * 3600.0
"""How long the console follows one turn (a waiting turn may wait for hours)."""
PLAN_TOOLS = ("react.plan",)
NOTE_TOOLS = ("react.note", "react.notes")


def card_kind(card: ReActProgress) -> str:
    """The card's kind on the page: its phase, or ``plan``/``note`` for a tool call made of
    only plan (note) calls."""
    if card.phase == "tool_call":
        names = [n.strip() for n in card.detail.split(",") if n.strip()]
        if names and all(n in PLAN_TOOLS for n in names):
            return "plan"
        if names and all(n in NOTE_TOOLS for n in names):
            return "note"
    return card.phase


def event_json(event: Any) -> dict[str, Any] | None:
    """One wire message as the page's event (None for anything else)."""
    if isinstance(event, ReActProgress):
        out = event.model_dump(mode="json")
        out.update(type="card", card_kind=card_kind(event))
        return out
    if isinstance(event, StreamDelta):
        return {"type": "delta", **event.model_dump(mode="json")}
    if isinstance(event, TurnAccepted):
        return {"type": "accepted", **event.model_dump(mode="json")}
    if isinstance(event, ReActResult):
        out = {"type": "result", **event.model_dump(mode="json")}
        usage = event.usage
        prompt = (
            usage.input_tokens
            + usage.cache_read_tokens
            + usage.cache_write_5m_tokens
            + usage.cache_write_1h_tokens
        )
        out["cache_read_pct"] = round(100.0 * usage.cache_read_tokens / prompt) if prompt else 0
        out["prompt_tokens"] = prompt
        return out
    return None


@dataclass
class Hub:
    """The ordered log of the console's live events (module docstring)."""

    is_connected: Callable[[], bool]
    sources: Callable[[str, list[int]], list[dict[str, Any]]] = lambda cid, sids: []
    """The sources a result cites, by conversation and SIDs (added to ``result`` events)."""
    log: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)
    handles: dict[str, TurnHandle] = field(default_factory=dict)
    """Turn id -> the handle of every turn this console submitted."""
    running: dict[str, str] = field(default_factory=dict)
    """Conversation id -> its turn still running (as far as this console knows)."""
    status: dict[str, str] = field(default_factory=dict)
    """Turn id -> its last status (running, waiting, or the result's)."""
    bus: Bus | None = None
    """The console's connection: with it, ``watch`` follows the turns of other clients."""
    client: Client | None = None
    """The console's client: the turns it submitted are followed through their handles."""
    connected: bool = True
    closing: bool = False
    """Set by ``shutdown``: every event stream ends (the server is stopping)."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _watched: dict[str, Subscription] = field(default_factory=dict)
    """Conversation id -> the subscription to its stream subject (``watch``)."""
    _foreign: set[str] = field(default_factory=set)
    """Turns of other clients seen on a watched conversation (their result is awaited)."""

    def start(self) -> None:
        self.connected = self.is_connected()

    def shutdown(self) -> None:
        """End every event stream now (before the web server waits for its connections)."""
        self.closing = True
        self._changed.set()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sub in self._watched.values():
            with contextlib.suppress(BusError):
                await sub.unsubscribe()
        self._watched.clear()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def publish(self, cid: str | None, event: dict[str, Any]) -> None:
        """Append one event (``cid`` None: for every conversation) and wake the streams."""
        self.log.append((cid, event))
        self._changed.set()
        self._changed = asyncio.Event()

    def add(self, handle: TurnHandle) -> None:
        """Follow a turn this console submitted."""
        self.handles[handle.turn_id] = handle
        self.running[handle.conversation_id] = handle.turn_id
        self.status[handle.turn_id] = "running"
        self._spawn(self._follow(handle), f"console-{handle.turn_id}")

    async def _follow(self, handle: TurnHandle) -> None:
        cid, tid = handle.conversation_id, handle.turn_id
        try:
            async for event in follow(handle, timeout=TURN_TIMEOUT_S):
                shown = event_json(event)
                if shown is None:
                    continue
                if isinstance(event, ReActProgress):
                    self.status[tid] = "waiting" if event.phase == "waiting" else "running"
                if isinstance(event, ReActResult):
                    self._show_result(event)
                    continue
                self.publish(cid, shown)
        except Exception as exc:  # shown on the page rather than lost
            log.exception("following turn %s failed", tid)
            self.status[tid] = "failed"
            notice = {"type": "card", "card_kind": "notice", "phase": "notice"}
            notice.update(conversation_id=cid, turn_id=tid, detail=f"console lost the turn: {exc}")
            self.publish(cid, notice)
        finally:
            if self.running.get(cid) == tid:
                del self.running[cid]

    def _show_result(self, result: ReActResult) -> None:
        shown = event_json(result)
        assert shown is not None
        self.status[result.turn_id] = result.status
        shown["sources"] = self.sources(result.conversation_id, list(result.sources_used))
        self.publish(result.conversation_id, shown)

    # -- the turns of other clients ----------------------------------------------------------
    async def watch(self, cid: str) -> None:
        """Follow the turns other clients submit in ``cid`` from now on. A subscription that
        fails (NATS away) is logged and tried again when a page next opens ``cid``."""
        if self.bus is None or cid in self._watched:
            return
        try:
            sub = await self.bus.subscribe(self.bus.subjects.stream(cid), self._on_stream)
        except BusError as exc:
            log.warning("the console cannot follow conversation %s yet: %s", cid, exc)
            return
        if cid in self._watched:  # two pages opened it at once
            await sub.unsubscribe()
        else:
            self._watched[cid] = sub

    def _own(self, tid: str) -> bool:
        """A turn this console submitted (its handle shows it; registered before sending)."""
        return tid in self.handles or (
            self.client is not None and self.client.handle(tid) is not None
        )

    async def _on_stream(self, msg: Message, env: Envelope) -> None:
        shown = event_json(msg)
        tid = str(getattr(msg, "turn_id", ""))
        if shown is None or not tid or self._own(tid):
            return
        cid = str(getattr(msg, "conversation_id", ""))
        if tid not in self._foreign:
            self._foreign.add(tid)
            self.running[cid] = tid
            self.status[tid] = "running"
            self._spawn(self._await_result(cid, tid), f"console-watch-{tid}")
        if isinstance(msg, ReActProgress) and self.status.get(tid) in ("running", "waiting"):
            self.status[tid] = "waiting" if msg.phase == "waiting" else "running"
        self.publish(cid, shown)

    async def _await_result(self, cid: str, tid: str) -> None:
        """The result of another client's turn: from ``result.<turn>``, else the results
        stream (a result published before the subscription), shown once."""
        assert self.bus is not None
        got: asyncio.Future[ReActResult] = asyncio.get_running_loop().create_future()

        async def on_result(msg: Message, env: Envelope) -> None:
            if isinstance(msg, ReActResult) and not got.done():
                got.set_result(msg)

        try:
            sub = await self.bus.subscribe(self.bus.subjects.result(tid), on_result)
            try:
                stored = None
                if self.client is not None:
                    with contextlib.suppress(BusError):  # no results stream: the live one only
                        stored = await self.client.fetch_result(tid)
                if stored is not None and not got.done():
                    got.set_result(stored)
                self._show_result(await asyncio.wait_for(got, TURN_TIMEOUT_S))
            finally:
                with contextlib.suppress(BusError):
                    await sub.unsubscribe()
        except (BusError, TimeoutError) as exc:  # the turn stays listed; its timeline has it
            log.warning("the console lost the result of turn %s of %s: %s", tid, cid, exc)
        finally:
            if self.running.get(cid) == tid:
                del self.running[cid]

    def disconnected(self) -> None:
        """A ``Bus.on_disconnect`` hook: the connection dropped (``reconnecting``)."""
        if self.connected:
            self.connected = False
            self.publish(None, self.connection_event())

    def reconnected(self) -> None:
        """A ``Bus.on_reconnect`` hook: the connection is back. A drop whose disconnect was
        not told is still announced (reconnecting, then connected)."""
        self.disconnected()
        self.connected = True
        self.publish(None, self.connection_event())

    def connection_event(self) -> dict[str, Any]:
        return {"type": "connection", "state": "connected" if self.connected else "reconnecting"}

    async def stream(self, cid: str, after: int = -1) -> AsyncIterator[tuple[int, str]]:
        """``(id, JSON)`` of the conversation's events after index ``after``, forever: first
        the connection state, then the log, then each new event as it comes."""
        yield -1, json.dumps(self.connection_event())
        index = after + 1
        while not self.closing:
            changed = self._changed
            while index < len(self.log):
                owner, event = self.log[index]
                if owner is None or owner == cid:
                    yield index, json.dumps(event, ensure_ascii=False)
                index += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=30.0)
