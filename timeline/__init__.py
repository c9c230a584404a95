"""The timeline: blocks, logical paths, sources pool, working memory and the render pipeline.

Pure code: no I/O, no clocks (times are passed in), no asyncio. A
``Timeline`` holds a conversation's blocks in restored order; a ``Renderer``
turns it into the parts a model sees, round after round, with at most three
cache marks and the uncached SOURCES POOL and ANNOUNCE at the tail.
"""

from actline.timeline.editing.compaction import CompactionOutcome, CompactionPlan
from actline.timeline.editing.hide import HideResult
from actline.timeline.editing.retention import RetentionOutcome
from actline.timeline.editing.summary import OfflineSummarizer, Summarizer, SummaryRequest
from actline.timeline.editing.ttl import TtlOutcome
from actline.timeline.rendering.announce import AnnounceContext
from actline.timeline.rendering.cache import CachePoints, round_key
from actline.timeline.rendering.render import Renderer, RenderEvents, RenderResult

from .blocks import Block, iso
from .config import RETENTION_POLICIES, TimelineConfig
from .errors import (
    BlockError,
    CompactionError,
    PathError,
    PlanError,
    SourceError,
    TimelineError,
)
from .memory import AckUpdate, NoteLine, Plan, PlanBook, PlanStep, parse_ack_lines, parse_note
from .paths import LogicalPath, format_path, format_sids, is_logical_path, parse_path
from .read import ReadResult, resolve
from .sources import SourceRow, SourcesPool, is_eligible, normalize_url
from .timeline import Timeline
from .tokens import DEFAULT_COUNTER, EstimateCounter, TokenCounter
from .turn_index import turn_index

__all__ = [
    "DEFAULT_COUNTER",
    "RETENTION_POLICIES",
    "AckUpdate",
    "AnnounceContext",
    "Block",
    "BlockError",
    "CachePoints",
    "CompactionError",
    "CompactionOutcome",
    "CompactionPlan",
    "EstimateCounter",
    "HideResult",
    "LogicalPath",
    "NoteLine",
    "OfflineSummarizer",
    "PathError",
    "Plan",
    "PlanBook",
    "PlanError",
    "PlanStep",
    "ReadResult",
    "RenderEvents",
    "RenderResult",
    "Renderer",
    "RetentionOutcome",
    "SourceError",
    "SourceRow",
    "SourcesPool",
    "Summarizer",
    "SummaryRequest",
    "Timeline",
    "TimelineConfig",
    "TimelineError",
    "TokenCounter",
    "TtlOutcome",
    "format_path",
    "format_sids",
    "is_eligible",
    "is_logical_path",
    "iso",
    "normalize_url",
    "parse_ack_lines",
    "parse_note",
    "parse_path",
    "resolve",
    "round_key",
    "turn_index",
]
