"""Context and model-call messages between the conversation, decision and streamer actors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import Usage, UtcDatetime, WireModel, utcnow
from .ids import Id


class GenerateRequest(WireModel):
    """Asks a StreamerActor to run one model call over a rendered context."""

    kind: Literal["llm.generate"] = "llm.generate"
    conversation_id: Id
    turn_id: Id
    round: int = 0
    model: str = ""
    system: str = ""
    blocks: list[dict[str, Any]] = Field(default_factory=list)
    cache_marks: list[int] = Field(default_factory=list)
    channels: list[str] = Field(default_factory=list)
    max_output_tokens: int = 4096
    sources: list[dict[str, Any]] = Field(default_factory=list)
    """The conversation's sources (sid, title, url): citations resolve against them."""
    seq_start: int = 0
    """The ``seq`` of this call's first ``stream.delta`` (a turn's deltas count on)."""
    quiet: bool = False
    """Run the call to the end and stream nothing to clients (a compaction summary): the
    result's ``raw`` holds the whole text."""
    ts: UtcDatetime = Field(default_factory=utcnow)


class GenerateResult(WireModel):
    """The raw text of each channel of one model call, with its usage."""

    kind: Literal["llm.result"] = "llm.result"
    conversation_id: Id
    turn_id: Id
    round: int = 0
    channels: dict[str, str] = Field(default_factory=dict)
    raw: str = ""
    usage: Usage = Field(default_factory=Usage)
    notices: list[str] = Field(default_factory=list)
    error: str | None = None
    error_code: str = ""
    """Why the call failed (``model_unavailable``, ``context_window``, ...); empty when ok."""
    used_sources: list[int] = Field(default_factory=list)
    """SIDs cited in the answer or canvas channels that resolved against the sources (the
    turn's ``sources_used``)."""
    unresolved_sources: list[int] = Field(default_factory=list)
    """SIDs cited in the answer or canvas channels that match no source (the decision
    loop records an ``unresolved_citation`` notice the model sees next round)."""
    answer_emitted: str = ""
    """The answer as clients saw it (citation tokens resolved); ``channels`` keeps it raw."""
    seq_end: int = 0
    """The ``seq`` after this call's last ``stream.delta``."""
    ts: UtcDatetime = Field(default_factory=utcnow)
