"""actline tools package (see DESIGN.md): the knowledge space behind ``react.search_knowledge``
and ``ks:`` reads, and the errors the tools raise."""

from .errors import KNOWLEDGE_REASONS, KnowledgeError, ToolError
from .knowledge import Doc, Hit, IndexStats, KnowledgeSpace, RefreshCounts

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
