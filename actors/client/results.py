"""Durable turn results: every ``turn.result`` is kept in a JetStream stream.

A node publishes each result to the results stream (``AL_RESULTS``, capturing
``al.result.>``) and waits until the stream has stored it before the turn's queue
message is acked, so a result outlives the connection of the client that asked for
it: a client that was disconnected when the result went out reads it back later with
one direct get (the last message on ``al.result.<tid>``). Subscribers of
``al.result.<tid>`` still receive the message as it is published: a stream capturing
a subject takes nothing away from core subscribers.

Retention: LIMITS, one message per turn (a repeat replaces the older one and, within
the duplicate window, is not stored again: the message id is the turn id), kept
``result_retention_s`` (``ACTLINE_RESULT_RETENTION``, 7 days) and, when
``result_max_bytes`` is set, at most that many bytes in all (the oldest go first).

Failure semantics of ``publish_result``: a store made while the connection is away waits
in the NATS client's buffer, goes out when the connection is back and is confirmed then
(for up to ``OUTAGE_WAIT_S``): it is not sent again, since every core subscriber would
receive each copy. One sent to a server that stopped answering (the connection left it,
``Connection.reconnect_if_stalled``) gets no answer ever: it is stored again through the
new server (the message id keeps one copy in the stream). One left unconfirmed while the
stream has no leader (its server died or froze, and an election can take the servers'
whole election timeout, several seconds) is stored again once the stream answers, within
``OUTAGE_WAIT_S``. A missing stream is recreated (a warning) and the result stored; a result
that still cannot be stored goes out on core NATS alone (an error is logged) rather than
not at all. Cancellation: each call is one
or a few requests; ``CancelledError`` propagates.
"""

from __future__ import annotations

import asyncio
import logging
import math

from actline import messages
from actline.actors.configuration.settings import NodeSettings
from actline.actors.errors import SettingsError
from actline.bus import (
    Bus,
    BusError,
    EventLog,
    NoStream,
    NotConnected,
    RequestTimeout,
    StreamMissing,
)
from actline.bus.conditions import outage
from actline.messages import DecodeError, ReActResult

__all__ = ["ResultLog", "open_results", "publish_result"]

log = logging.getLogger(__name__)

STORE_TIMEOUT_S = 2.0
"""How long a node waits for the results stream to confirm a result."""
OUTAGE_WAIT_S = 60.0
"""How long a node waits for a lost connection, or for a results stream without a leader,
to come back while a result's store is unconfirmed."""
READ_TIMEOUT_S = 2.0
"""How long a client waits for one read of the results stream."""


class ResultLog:
    """The results stream of one deployment: read a turn's stored result, store one."""

    def __init__(self, bus: Bus, stream: EventLog) -> None:
        self.bus = bus
        self._stream = stream

    @property
    def name(self) -> str:
        return self._stream.name

    @classmethod
    def bind(cls, bus: Bus, *, timeout: float = READ_TIMEOUT_S) -> ResultLog:
        """A reader that never creates the stream (clients): reads raise ``StreamMissing``
        while no node has created it, ``RequestTimeout`` after ``timeout`` seconds."""
        return cls(bus, EventLog.bind(bus, name=bus.subjects.results_stream, timeout=timeout))

    async def get(self, turn_id: str) -> ReActResult | None:
        """The stored result of ``turn_id``; None when the turn is unknown, has no result
        yet, or its result expired. Raises ``StreamMissing`` when there is no results
        stream, or another ``BusError``."""
        found = await self._stream.last(self.bus.subjects.result(turn_id))
        if found is None:
            return None
        seq, data = found
        try:
            msg = messages.decode(data)
        except DecodeError as exc:
            log.warning("stored result of turn %s (seq %d) does not decode: %s", turn_id, seq, exc)
            return None
        if not isinstance(msg, ReActResult) or msg.turn_id != turn_id:
            log.warning("seq %d of %s is not the result of turn %s", seq, self.name, turn_id)
            return None
        return msg

    async def store(self, result: ReActResult) -> int:
        """Publish ``result`` and wait until the stream has stored it; returns its sequence.

        Core subscribers of ``al.result.<tid>`` receive it too. Raises ``NoStream`` when
        no stream captures the subject, or another ``BusError``.
        """
        return await _store(self.bus, result)


