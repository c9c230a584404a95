"""Conditions of the NATS cluster that make JetStream fail for a while, logged once each.

A loop that talks to JetStream (a node's beat, the turn queue's pulls, the durable copy,
the healer) fails every try while a stream elects a leader or the cluster has lost its
quorum. ``Conditions`` (one per connection, ``Connection.conditions``) turns those failures
into one line when a condition starts, with its cause, and one when it ends:

    JetStream has no quorum: the meta group has no leader (...); ... waits, nothing is lost
    JetStream has quorum again: back after 20.3 s (412 failed tries meanwhile)

``failed(where, exc)`` counts a failure (False: not an outage, the caller logs it itself);
``succeeded(where)`` says that ``where`` went through again: the condition it failed in ends
once ``SETTLE_S`` pass without a failure (streams elect their leaders one by one when the
servers come back: a few more failures belong to the same outage). While JetStream does not
answer, the server is asked every ``CHECK_S`` whether the cluster has quorum
(``no_quorum``); the answer is what the servers show:

- the cluster's servers this connection knows (its URLs and those the servers announce):
  fewer than a majority accepting a TCP connection is no quorum at once (a killed server
  refuses connections; a frozen one still accepts, and is never counted away);
- ``$JS.API.INFO`` answers err_code 10008 ("JetStream system temporarily unavailable")
  once the JetStream meta group has had no leader for a while (a server that was its leader
  steps down when it no longer hears from a majority: 10-20 s here; a follower says so
  after ~9 s);
- ``$JS.API.STREAM.INFO.<stream>`` names the replicas the stream's leader (or the meta
  leader, for a stream without one) hears from: ``current`` turns false for a replica
  not heard from for 10 s. Fewer than a majority current is no quorum.

A timeout or no responders says nothing (a leader being elected looks the same for a few
seconds), and neither does a cluster of one server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import nats.errors
from nats.aio.client import Client

from .auth import Identity
from .errors import (
    JetStreamError,
    JetStreamUnavailable,
    NoQuorum,
    NoResponders,
    NoStream,
    NotConnected,
    RequestTimeout,
    StreamMissing,
)
from .jetstream.streams import in_cluster

log = logging.getLogger(__name__)

CHECK_S = 1.0
"""How often the server is asked whether JetStream has quorum while it does not answer."""
SETTLE_S = 3.0
"""How long a condition goes without a failure, after a success, before it is over."""
API = "$JS.API"

_META_LEADERLESS = 10008
"""``$JS.API.INFO``'s err_code while the JetStream meta group has no leader."""
_UNAVAILABLE_CODES = frozenset({10008, 10005, 10009, 10023, 10158})
"""JetStream API errors of a cluster short of servers or leaders (temporarily unavailable,
no suitable peers, not the leader, insufficient resources, a message id still being
stored)."""


class Connected(Protocol):
    """What the probe needs of a bus connection."""

    @property
    def nc(self) -> Client: ...

    url: str
    js_replicas: int | None
    identity: Identity | None


def _may(bus: Connected, subject: str) -> bool:
    return bus.identity is None or bus.identity.permissions.may_publish(subject)


async def _ask(bus: Connected, subject: str, timeout: float) -> dict[str, Any] | None:
    """The JSON answer of a JetStream API request; None when none came or it is no JSON."""
    try:
        answer = await bus.nc.request(subject, b"", timeout=timeout)
        data = json.loads(answer.data)
    except (nats.errors.Error, TimeoutError, ValueError):
        return None
    return data if isinstance(data, dict) else None


async def _meta(bus: Connected, timeout: float) -> str | None:
    subject = f"{API}.INFO"
    if not _may(bus, subject):
        return None
    data = await _ask(bus, subject, timeout)
    error = (data or {}).get("error") or {}
    if isinstance(error, dict) and error.get("err_code") == _META_LEADERLESS:
        return (
            "the JetStream meta group has no leader (the server answers err_code 10008, "
            f"{error.get('description') or 'JetStream system temporarily unavailable'!r})"
        )
    return None


