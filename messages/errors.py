"""Errors of the wire contract.

Hierarchy::

    MessageError
    ├── DecodeError            bytes that are not a valid message (reason, size)
    ├── EncodeError            a message that cannot be put on the wire (reason)
    │   └── PayloadTooLarge    encoded size over the limit (size, limit)
    ├── SubjectError           a token or prefix that cannot go into a subject (what, value)
    └── LogConfigError         a log level or format that does not exist (key, value, allowed)

Every error keeps its fields and pickles (they cross Ray process boundaries).
"""

from __future__ import annotations

from typing import Any


class MessageError(Exception):
    """Base of every error raised by the messages package."""


class DecodeError(MessageError):
    """Raised by ``messages.decode`` for anything that is not a valid message."""

    def __init__(self, reason: str, size: int | None = None) -> None:
        self.reason = reason
        self.size = size
        super().__init__(reason if size is None else f"{reason} ({size} bytes)")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.size))


class EncodeError(MessageError):
    """Raised by ``messages.encode`` when a message cannot be serialised."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))


class PayloadTooLarge(EncodeError):
    """The encoded message is larger than the bus accepts; send a storage reference instead."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"encoded message is {size} bytes, over the {limit} byte limit; "
            "store the payload and send a reference to it"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.size, self.limit))


class SubjectError(MessageError, ValueError):
    """A token or prefix that cannot be used in a NATS subject."""

    def __init__(
        self, what: str, value: str, hint: str = "use letters, digits, '_', '-' or ':'"
    ) -> None:
        self.what = what
        self.value = value
        self.hint = hint
        super().__init__(f"{what} {value!r} cannot go into a subject: {hint}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, self.value, self.hint))


class LogConfigError(MessageError):
    """A log level or format that does not exist (``key`` names the setting)."""

    def __init__(self, key: str, value: str, allowed: tuple[str, ...]) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(f"{key}={value!r}: use one of {', '.join(allowed)}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.key, self.value, self.allowed))
