"""The console's live events: the turns of the conversations it shows, as JSON events.

``Hub`` follows each ``TurnHandle`` the console submits (``actline.runtime.follow``) and,
once a page opens a conversation (``Hub.watch``), the turns other clients submit in it (a
Ray job, ``actline ask``), through the handles ``Client.watch`` gives them: their events and
results come as the console's own turns' do. Every event, converted by ``event_json``, goes
to one ordered log. A server-sent-events stream (``Hub.stream``) replays a conversation's
events from the log and then waits for new ones; each event's SSE id is its index in the
log, so a browser that reconnects with ``Last-Event-ID`` resumes where it was.
``connection`` events (for every conversation) say when the console's NATS connection drops
(``reconnecting``) and comes back (``connected``), told by the bus's hooks
(``Bus.on_disconnect`` calls ``disconnected``, ``Bus.on_reconnect`` ``reconnected``).

After a NATS restart the client resubscribes and recovers the results of pending turns from
the results stream (``actline.actors.client.client``); deltas published while it was away are lost
to the page, the result is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from actline.actors.client.client import Client, TurnHandle
from actline.bus import BusError
from actline.llm.pricing import price
from actline.messages import ReActProgress, ReActResult, StreamDelta, TurnAccepted

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
    """One wire message as the page's event (None for anything else). A ``result`` also
    has ``prompt_tokens``, ``cache_read_pct`` and ``cost`` (the result's, or its usage
    priced, with ``saved_usd``: what caching saved)."""
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
        cost = event.cost or price(usage)
        out["cost"] = {**cost.model_dump(mode="json"), "saved_usd": cost.saved_usd}
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
    client: Client | None = None
    """The console's client: with it, ``watch`` follows the turns of other clients."""
    connected: bool = True
    closing: bool = False
    """Set by ``shutdown``: every event stream ends (the server is stopping)."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _watched: set[str] = field(default_factory=set)
    """The conversations whose turns from other clients are followed (``watch``)."""

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
        """Follow a turn: one this console submitted, or another client's (``watch``)."""
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
                    self.status[tid] = event.status
                    shown["sources"] = self.sources(cid, list(event.sources_used))
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

    # -- the turns of other clients ----------------------------------------------------------
    async def watch(self, cid: str) -> None:
        """Follow the turns other clients submit in ``cid`` from now on, as this console's
        own (``Client.watch`` gives each a handle; ``add`` follows it). A subscription that
        fails (NATS away) is logged and tried again when a page next opens ``cid``."""
        if self.client is None or cid in self._watched:
            return
        self._watched.add(cid)  # before the await: two pages opening it at once watch once
        try:
            await self.client.watch(cid, self.add)
        except BusError as exc:
            self._watched.discard(cid)
            log.warning("the console cannot follow conversation %s yet: %s", cid, exc)

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
