"""The knobs of rendering, caching, hiding, TTL pruning and compaction, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import TimelineError


@dataclass(frozen=True, slots=True)
class TimelineConfig:
    """Defaults follow the original runtime (REFERENCE.md §1.7-§1.11) where it is sound."""

    max_tokens: int = 0
    """The model's context window for compaction; 0 disables compaction."""
    compaction_ratio: float = 0.9
    """Compact when system + visible tokens exceed this share of ``max_tokens``."""
    compaction_keep_ratio: float = 0.7
    """Share of the context budget kept as raw recent blocks after a compaction."""
    compaction_keep_turns: int = 6
    """Keep whole recent turns when they fit under the trigger (never above it)."""
    summary_max_tokens: int = 800
    split_turn_summary_max_tokens: int = 400

    cache_point_offset_rounds: int = 4
    cache_point_min_rounds: int = 2
    hide_max_tail_tokens: int = 2000

    cache_ttl_seconds: int = 300
    """Provider cache lifetime; 0 disables TTL pruning."""
    cache_ttl_prune_buffer_seconds: int = 10
    keep_recent_turns: int = 10
    keep_recent_intact_turns: int = 2
    light_prune_result_tokens: int = 1500
    """Recent (not intact) tool results above this are replaced by a short view."""
    keep_recent_images: int = 2
    max_image_base64_chars: int = 1_000_000
    max_base64_chars: int = 4000
    replacement_preview_chars: int = 240

    sources_text_chars: int = 500

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0:
                raise TimelineError(f"TimelineConfig.{f.name} must be >= 0, got {value}")
        if self.cache_point_offset_rounds < 1 or self.cache_point_min_rounds < 1:
            raise TimelineError("cache_point_offset_rounds and cache_point_min_rounds must be >= 1")
        if not 0 < self.compaction_keep_ratio < self.compaction_ratio <= 1:
            raise TimelineError("need 0 < compaction_keep_ratio < compaction_ratio <= 1")
        if self.keep_recent_intact_turns > self.keep_recent_turns:
            raise TimelineError("keep_recent_intact_turns cannot exceed keep_recent_turns")
