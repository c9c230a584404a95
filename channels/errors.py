"""Errors of the channels package.

Hierarchy::

    ChannelError
    └── ChannelSpecError    an invalid channel declaration (name, reason)

Parsing never raises: problems in a stream become notices and result errors.
Only a wrong declaration (a programming error) raises. Errors pickle.
"""

from __future__ import annotations

from typing import Any


class ChannelError(Exception):
    """Base of the channels package's errors."""


class ChannelSpecError(ChannelError, ValueError):
    """A channel declaration that cannot be used."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"channel {name!r}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name, self.reason))
