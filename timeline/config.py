"""The knobs of rendering, caching, hiding, TTL pruning and compaction, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .errors import TimelineError

RETENTION_POLICIES = ("keep_full", "keep_structured", "summarize_archive", "drop")
CONTEXT_POLICIES = ("cost", "append")
"""How view edits are placed (``actline.timeline.rendering.policy``): ``cost`` (each edit at a
moment where it is cheap, when the cost model says it pays) or ``append`` (the smart layer
off: each edit when its own rule says, compaction only at the context's ceiling)."""
"""What retention does with a tool result outside the recency window
(``actline.timeline.editing.retention``)."""


@dataclass(frozen=True, slots=True)
class TimelineConfig:
    """Defaults follow the original runtime where it is sound."""

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
    compaction_floor_tokens: int = 0
    """Under the ``cost`` context policy, a context at least this large may be compacted at a
    turn boundary when the cost model says it pays or the watchdog asked; 0 (the default, as
    compaction itself is off by default) for never: only the ceiling compacts. A runtime
    profile sets it (``watchdog_floor_tokens``)."""

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

    retention: bool = True
    """Tool-response retention (``actline.timeline.editing.retention``) on or off."""
    retention_max_chars: int = 3600
    """A result of at least this many characters is ``verbose``."""
    retention_max_tokens: int = 1200
    """A result of at least this many tokens is ``verbose``."""
    retention_informative: str = "keep_full"
    retention_verbose: str = "summarize_archive"
    retention_redundant: str = "drop"
    retention_critical: str = "keep_full"
    retention_critical_tools: tuple[str, ...] = ("react.read", "react.plan")
    """fnmatch patterns of tools whose results are ``critical``."""
    retention_by_tool: tuple[tuple[str, str], ...] = ()
    """(fnmatch pattern, policy) pairs; the first matching pattern wins over the class policy."""
    retention_recent_results: int = 6
    """The results of this many newest tool calls always stay whole."""
    retention_batch: int = 1
    """Retain once this many results wait outside the window (at once when the cache is cold
    anyway: after TTL pruning, around a compaction). Results that leave the window in one
    round always go together. 1 by measurement (bench/cache.py): with the restore-point mark
    a retention rewrites only the prefix after the oldest changed result, so waiting for a
    batch moves that change further back and costs more (batches of 4: +3 to +6 %)."""

    context_policy: str = "cost"
    """One of ``CONTEXT_POLICIES``."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind = str(f.type)
            if f.name == "context_policy":
                if value not in CONTEXT_POLICIES:
                    raise TimelineError(
                        f"TimelineConfig.context_policy must be one of "
                        f"{', '.join(CONTEXT_POLICIES)}, got {value!r}"
                    )
            elif kind in ("int", "float"):
                _number(f.name, value, kind)
            elif kind == "bool":
                if not isinstance(value, bool):
                    raise TimelineError(
                        f"TimelineConfig.{f.name} must be true or false, got {value!r}"
                    )
            elif kind == "str":
                _policy(f.name, value)
            elif f.name == "retention_critical_tools":
                object.__setattr__(self, f.name, _patterns(f.name, value))
            elif f.name == "retention_by_tool":
                object.__setattr__(self, f.name, _overrides(f.name, value))
        if self.cache_point_offset_rounds < 1 or self.cache_point_min_rounds < 1:
            raise TimelineError("cache_point_offset_rounds and cache_point_min_rounds must be >= 1")
        if not 0 < self.compaction_keep_ratio < self.compaction_ratio <= 1:
            raise TimelineError("need 0 < compaction_keep_ratio < compaction_ratio <= 1")
        if self.keep_recent_intact_turns > self.keep_recent_turns:
            raise TimelineError("keep_recent_intact_turns cannot exceed keep_recent_turns")


def _number(name: str, value: Any, kind: str) -> None:
    allowed = (int,) if kind == "int" else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise TimelineError(f"TimelineConfig.{name} must be a number ({kind}), got {value!r}")
    if value < 0:
        raise TimelineError(f"TimelineConfig.{name} must be >= 0, got {value}")


def _policy(name: str, value: Any) -> str:
    if value not in RETENTION_POLICIES:
        raise TimelineError(
            f"TimelineConfig.{name} must be one of {', '.join(RETENTION_POLICIES)}, got {value!r}"
        )
    return str(value)


def _patterns(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise TimelineError(f"TimelineConfig.{name} must be a list of tool names, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise TimelineError(f"TimelineConfig.{name}: {item!r} is not a tool name or pattern")
    return tuple(value)


def _overrides(name: str, value: Any) -> tuple[tuple[str, str], ...]:
    """``(pattern, policy)`` pairs; a mapping is accepted too (in its order)."""
    items = list(value.items()) if isinstance(value, dict) else value
    if isinstance(items, str) or not isinstance(items, list | tuple):
        raise TimelineError(f"TimelineConfig.{name} must be (pattern, policy) pairs, got {value!r}")
    out: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise TimelineError(f"TimelineConfig.{name}: {item!r} is not a (pattern, policy) pair")
        pattern, policy = item
        if not isinstance(pattern, str) or not pattern.strip():
            raise TimelineError(f"TimelineConfig.{name}: {pattern!r} is not a tool name or pattern")
        out.append((pattern, _policy(f"{name}[{pattern!r}]", policy)))
    return tuple(out)
