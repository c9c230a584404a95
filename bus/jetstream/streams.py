"""Making streams on one server or a cluster: replica counts, retries, settling.

Every stream and bucket is made with ``replicas`` (None: ``replicas_for(bus,
bus.js_replicas)``, which follows the cluster: 1 on one server, 3 on three or more, or
``ACTLINE_JS_REPLICAS``); an existing one with fewer is raised to it (logged). A replicated
one just made or raised is waited for until it has a leader and current followers, and one
found until it has a leader (another node may have made it a moment ago). A setup request
a replicated cluster does not answer (it may be electing a leader) is tried again for up to
``SETUP_S``, and so is one that races another node making the same stream. An existing
stream gains the subjects it lacks.

Several nodes started at once make the same streams together: each makes or finds them, and
the first operations on each (``FirstAnswer``) are tried again while the cluster cannot
answer them yet, within ``SETUP_S`` of the open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.js.api import StreamConfig
from nats.js.client import JetStreamContext

from ..errors import (
    BusError,
    JetStreamError,
    JetStreamUnavailable,
    NoStream,
    ReplicasUnavailable,
    RequestTimeout,
    StreamMissing,
)
from .api import Bus, translate

log = logging.getLogger(__name__)
T = TypeVar("T")

SETUP_S = 30.0
"""On a replicated cluster, how long making or binding a stream, bucket or consumer is
tried again when a request gets no answer (a cluster just started or under load may still
be electing its meta leader or the stream's leader)."""

MAX_REPLICAS = 5
"""The most replicas JetStream keeps of a stream."""


def cluster_size(bus: Bus) -> int:
    """How many servers the NATS cluster of ``bus`` has: 1 when its server is not in a
    cluster, else the larger of the servers the cluster announces now (INFO
    ``connect_urls``, the servers up) and the URLs ``bus`` was given (so a member that is
    down still counts when every member's URL was given)."""
    info: dict[str, object] = getattr(bus.nc, "_server_info", None) or {}
    if not info.get("cluster"):
        return 1
    announced = info.get("connect_urls")
    up = len(set(announced)) if isinstance(announced, list) else 1
    given = len({part.strip() for part in bus.url.split(",") if part.strip()})
    return max(up, given, 1)


def in_cluster(bus: Bus) -> bool:
    """Whether the server ``bus`` is connected to is a member of a NATS cluster (however
    many of its members are up now)."""
    info: dict[str, object] = getattr(bus.nc, "_server_info", None) or {}
    return bool(info.get("cluster"))


def replicas_for(bus: Bus, wanted: int | None) -> int:
    """The replica count of what ``bus`` creates: ``wanted`` (``ACTLINE_JS_REPLICAS``) when
    the cluster has that many servers (``ReplicasUnavailable`` naming both when not); None
    follows the cluster: 1 on one or two servers, 3 on three or more."""
    servers = cluster_size(bus)
    if wanted is None:
        return 3 if servers >= 3 else 1
    if isinstance(wanted, bool) or not 1 <= wanted <= MAX_REPLICAS or wanted > servers:
        raise ReplicasUnavailable(wanted, servers)
    return wanted


async def set_up(step: Callable[[], Awaitable[T]], what: str, replicas: int) -> T:
    """``step()``, tried again for up to ``SETUP_S`` while a replicated cluster does not
    answer or has not caught up with a stream another node made a moment ago (each retry
    logged); on one replica (one server) a timeout is raised at once. Each step is
    idempotent: it finds what an earlier try (or another node) made."""
    deadline = time.monotonic() + (SETUP_S if replicas > 1 else 0.0)
    pause = 0.25
    while True:
        try:
            return await step()
        except (
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.js.errors.APIError,
        ) as exc:
            if not _unavailable(exc) or time.monotonic() + pause >= deadline:
                raise
            log.warning(
                "%s: no answer from the JetStream cluster (%s); trying again (it may be "
                "electing a leader or missing servers)",
                what,
                getattr(exc, "description", None) or type(exc).__name__,
            )
            await asyncio.sleep(pause)  # backoff between tries of a setup request
            pause = min(pause * 2, 2.0)


_CLUSTER_UNAVAILABLE = frozenset({10005, 10008, 10009, 10014, 10023, 10058, 10059})
"""JetStream API errors of a cluster short of servers or leaders (no suitable peers,
temporarily unavailable, not the leader, insufficient resources) or behind a concurrent
creator: "stream name already in use" from a create whose stream the server then does not
find, "stream not found" or "consumer not found" from a server that has not applied a
stream or consumer just made."""


def _unavailable(exc: Exception) -> bool:
    """Whether ``exc`` says the cluster cannot answer now (rather than refusing the request)."""
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return True
    if isinstance(exc, nats.js.errors.APIError):
        return int(exc.err_code or 0) in _CLUSTER_UNAVAILABLE
    return True  # no answer, or no responders


async def ensure_replicas(js: JetStreamContext, have: StreamConfig, wanted: int) -> bool:
    """Raise an existing stream with fewer replicas than ``wanted`` to ``wanted`` (a log
    line; True); a stream with more keeps them. ``JetStreamError`` when the server refuses."""
    count = int(have.num_replicas or 1)
    if count >= wanted:
        return False
    try:
        await js.update_stream(replace(have, num_replicas=wanted))
    except nats.js.errors.APIError as exc:
        raise JetStreamError(
            f"raise the replicas of {have.name} from {count} to {wanted}",
            exc.description or type(exc).__name__,
            int(exc.err_code or exc.code or 0),
        ) from None
    log.info("stream %s now has %d replicas (it had %d)", have.name, wanted, count)
    return True


async def settled(
    js: JetStreamContext,
    name: str,
    replicas: int,
    limit: float = 20.0,
    *,
    followers: bool = True,
) -> None:
    """Wait (up to ``limit`` seconds) until a replicated stream has a leader and ``replicas
    - 1`` current followers: a stream just made or scaled up answers no publish until it has
    (its leader is elected in a moment; a work queue scaled up with its consumer took ~10 s
    here). ``followers`` False waits for the leader only: a stream found may have been made
    by another node a moment ago (its first write failed with "stream not found" when not
    waited for), or have a server down for good, which a leader does not need. A stream of
    one replica is led at once; one led long ago costs one stream info."""
    if replicas <= 1:
        return
    wanted = replicas - 1 if followers else 0
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(nats.errors.Error):
            info = await js.stream_info(name)
            cluster = info.cluster
            peers = [p for p in (cluster.replicas or []) if p.current] if cluster else []
            if cluster is not None and cluster.leader and len(peers) >= wanted:
                return
        await asyncio.sleep(0.05)  # polling the stream's state: the server sends no event
    log.warning("stream %s has not settled on %d replicas within %gs", name, replicas, limit)


async def ensure_stream(js: JetStreamContext, config: StreamConfig, timeout: float) -> None:
    """Create the stream unless it exists (a concurrent creator wins harmlessly). An existing
    stream keeps its limits but gains the subjects of ``config`` it lacks (made by an older
    version that captured fewer) and the replicas it lacks."""
    name = str(config.name)
    replicas = int(config.num_replicas or 1)

    async def step() -> None:
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            pass
        else:
            await _add_subjects(js, info.config, list(config.subjects or []))
            raised = await ensure_replicas(js, info.config, replicas)
            await settled(js, name, replicas, followers=raised)
            return
        try:
            await js.add_stream(config)
            log.info("created stream %s on %s", name, config.subjects)
        except nats.js.errors.APIError as exc:
            try:  # created meanwhile by another node, maybe with other limits
                await js.stream_info(name)
            except nats.js.errors.NotFoundError:
                raise exc from None
        await settled(js, name, replicas)

    try:
        await set_up(step, f"create stream {name}", replicas)
    except nats.errors.Error as exc:
        raise translate(exc, "create stream", target=name, timeout=timeout) from None


async def _add_subjects(js: JetStreamContext, have: StreamConfig, wanted: list[str]) -> None:
    missing = [x for x in wanted if x not in (have.subjects or [])]
    if not missing:
        return
    await js.update_stream(replace(have, subjects=[*(have.subjects or []), *missing]))
    have.subjects = [*(have.subjects or []), *missing]
    log.info("stream %s now also captures %s", have.name, ", ".join(missing))


class FirstAnswer:
    """The first operations on a stream or bucket just opened on a replicated cluster: until
    one gets an answer, within ``SETUP_S`` of the open, one that finds the stream missing,
    JetStream unavailable or no answer at all (a stream just made, by this node or another,
    whose leader is being elected) is tried again, each retry logged. Once the stream has
    answered, or on one replica, every error is raised at once.

    A check-and-set write tried again after a timeout that went through raises
    ``KeyExists``/``WrongRevision`` as a concurrent writer's would; a plain ``put`` is
    written twice."""

    def __init__(
        self,
        what: str,
        replicas: int,
        retried: tuple[type[BusError], ...] = (StreamMissing, JetStreamUnavailable, RequestTimeout),
    ) -> None:
        self.what = what
        self.retried = retried
        self._deadline = time.monotonic() + (SETUP_S if replicas > 1 else 0.0)
        self.answered = replicas <= 1

    async def run(self, step: Callable[[], Awaitable[T]]) -> T:
        """``step()``, tried again as the class says."""
        pause = 0.25
        while True:
            try:
                result = await step()
            except self.retried as exc:
                if self.answered or time.monotonic() + pause >= self._deadline:
                    raise
                log.warning(
                    "%s: %s; trying again (just made, it may be electing its leader)",
                    self.what,
                    exc,
                )
                await asyncio.sleep(pause)  # backoff between tries of a first operation
                pause = min(pause * 2, 2.0)
                continue
            except BusError:
                self.answered = True  # a refusal (KeyExists, WrongRevision) is an answer
                raise
            self.answered = True
            return result


UNWRITTEN = (StreamMissing, NoStream, JetStreamUnavailable)
"""Errors of a write that surely stored nothing (no stream took it), tried again by
``FirstAnswer`` where a write stored twice would be wrong."""
