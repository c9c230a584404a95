"""The knowledge space and the sources pool as the react.* tools show them.

Owns ``react.search_knowledge`` (ranked ``ks:`` hits from ``actline.tools.search.knowledge``)
and the text of sources-pool rows and SIDs that ``react.read`` shows
(``actline.tools.react.reading`` reads ``ks:`` documents and adds them to the pool).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from actline.timeline import Block
from actline.timeline.sources import SourceRow

from .base import Notice, ReactContext, ReactOutcome, failed, int_param, refuse, text_param

__all__ = ["rows_text", "search_knowledge", "sid_of"]


def search_knowledge(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
    """``query``, ``top_k=5``: ranked ``ks:`` hits (path, title, url, score, snippet)."""
    tool = "react.search_knowledge"
    query = text_param(params, "query", tool)
    if isinstance(query, Notice):
        return failed(query)
    top_k = int_param(params, "top_k", 5, tool)
    if isinstance(top_k, Notice):
        return failed(top_k)
    if ctx.knowledge is None:
        message = "No knowledge space is configured here; answer from the conversation."
        return refuse(tool, "knowledge_unavailable", message)
    hits = ctx.knowledge.search(query, top_k)
    return ReactOutcome({"status": "ok", "query": query, "hits": [h.to_dict() for h in hits]})


def sid_of(blocks: Iterable[Block]) -> int | None:
    """The first source SID the blocks carry in their ``sources`` meta, or None."""
    for block in blocks:
        for row in block.meta.get("sources", ()):
            if isinstance(row, Mapping) and isinstance(row.get("sid"), int):
                return int(row["sid"])
    return None


def rows_text(rows: Iterable[SourceRow]) -> str:
    """Sources-pool rows as react.read shows them: ``[S:<sid>] title — url`` and the body."""
    lines: list[str] = []
    for row in rows:
        lines.append(
            f"[S:{row.sid}] {' '.join(row.title.split())} — {row.url or row.physical_path}"
        )
        body = row.content or row.text
        if body:
            lines.append(body)
    return "\n".join(lines)
