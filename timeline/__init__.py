"""The timeline: blocks, logical paths, sources pool, working memory and the render pipeline.

Pure code: no I/O, no clocks (times are passed in), no asyncio. A
``Timeline`` holds a conversation's blocks in restored order; a ``Renderer``
turns it into the parts a model sees, round after round, with at most three
cache marks and the uncached SOURCES POOL and ANNOUNCE at the tail.
"""

from .blocks import Block, iso
from .cache import CachePoints, round_key
from .config import CONTEXT_POLICIES, RETENTION_POLICIES, TimelineConfig
from .editing.compaction import CompactionOutcome, CompactionPlan
from .editing.hide import HideResult
from .editing.retention import RetentionOutcome
from .editing.summary import OfflineSummarizer, Summarizer, SummaryRequest
from .editing.ttl import TtlOutcome
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
from .rendering.announce import AnnounceContext
from .rendering.render import Renderer, RenderEvents, RenderResult
from .sources import SourceRow, SourcesPool, is_eligible, normalize_url
from .timeline import Timeline
from .tokens import DEFAULT_COUNTER, EstimateCounter, TokenCounter
from .turn_index import turn_index

__all__ = [
    "CONTEXT_POLICIES",
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
