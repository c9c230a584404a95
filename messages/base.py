"""Base model and shared value types of the wire contract.

Every message is a frozen pydantic model. Validation on the wire is strict
(no coercion of ``"5"`` into ``5``) except for timestamps, which also accept
ISO-8601 strings; every timestamp is normalised to an aware UTC datetime
(a naive one is taken as UTC). Unknown fields are ignored so that newer
senders can add optional fields without breaking older receivers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def _to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def utcnow() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


UtcDatetime = Annotated[datetime, Field(strict=False), AfterValidator(_to_utc)]
"""An aware UTC datetime; ISO strings and naive datetimes (taken as UTC) are accepted."""


class WireModel(BaseModel):
    """Base of every message and of the value types nested in messages."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")


class ContextTelemetry(WireModel):
    """The context watchdog's readings of a turn (``actline.actors.turn.watchdog``): on progress
    cards and in a ``turn.result``'s ``usage.context`` (an optional field of the wire contract)."""

    tokens: int = 0
    """The rendered context at the last round, in tokens."""
    peak_tokens: int = 0
    token_drift: int = 0
    """Tokens the context grew per round, recently."""
    over_tooling: float = 0.0
    """Share of recent rounds that only called tools without progress."""
    repeated_reads: int = 0
    """The most reads of one path in the turn."""
    context_rot: float = 0.0
    """Share of summarised, hidden, pruned and archived content among visible blocks."""
    compactions: int = 0
    watchdog_compactions: int = 0
    """Of them, asked by the watchdog (an ask that found nothing to compact is not one)."""
    signals: dict[str, int] = Field(default_factory=dict)
    """Signal -> times it crossed its threshold."""


TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
)
"""The token fields of ``Usage``: all unknown when a call ended without its usage."""


class Usage(WireModel):
    """Token usage of one model call or, summed, of a turn."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    model: str = ""
    request_id: str = ""
    context: ContextTelemetry | None = None
    """A turn's context telemetry (a turn result's usage only)."""
    unknown: list[str] = Field(default_factory=list)
    """The token fields the server did not report (their 0 means "not known", not none):
    the cache fields on an API without cache accounting, every field when a stream ended
    without usage. Summing keeps the union."""
    stop_reason: str = ""
    """Why the model stopped (one call): ``end_turn``, ``max_tokens``, ``stop_sequence``,
    ``repetition`` (the runtime stopped a reply that kept repeating itself) or what the
    server said; empty when it did not say. A sum keeps the last call's."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_5m_tokens=self.cache_write_5m_tokens + other.cache_write_5m_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
            model=self.model or other.model,
            request_id=other.request_id or self.request_id,
            context=other.context or self.context,
            unknown=sorted({*self.unknown, *other.unknown}),
            stop_reason=other.stop_reason or self.stop_reason,
        )

    @property
    def total_input_tokens(self) -> int:
        """All prompt tokens: uncached + cache read + cache writes."""
        return (
            self.input_tokens
            + self.cache_read_tokens
            + self.cache_write_5m_tokens
            + self.cache_write_1h_tokens
        )


class Cost(WireModel):
    """What a usage cost in USD, part by part (``actline.llm.pricing.price`` builds it).

    Kept as unrounded floats; displays format them. ``uncached_usd`` is what the same
    tokens would have cost with no prompt caching (every input token, read or written, at
    the input price, plus the output). ``priced_as`` names the entry of the model table
    whose prices were used; ``estimated`` is true when the model is not in the table and
    conservative prices stood in.
    """

    input_usd: float = 0.0
    """Uncached input tokens at the input price."""
    cache_write_5m_usd: float = 0.0
    """Tokens written to the 5-minute cache, at 1.25x the input price."""
    cache_write_1h_usd: float = 0.0
    """Tokens written to the 1-hour cache, at 2x the input price."""
    cache_read_usd: float = 0.0
    """Tokens read from the cache, at 0.1x the input price."""
    output_usd: float = 0.0
    total_usd: float = 0.0
    uncached_usd: float = 0.0
    priced_as: str = ""
    estimated: bool = False

    @property
    def saved_usd(self) -> float:
        """What caching saved: ``uncached_usd - total_usd`` (negative when the cache
        writes cost more than the reads saved)."""
        return self.uncached_usd - self.total_usd

    def __add__(self, other: Cost) -> Cost:
        names = [n for n in dict.fromkeys((self.priced_as, other.priced_as)) if n]
        return Cost(
            input_usd=self.input_usd + other.input_usd,
            cache_write_5m_usd=self.cache_write_5m_usd + other.cache_write_5m_usd,
            cache_write_1h_usd=self.cache_write_1h_usd + other.cache_write_1h_usd,
            cache_read_usd=self.cache_read_usd + other.cache_read_usd,
            output_usd=self.output_usd + other.output_usd,
            total_usd=self.total_usd + other.total_usd,
            uncached_usd=self.uncached_usd + other.uncached_usd,
            priced_as=",".join(names),
            estimated=self.estimated or other.estimated,
        )


class Attachment(WireModel):
    """A user attachment: inline bytes for small files, or a storage reference."""

    name: str
    mime: str = "application/octet-stream"
    data: bytes | None = None
    ref: str | None = None
    size: int | None = None


class ArtifactRef(WireModel):
    """A reference to an artifact an outside agent or tool produced."""

    path: str
    mime: str = "text/plain"
    text: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