async def _reachable(host: str, port: int, timeout: float) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _servers(bus: Connected, timeout: float) -> str | None:
    """The servers of the cluster this connection knows (its URLs and those the servers
    announced) that accept a TCP connection: fewer than a majority of three or more is no
    quorum, whatever JetStream has noticed yet (a server that lost its peers says so only
    after 8-18 s; a killed one refuses connections at once). A stalled server still
    accepts: it never counts as away here."""
    known = {(uri.hostname, uri.port or 4222) for uri in bus.nc.servers if uri.hostname is not None}
    if len(known) < 3:
        return None
    up = await asyncio.gather(*(_reachable(h, p, timeout) for h, p in sorted(known)))
    count = sum(up)
    if count > len(known) // 2:
        return None
    return f"only {count} of the {len(known)} NATS servers of the cluster accept connections"


async def _stream(bus: Connected, stream: str, timeout: float) -> str | None:
    subject = f"{API}.STREAM.INFO.{stream}"
    if not _may(bus, subject):
        return None
    data = await _ask(bus, subject, timeout)
    cluster = (data or {}).get("cluster")
    if not isinstance(cluster, dict) or "error" in (data or {}):
        return None
    leader = str(cluster.get("leader") or "")
    replicas = [r for r in cluster.get("replicas") or [] if isinstance(r, dict)]
    peers = len(replicas) + (1 if leader else 0)
    if peers < 2:
        return None  # one replica: it has quorum whenever it answers
    current = (1 if leader else 0) + sum(1 for r in replicas if r.get("current"))
    if current > peers // 2:
        return None
    return f"stream {stream} hears from {current} of its {peers} replicas" + (
        "" if leader else " and has no leader"
    )


async def no_quorum(
    bus: Connected, streams: Sequence[str] = (), *, timeout: float = 1.0
) -> str | None:
    """Why JetStream has no quorum, as the server says it now; None when it has one, or
    the server does not say (no answer in time, a server outside a cluster). ``streams``
    are asked about too (those this connection may ask about)."""
    if not in_cluster(bus):
        return None
    checks = [
        _servers(bus, timeout),
        _meta(bus, timeout),
        *(_stream(bus, name, timeout) for name in streams),
    ]
    for why in await asyncio.gather(*checks):
        if why:
            return why
    return None


def outage(exc: BaseException) -> bool:
    """Whether ``exc`` is JetStream not answering (rather than refusing a request): no
    answer, no leader, no quorum, no connection."""
    if isinstance(
        exc,
        RequestTimeout
        | TimeoutError
        | NotConnected
        | NoResponders
        | NoStream
        | StreamMissing
        | JetStreamUnavailable
        | NoQuorum,
    ):
        return True
    return isinstance(exc, JetStreamError) and exc.code in _UNAVAILABLE_CODES


def said(exc: BaseException) -> str:
    """What ``exc`` says, or what it is when it says nothing (a timeout)."""
    if str(exc):
        return str(exc)
    return "no answer in time" if isinstance(exc, TimeoutError) else type(exc).__name__


NO_QUORUM = "no quorum"
UNANSWERED = "unanswered"


@dataclass
class Condition:
    """One condition while it lasts."""

    kind: str
    since: float
    cause: str
    places: set[str] = field(default_factory=set)
    failures: int = 0
    failed_at: float = 0.0
    back_at: float | None = None
    """When a place that failed went through again (None: none has since the last
    failure)."""