async def open_results(bus: Bus, settings: NodeSettings) -> ResultLog:
    """Create the results stream unless it exists (a node at start); an existing stream
    keeps its retention and caps. Raises ``SettingsError`` for a retention or cap that cannot
    work."""
    retention = settings.result_retention_s
    if not (math.isfinite(retention) and retention > 0):
        raise SettingsError(
            "ACTLINE_RESULT_RETENTION",
            str(retention),
            f"ACTLINE_RESULT_RETENTION={retention} must be a positive number of seconds",
        )
    if settings.result_max_bytes < 0:
        raise SettingsError(
            "ACTLINE_RESULT_MAX_BYTES",
            str(settings.result_max_bytes),
            "ACTLINE_RESULT_MAX_BYTES must be 0 (no cap) or a positive number of bytes",
        )
    stream = await EventLog.open(
        bus,
        name=bus.subjects.results_stream,
        subjects=bus.subjects.results_all,
        max_msg_size=messages.MAX_PAYLOAD,
        max_age_s=retention,
        max_bytes=settings.result_max_bytes or None,
        max_msgs_per_subject=1,
    )
    return ResultLog(bus, stream)


async def publish_result(bus: Bus, result: ReActResult, settings: NodeSettings) -> None:
    """Store ``result`` in the results stream (subscribers receive it as it is stored).

    Returns once it is stored or, when it cannot be, once it went out on core NATS. While
    the connection is away it waits for it (up to ``OUTAGE_WAIT_S``) rather than sending a
    second copy. A store left unconfirmed while connected (the stream's leader gone, one
    being elected) is tried again through the same outage, up to ``OUTAGE_WAIT_S`` in all:
    first the stream is asked whether it answers (a stream info, no copy sent), and the
    result is stored again only once it does (the message id makes a second store of a
    stored result a no-op). A missing stream is recreated. Never raises a ``BusError``.
    """
    subject = bus.subjects.result(result.turn_id)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + OUTAGE_WAIT_S
    where = "the result store"
    failure: Exception
    try:
        await _store(bus, result)
        return
    except (NoStream, RequestTimeout) as exc:
        failure = exc
    except BusError as exc:
        failure = exc
        give_up = loop.time()
    while loop.time() < give_up:
        bus.conditions.failed(where, failure)
        try:
            await _recreate_if_missing(bus, settings)
            await _store(bus, result)
            bus.conditions.succeeded(where)
            return
        except (BusError, SettingsError) as exc:
            failure = exc
            if not outage(exc):
                break
        await asyncio.sleep(min(STORE_TIMEOUT_S, max(0.0, give_up - loop.time())))
    log.error(
        "the result of turn %s was not stored (%s); publishing it without storing",
        result.turn_id,
        failure,
    )
    try:
        await bus.publish(subject, result)
    except BusError as exc:
        log.error("the result of turn %s was not published: %s", result.turn_id, exc)


async def _store(bus: Bus, result: ReActResult) -> int:
    """Store ``result`` and return its sequence, waiting out a lost connection.

    The publish of a store made (or unconfirmed) while the connection is away waits in
    the NATS client's buffer and is sent when the connection is back; its confirmation
    is awaited then rather than another copy published. ``RequestTimeout`` when no
    confirmation came within ``STORE_TIMEOUT_S`` of connected time, or the connection
    stayed away longer than ``OUTAGE_WAIT_S``; ``NotConnected`` once it is closed.
    """
    subject = bus.subjects.result(result.turn_id)
    store = asyncio.ensure_future(
        bus.publish_stored(
            subject, result, timeout=STORE_TIMEOUT_S * 2 + OUTAGE_WAIT_S, msg_id=result.turn_id
        )
    )
    give_up = asyncio.get_running_loop().time() + OUTAGE_WAIT_S
    try:
        while True:
            reconnects = bus.counters["reconnects"]
            stalled = bus.counters["stalled"]
            connected = bus.is_connected
            done, _ = await asyncio.wait({store}, timeout=STORE_TIMEOUT_S)
            if done:
                return store.result()
            if bus.nc.is_closed:
                raise NotConnected(f"closed before the result of turn {result.turn_id} was stored")
            if bus.counters["stalled"] != stalled:  # sent to a server that stopped answering:
                raise RequestTimeout(subject, STORE_TIMEOUT_S)  # no answer ever comes
            if connected and bus.is_connected and bus.counters["reconnects"] == reconnects:
                raise RequestTimeout(subject, STORE_TIMEOUT_S)
            if asyncio.get_running_loop().time() >= give_up:
                raise RequestTimeout(subject, OUTAGE_WAIT_S)
            if connected:  # the first window of this outage
                log.info("the store of turn %s waits for the connection", result.turn_id)
    finally:
        if not store.done():
            store.cancel()
        await asyncio.gather(store, return_exceptions=True)


async def _recreate_if_missing(bus: Bus, settings: NodeSettings) -> None:
    name = bus.subjects.results_stream
    try:
        await EventLog.bind(bus, name=name).count()
        return
    except StreamMissing:
        pass
    log.warning("the results stream %s is missing; creating it again", name)
    await open_results(bus, settings)
