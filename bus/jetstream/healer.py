"""Making a bucket or stream again once it is gone for good (deleted under a running node).

``KvBucket`` and ``EventLog`` made by ``open`` each keep a ``Healer``: an operation that
finds its stream missing starts a watch in the background (no caller waits on it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import nats.errors
import nats.js.errors
from nats.js.client import JetStreamContext

from ..errors import BusError

log = logging.getLogger(__name__)

HEAL_CHECK_S = 1.0
"""How often a bucket or stream that seems gone is checked."""
HEAL_CONFIRM_S = 10.0
"""How long the server must say "not found" before a bucket or stream is made again (a
cluster failing over says so for seconds about ones that exist)."""
HEAL_WATCH_S = 120.0
"""How long one watch of a bucket or stream that seems gone lasts."""


async def exists(js: JetStreamContext, stream: str) -> bool | None:
    """Whether ``stream`` exists: True, False (the server says it does not), None (no
    answer)."""
    try:
        await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return False
    except nats.errors.Error:
        return None
    return True


class Healer:
    """Makes a bucket or stream again once it is gone for good, in the background.

    ``suspect`` (an operation found it missing) starts one watch: it asks every
    ``HEAL_CHECK_S`` whether it exists and makes it again, with a warning, only once the
    server has said "not found" for ``HEAL_CONFIRM_S`` (a cluster failing over says so for
    seconds about streams that exist). No caller waits on it: their errors stand until it
    is back. A watch that gets no answer gives up after ``HEAL_WATCH_S``."""

    def __init__(
        self,
        what: str,
        there: Callable[[], Awaitable[bool | None]],
        remake: Callable[[], Awaitable[None]],
    ) -> None:
        self.what = what
        self._there = there
        self._remake = remake
        self.healed = 0
        self.on_healed: list[Callable[[], None]] = []
        self._watch: asyncio.Task[None] | None = None

    def suspect(self) -> None:
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._watching(), name=f"heal:{self.what}")

    async def _watching(self) -> None:
        started = time.monotonic()
        missing_since: float | None = None
        while time.monotonic() - started < HEAL_WATCH_S:
            there = await self._there()
            if there:
                return
            now = time.monotonic()
            if there is None:
                missing_since = None
            elif missing_since is None:
                missing_since = now
            elif now - missing_since >= HEAL_CONFIRM_S:
                log.warning(
                    "%s is gone (deleted?): making it again, what it held is lost", self.what
                )
                try:
                    await self._remake()
                except (BusError, nats.errors.Error) as exc:
                    log.warning("%s could not be made again: %s", self.what, exc)
                    return
                self.healed += 1
                for callback in self.on_healed:
                    callback()
                return
            await asyncio.sleep(HEAL_CHECK_S)  # polling: the server sends no event
