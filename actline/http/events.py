"""The events of the turns the HTTP API submitted, kept for their server-sent-events streams.

Each turn the API submits gets a ``TurnLog``: a task follows its ``TurnHandle``
(``actline.runtime.follow``) and appends every event as ``(name, payload)``: the name is
``EVENT_NAMES``'s for the message's ``kind`` (``delta``, ``progress``, ``accepted``,
``result``; any other kind under its own name) and the payload the message's
``model_dump`` (what ``al.stream`` carries). The result is the last event. An event's
index in the log is its SSE id, so a client that reconnects with ``Last-Event-ID``
resumes after it.

``TurnLogs`` keeps the logs of one tenant: every running turn, and the latest
``KEEP_FINISHED`` finished ones (older ones are answered from the results stream).
Cancellation: ``close`` cancels the following tasks; streams waiting in ``TurnLog.after``
end once ``closing`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from actline.actors.client.client import TurnHandle
from actline.messages import ReActProgress, ReActResult

from ..runtime import follow

__all__ = ["EVENT_NAMES", "TurnLog", "TurnLogs", "event_of"]

log = logging.getLogger(__name__)

EVENT_NAMES = {
    "stream.delta": "delta",
    "react.progress": "progress",
    "turn.accepted": "accepted",
    "turn.result": "result",
}
FOLLOW_S = 24 * 3600.0
"""How long the API follows one turn (a turn waiting for outside agents may wait hours)."""
KEEP_FINISHED = 500
"""Finished turns whose events a tenant keeps for late or resumed streams."""


def event_of(message: Any) -> tuple[str, dict[str, Any]]:
    """A wire message as one SSE event: ``(name, payload)``."""
    kind = str(getattr(message, "kind", "event"))
    return EVENT_NAMES.get(kind, kind), message.model_dump(mode="json")


@dataclass
class TurnLog:
    """The events of one turn so far; ``result`` once it finished."""

    handle: TurnHandle
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    result: ReActResult | None = None
    status: str = "running"
    """``running``, ``waiting`` (for outside agents or an approval) or the result's status."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def conversation_id(self) -> str:
        return self.handle.conversation_id

    @property
    def finished(self) -> bool:
        """True once the result came (or following the turn failed: a ``lost`` event)."""
        return self.result is not None or self.status == "lost"

    def add(self, message: Any) -> None:
        self.events.append(event_of(message))
        if isinstance(message, ReActProgress):
            self.status = "waiting" if message.phase == "waiting" else "running"
        if isinstance(message, ReActResult):
            self.result = message
            self.status = message.status
        self.wake()

    def wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def after(
        self, index: int, closing: asyncio.Event
    ) -> AsyncIterator[tuple[int, str, dict[str, Any]]]:
        """``(index, name, payload)`` of the events after ``index``, waiting for new ones
        until the result was given (or ``closing`` is set)."""
        at = index + 1
        while True:
            changed = self._changed
            while at < len(self.events):
                name, payload = self.events[at]
                yield at, name, payload
                if name in ("result", "lost"):
                    return
                at += 1
            if self.finished or closing.is_set():
                return
            waiting = asyncio.ensure_future(changed.wait())
            stopping = asyncio.ensure_future(closing.wait())
            try:
                await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
                stopping.cancel()


@dataclass
class TurnLogs:
    """The logs of one tenant's turns (module docstring)."""

    logs: OrderedDict[str, TurnLog] = field(default_factory=OrderedDict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def get(self, turn_id: str) -> TurnLog | None:
        return self.logs.get(turn_id)

    def add(self, handle: TurnHandle) -> TurnLog:
        """Follow ``handle`` from now on."""
        turn = TurnLog(handle)
        self.logs[handle.turn_id] = turn
        task = asyncio.create_task(self._follow(turn), name=f"http-{handle.turn_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return turn

    async def _follow(self, turn: TurnLog) -> None:
        tid = turn.handle.turn_id
        try:
            async for message in follow(turn.handle, timeout=FOLLOW_S):
                turn.add(message)
        except Exception as exc:  # the stream tells its reader rather than hanging
            log.warning("following turn %s failed: %s", tid, exc)
            turn.events.append(("lost", {"turn_id": tid, "error": str(exc)}))
            turn.status = "lost"
            turn.wake()
        finally:
            self._forget_old()

    def _forget_old(self) -> None:
        finished = [tid for tid, t in self.logs.items() if t.finished]
        for tid in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self.logs[tid]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
