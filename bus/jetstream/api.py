"""The JetStream API of a bus connection: its context, its errors and its account.

Every wrapper of the package reaches JetStream through ``context`` and turns what nats-py
raises into ``actline.bus.errors`` types with ``translate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from ..errors import (
    BusError,
    JetStreamError,
    JetStreamUnavailable,
    NotConnected,
    RequestTimeout,
    StreamMissing,
)


class Bus(Protocol):
    """What the JetStream wrappers need of ``actline.bus.Bus`` (a protocol:
    ``actline.bus.bus`` imports this package)."""

    @property
    def nc(self) -> Client: ...

    url: str
    js_replicas: int | None


DEFAULT_TIMEOUT = 5.0
"""Seconds a JetStream API request may take (nats-py's default)."""

_STREAM_NOT_FOUND = 10059


def translate(exc: Exception, operation: str, *, target: str, timeout: float) -> BusError:
    """The bus error for a nats-py exception raised by ``operation`` on ``target``."""
    if isinstance(exc, BusError):
        return exc
    if isinstance(exc, nats.errors.TimeoutError | TimeoutError):
        return RequestTimeout(target, timeout)
    if isinstance(
        exc,
        nats.errors.ConnectionClosedError
        | nats.errors.ConnectionDrainingError
        | nats.errors.StaleConnectionError,
    ):
        return NotConnected(f"{operation} on {target}: the connection is closed")
    if isinstance(exc, nats.js.errors.ServiceUnavailableError | nats.errors.NoRespondersError):
        return JetStreamUnavailable(operation)
    if isinstance(exc, nats.js.errors.APIError):
        if exc.err_code == _STREAM_NOT_FOUND:
            return StreamMissing(target)
        return JetStreamError(
            operation, exc.description or type(exc).__name__, int(exc.err_code or exc.code or 0)
        )
    return JetStreamError(operation, f"{type(exc).__name__}: {exc}")


def context(bus: Bus, timeout: float) -> JetStreamContext:
    """The JetStream context of ``bus``; its API requests wait up to ``timeout`` seconds."""
    return bus.nc.jetstream(timeout=timeout)


@dataclass(frozen=True, slots=True)
class JetStreamAccount:
    """What the connection's account holds in JetStream."""

    streams: int
    consumers: int
    memory: int
    storage: int


async def account(bus: Bus, *, timeout: float = 2.0) -> JetStreamAccount:
    """The JetStream account of ``bus``; ``JetStreamUnavailable`` when the server has none."""
    try:
        info = await context(bus, timeout).account_info()
    except nats.errors.Error as exc:
        raise translate(exc, "account info", target=bus.url, timeout=timeout) from None
    return JetStreamAccount(
        int(info.streams), int(info.consumers), int(info.memory), int(info.storage)
    )
