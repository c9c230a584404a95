"""NATS for actline: the typed ``Bus`` and the ``EmbeddedNats`` server."""

from .bus import DEFAULT_URL, Bus, Envelope, Handler, Subscription
from .embedded import EmbeddedNats, find_nats_server
from .errors import (
    BusError,
    ConnectFailed,
    NatsServerError,
    NatsServerNotFound,
    NoResponders,
    NotConnected,
    RemoteError,
    RequestTimeout,
)

__all__ = [
    "DEFAULT_URL",
    "Bus",
    "BusError",
    "ConnectFailed",
    "EmbeddedNats",
    "Envelope",
    "Handler",
    "NatsServerError",
    "NatsServerNotFound",
    "NoResponders",
    "NotConnected",
    "RemoteError",
    "RequestTimeout",
    "Subscription",
    "find_nats_server",
]
