"""Watching the bus as it is: the raw messages of a subject, nothing decoded or answered.

``Bus.subscribe`` decodes each payload, answers requests and dead-letters what does not
decode: right for a party of the protocol, wrong for an observer (``actline tap``), which
must see every message as it was sent, change nothing, and never answer a request.
``watch`` hands each message's subject, reply subject, headers and bytes to a handler, one
at a time in arrival order; the subscription is refused with ``PermissionDenied`` when the
connection's credentials may not subscribe to ``subject``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from nats.aio.msg import Msg

from .bus import Bus, Subscription
from .errors import PermissionDenied

__all__ = ["Seen", "may_watch", "watch"]


@dataclass(frozen=True, slots=True)
class Seen:
    """One message as the server delivered it."""

    subject: str
    reply: str
    data: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


def may_watch(bus: Bus, subject: str) -> bool:
    """True when this connection's credentials let it subscribe to ``subject`` (always
    without credentials: the server then decides)."""
    identity = bus.identity
    return identity is None or identity.permissions.may_subscribe(subject)


async def watch(bus: Bus, subject: str, handler: Callable[[Seen], Awaitable[None]]) -> Subscription:
    """Hand every message on ``subject`` to ``handler``; returns once the server has the
    interest."""
    if not may_watch(bus, subject):
        label = bus.identity.label if bus.identity is not None else "this connection"
        raise PermissionDenied("subscribe to", subject, label)

    async def on_msg(raw: Msg) -> None:
        await handler(Seen(raw.subject, raw.reply or "", bytes(raw.data), dict(raw.headers or {})))

    sub = await bus.nc.subscribe(subject, cb=on_msg)
    await bus.flush()
    return Subscription(sub, subject, None)