class Conditions:
    """The outages one connection's loops see, each logged when it starts and ends."""

    def __init__(self, bus: Connected | None, *, streams: Sequence[str] = ()) -> None:
        self.bus = bus
        """The connection asked whether JetStream has quorum (None: never asked)."""
        self.streams: list[str] = list(streams)
        """Streams asked about while JetStream does not answer (``watch``)."""
        self.now: Condition | None = None
        self.ended: list[tuple[str, float]] = []
        """Conditions that ended: (kind, seconds they lasted), the last 20."""
        self._probe: asyncio.Task[None] | None = None
        self._settling: asyncio.Task[None] | None = None

    def watch(self, stream: str) -> None:
        """Ask about ``stream``'s replicas too when checking for quorum."""
        if stream not in self.streams:
            self.streams.append(stream)

    @property
    def no_quorum(self) -> bool:
        """True while the server has said JetStream has no quorum (and nothing has
        succeeded since)."""
        return self.now is not None and self.now.kind == NO_QUORUM

    def failed(self, where: str, exc: BaseException) -> bool:
        """Count a failure of ``where``; False when ``exc`` is no outage (the caller logs
        it): neither JetStream not answering nor, during an outage, a JetStream refusal.
        The first failure of an outage is logged, and the server is asked in the
        background whether JetStream has quorum."""
        now = self.now
        if not outage(exc) and not (now is not None and isinstance(exc, JetStreamError)):
            return False  # while JetStream is out, its refusals belong to the outage too
        if now is None:
            self.now = now = Condition(UNANSWERED, time.monotonic(), f"{where}: {said(exc)}")
            log.warning(
                "JetStream does not answer (%s); waiting for it (a leader being elected, "
                "or NATS servers away)",
                now.cause,
            )
        now.places.add(where)
        now.failures += 1
        now.failed_at = time.monotonic()
        now.back_at = None
        asking = self._probe is not None and not self._probe.done()
        if now.kind != NO_QUORUM and self.bus is not None and not asking:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to ask
                self._probe = asyncio.get_running_loop().create_task(
                    self._asking(), name="conditions:quorum"
                )
        return True

    def succeeded(self, where: str) -> None:
        """``where`` went through: the condition it failed in ends (logged) unless
        something fails again within ``SETTLE_S``."""
        now = self.now
        if now is None or where not in now.places or now.back_at is not None:
            return
        now.back_at = time.monotonic()
        if self._settling is not None and not self._settling.done():
            return
        try:
            self._settling = asyncio.get_running_loop().create_task(
                self._settle(now), name="conditions:settle"
            )
        except RuntimeError:  # no running loop: nothing can fail again meanwhile
            self._end(now)

    async def _settle(self, now: Condition) -> None:
        """End ``now`` once ``SETTLE_S`` passed without a failure since a success."""
        while self.now is now and now.back_at is not None:
            back = now.back_at
            await asyncio.sleep(max(0.0, back + SETTLE_S - time.monotonic()))
            if self.now is now and now.back_at == back:
                self._end(now)
                return

    def _end(self, now: Condition) -> None:
        self.now = None
        lasted = (now.back_at or time.monotonic()) - now.since
        self.ended = [*self.ended[-19:], (now.kind, lasted)]
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None
        if now.kind == NO_QUORUM:
            log.warning(
                "JetStream has quorum again: back after %.1f s (%d failed tries meanwhile)",
                lasted,
                now.failures,
            )
        else:
            log.info(
                "JetStream answers again: back after %.1f s (%d failed tries meanwhile)",
                lasted,
                now.failures,
            )

    async def _asking(self) -> None:
        """Ask every ``CHECK_S`` while JetStream does not answer; log the condition once
        the server says it has no quorum."""
        bus = self.bus
        assert bus is not None
        while self.now is not None and self.now.kind != NO_QUORUM:
            why = await no_quorum(bus, self.streams, timeout=CHECK_S)
            now = self.now
            if now is None:
                return
            if why:
                now.kind, now.cause = NO_QUORUM, why
                log.warning(
                    "JetStream has no quorum: %s, so fewer than a majority of the NATS "
                    "cluster's servers answer; %s wait, nothing is lost: bring the stopped "
                    "servers back",
                    why,
                    ", ".join(sorted(now.places)),
                )
                return
            await asyncio.sleep(CHECK_S)  # polling: the server sends no event

    async def close(self) -> None:
        for task in (self._probe, self._settling):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._probe = self._settling = None
