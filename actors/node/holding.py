"""Keeping a conversation's claim apart from its release, on one node.

A node claims a conversation (in cluster mode, renews or takes its lease) and loads it when
a turn or a feedback comes for it, and lets it go (releases the lease, forgets its durable
head) once it has been idle for ``idle_evict_s``. Both await NATS, so unguarded they
interleave: a claim renews the lease this node still holds, then the release of the idle
actor deletes it, and the new actor runs with nobody holding the conversation's lease.

``Holds`` keeps them apart on the event loop: a claim waits while a release of its
conversation is in progress, and a conversation with a claim in progress (or mail its actor
has not read yet) is not let go this time. ``evict_idle`` is the node's eviction pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Protocol, TypeVar

from actline.actors.errors import ConversationHeld
from actline.bus import BusError

log = logging.getLogger(__name__)


class Evictable(Protocol):
    """What the eviction pass reads of a conversation's actor."""

    @property
    def busy(self) -> bool: ...

    @property
    def last_active(self) -> float: ...

    @property
    def unread(self) -> int: ...

    async def stop(self) -> None: ...


E = TypeVar("E", bound=Evictable)


class Holds:
    """The claims in progress and the releases in progress, by conversation."""

    def __init__(self) -> None:
        self._claims: Counter[str] = Counter()
        self._releases: dict[str, asyncio.Event] = {}
        self._waiting: Counter[str] = Counter()

    @contextlib.asynccontextmanager
    async def claiming(self, cid: str) -> AsyncIterator[None]:
        """Around claiming ``cid`` and handing it its message: waits while it is being let
        go, and keeps it from being let go until the block ends."""
        while (released := self._releases.get(cid)) is not None:
            self._waiting[cid] += 1
            try:
                await released.wait()
            finally:
                self._waiting[cid] -= 1
                if not self._waiting[cid]:
                    del self._waiting[cid]
        self._claims[cid] += 1
        try:
            yield
        finally:
            self._claims[cid] -= 1
            if not self._claims[cid]:
                del self._claims[cid]

    def may_release(self, cid: str) -> bool:
        """No claim and no release of ``cid`` in progress."""
        return cid not in self._claims and cid not in self._releases

    def waiting(self, cid: str) -> int:
        """Claims of ``cid`` waiting for its release to end."""
        return self._waiting[cid]

    @contextlib.asynccontextmanager
    async def releasing(self, cid: str) -> AsyncIterator[None]:
        """Around letting ``cid`` go; claims that come meanwhile wait until the block ends.
        Check ``may_release`` first, with no await in between."""
        if not self.may_release(cid):
            raise ConversationHeld(cid)
        done = self._releases[cid] = asyncio.Event()
        try:
            yield
        finally:
            del self._releases[cid]
            done.set()


async def evict_idle(
    holds: Holds,
    conversations: MutableMapping[str, E],
    release: Callable[[str], Awaitable[None]],
    *,
    now: float,
    idle_s: float,
) -> list[str]:
    """Let go of every conversation idle for more than ``idle_s`` at ``now`` (no turn, no
    unread mail, no claim in progress): its actor stops, then ``release`` (the ownership
    seam) lets the conversation go; a release that NATS refuses is logged (the lease keeps
    naming this node, which takes it back on its next claim). Returns the conversations
    let go."""
    gone: list[str] = []
    for cid, conv in list(conversations.items()):
        if conversations.get(cid) is not conv or conv.busy or conv.unread:
            continue
        if now - conv.last_active <= idle_s or not holds.may_release(cid):
            continue
        async with holds.releasing(cid):
            del conversations[cid]
            await conv.stop()
            try:
                await release(cid)
            except BusError as exc:  # the eviction loop goes on
                log.warning("conversation %s left memory but its lease stays: %s", cid, exc)
        gone.append(cid)
    return gone
