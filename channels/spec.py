"""Channel declarations, the events a stream emits, and per-channel results."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from .errors import ChannelSpecError

Format = Literal["markdown", "text", "html", "json"]
FORMATS: tuple[str, ...] = ("markdown", "text", "html", "json")
OUTSIDE = "_outside"
"""Result key of text written outside any channel (kept, never emitted)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ChannelSpec:
    """One logical output of a model call.

    ``composite`` (JSON channels only) streams top-level string values of the
    object as per-key deltas: a mapping of key to format, where ``"*"`` stands
    for every key not listed. Citations are replaced in those key deltas when
    ``replace_citations`` is set and the key's format is not json.
    """

    name: str
    format: Format = "markdown"
    replace_citations: bool = True
    emit_marker: str | None = None
    model: Any = None
    composite: Mapping[str, Format] | None = None
    composite_marker: str = "canvas"

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name) or self.name == OUTSIDE:
            raise ChannelSpecError(self.name, "names are 1-64 letters, digits, '_' or '-'")
        if self.format not in FORMATS:
            raise ChannelSpecError(self.name, f"format must be one of {', '.join(FORMATS)}")
        if self.composite is not None:
            if self.format != "json":
                raise ChannelSpecError(self.name, "composite streaming needs format='json'")
            bad = [f for f in self.composite.values() if f not in FORMATS]
            if bad:
                raise ChannelSpecError(self.name, f"composite formats {bad} are not known")

    @property
    def marker(self) -> str:
        """The marker clients receive with this channel's deltas."""
        return self.emit_marker or self.name

    @property
    def cites(self) -> bool:
        """True when this channel's own deltas get citations replaced."""
        return self.replace_citations and self.format != "json"


class ChannelDelta(NamedTuple):
    """A safe piece of one channel (or of one composite JSON key) for clients.

    ``index`` counts deltas per channel (per key for composite deltas). Every
    declared channel ends with exactly one ``completed=True`` delta whose text
    is empty and whose index is the number of deltas before it. (A named tuple:
    hundreds of thousands are made per second.)
    """

    channel: str
    text: str
    index: int  # type: ignore[assignment]  # the field shadows tuple.index on purpose
    marker: str
    format: str
    completed: bool = False
    key: str | None = None


@dataclass(frozen=True, slots=True)
class ChannelNotice:
    """Something in the stream broke the protocol; the stream went on."""

    code: str
    message: str
    channel: str | None = None


@dataclass(slots=True)
class ChannelResult:
    """Everything one channel produced."""

    name: str
    raw: str = ""
    emitted: str = ""
    obj: Any = None
    used_sources: list[int] = field(default_factory=list)
    unresolved_sources: list[int] = field(default_factory=list)
    key_unresolved: dict[str, list[int]] = field(default_factory=dict)
    """A composite channel's keys -> the SIDs each cited that match no source."""
    errors: list[str] = field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None
    deltas: int = 0
    declared: bool = True


@dataclass(slots=True)
class StreamResult:
    """The results of one stream: per channel (and ``_outside``), plus notices."""

    channels: dict[str, ChannelResult]
    notices: list[ChannelNotice]

    def __getitem__(self, name: str) -> ChannelResult:
        return self.channels[name]

    def __contains__(self, name: object) -> bool:
        return name in self.channels

    @property
    def outside(self) -> str:
        """Text written outside any channel."""
        return self.channels[OUTSIDE].raw
