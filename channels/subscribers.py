"""Per-channel side-effect handlers that receive the same deltas as the primary emit."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .spec import ChannelDelta

log = logging.getLogger(__name__)

Subscriber = Callable[[ChannelDelta], None]


class ChannelSubscribers:
    """Handlers by channel name; ``"*"`` receives every channel.

    A handler that raises is logged and isolated: the other handlers and the
    stream go on, and the failure is reported in that channel's result errors.
    """

    def __init__(self) -> None:
        self._by_channel: dict[str, list[Subscriber]] = {}

    def subscribe(self, channel: str, handler: Subscriber) -> ChannelSubscribers:
        """Add a handler for ``channel`` (chainable)."""
        self._by_channel.setdefault(channel, []).append(handler)
        return self

    def handlers(self, channel: str) -> list[Subscriber]:
        """Handlers for ``channel``, wildcard handlers last."""
        return self._by_channel.get(channel, []) + self._by_channel.get("*", [])

    def __bool__(self) -> bool:
        return bool(self._by_channel)

    def dispatch(self, delta: ChannelDelta) -> list[str]:
        """Call every handler of the delta's channel; return the failures as messages."""
        failures: list[str] = []
        for handler in self.handlers(delta.channel):
            try:
                handler(delta)
            except Exception as exc:  # isolation is the point: any failure is contained
                name = getattr(handler, "__qualname__", repr(handler))
                log.warning("channel subscriber %s failed on %s: %s", name, delta.channel, exc)
                failures.append(f"subscriber {name} failed: {type(exc).__name__}: {exc}")
        return failures
