"""actline tools package: the knowledge space behind ``react.search_knowledge``
and ``ks:`` reads, and the errors the tools raise."""

from actline.tools.search.knowledge import Doc, Hit, IndexStats, KnowledgeSpace, RefreshCounts

from .errors import KNOWLEDGE_REASONS, KnowledgeError, ToolError

__all__ = [
    "KNOWLEDGE_REASONS",
    "Doc",
    "Hit",
    "IndexStats",
    "KnowledgeError",
    "KnowledgeSpace",
    "RefreshCounts",
    "ToolError",
]
