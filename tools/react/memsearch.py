"""react.memsearch: ranking earlier turns of the conversation, and the rows it searches.

``index_rows`` makes the memsearch index rows of the searchable blocks (the owner persists
them with their turn and feeds them to the conversation's ``MemIndex``,
``actline.tools.search.memindex``); ``memsearch`` ranks turns by them, and the memory facts of
``actline.timeline.facts`` by the ``facts`` target.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from actline.timeline import Block
from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    NOTE_PRESERVED,
    SIGNAL_DONE,
    SUMMARY,
    TOOL_CALL,
    USER_ATTACHMENT_META,
    USER_FOLLOWUP,
    USER_FOLLOWUP_PRESERVED,
    USER_PROMPT,
    iso,
)
from actline.timeline.errors import PathError
from actline.timeline.paths import ar_path
from actline.tools.embeddings.minilm import embeddings_status
from actline.tools.search.memindex import MemIndex

from .base import Notice, ReactContext, ReactOutcome, failed, int_param, refuse, text_param

__all__ = ["MEMSEARCH_TARGETS", "index_rows", "memsearch"]

MEMSEARCH_TOP_K: Final = 20
FACTS_TARGET: Final = "facts"
"""The react.memsearch target of memory facts (``actline.timeline.facts``)."""
DAY: Final = 86_400.0

MEMSEARCH_TARGETS: Final[Mapping[str, frozenset[str]]] = {
    "user": frozenset({USER_PROMPT, USER_FOLLOWUP, USER_FOLLOWUP_PRESERVED}),
    "assistant": frozenset({COMPLETION}),
    "notes": frozenset({NOTE, NOTE_PRESERVED}),
    "summary": frozenset({SUMMARY}),
    "attachment": frozenset({USER_ATTACHMENT_META}),
    "agents": frozenset({SIGNAL_DONE, TOOL_CALL}),
}
"""react.memsearch targets and the block types each one searches. ``agents``: the DONE
summaries of outside agents and the tasks sent to them (``agent.send`` calls only)."""
_ROLE_OF: Final = {t: role for role, types in MEMSEARCH_TARGETS.items() for t in types}
AGENT_TASK_TOOL: Final = "agent.send"
"""The tool whose calls hand a task to an outside agent
(``actline.actors.turn.reply.AGENT_SEND``)."""


def _row_text(block: Block) -> str:
    """The searchable text of a block: a DONE's ``agent: summary``, an agent task's
    ``task for <agent>: <text>``, other blocks' text."""
    if block.type == TOOL_CALL:
        data = block.data if isinstance(block.data, Mapping) else {}
        params = data.get("params")
        if data.get("tool") != AGENT_TASK_TOOL or not isinstance(params, Mapping):
            return ""
        text = params.get("text")
        return f"task for {params.get('name')}: {text}" if isinstance(text, str) else ""
    return block.text or block.content


def index_rows(blocks: Iterable[Block]) -> list[dict[str, Any]]:
    """The memsearch index rows of the searchable blocks among ``blocks``.

    One row per block of a ``MEMSEARCH_TARGETS`` type with text: ``turn_id, role, ts, text,
    path``, and ``speaker`` (the agent) for a DONE. Hidden blocks are indexed with their full
    text (hiding is a view, not a deletion).
    """
    rows: list[dict[str, Any]] = []
    for block in blocks:
        role = _ROLE_OF.get(block.type)
        text = _row_text(block) if role is not None else ""
        if role is None or not text.strip():
            continue
        row = {
            "turn_id": block.turn_id,
            "role": role,
            "ts": float(block.ts),
            "text": text,
            "path": block.path,
        }
        if block.type == SIGNAL_DONE and isinstance(block.meta.get("agent"), str):
            row["speaker"] = block.meta["agent"]  # "what did <agent> say?" finds it first
        rows.append(row)
    return rows


def memsearch(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
    """``query, targets, top_k, days``: rank earlier turns by their messages, notes,
    summaries, attachments and outside agents' DONEs and tasks.

    Hybrid (BM25 + MiniLM vectors) when the index has an embedder, BM25 otherwise; one hit
    per turn with its best snippet, the turn index path to read next and the row's
    ``block_path``. Ranking by keywords alone (no embedder, or rows not embedded yet) is
    said in a notice and in ``ranking_note``, never silently.
    """
    tool = "react.memsearch"
    query = text_param(params, "query", tool)
    if isinstance(query, Notice):
        return failed(query)
    top_k = int_param(params, "top_k", 5, tool)
    if isinstance(top_k, Notice):
        return failed(top_k)
    top_k = min(top_k, MEMSEARCH_TOP_K)
    targets = params.get("targets")
    if targets is None:
        targets = [*MEMSEARCH_TARGETS, FACTS_TARGET]
    elif isinstance(targets, str):
        targets = [targets]
    if not (
        isinstance(targets, list | tuple)
        and targets
        and all(
            isinstance(t, str) and (t in MEMSEARCH_TARGETS or t == FACTS_TARGET) for t in targets
        )
    ):
        names = ", ".join([*MEMSEARCH_TARGETS, FACTS_TARGET])
        message = f"targets must be a list drawn from {names}."
        return refuse(tool, "memsearch_bad_target", f"{message} Got {targets!r}.")
    days = params.get("days")
    if days is not None and (
        isinstance(days, bool) or not isinstance(days, int | float) or not days > 0
    ):
        return refuse(tool, "bad_params", "react.memsearch: days must be a positive number.")
    since = None if days is None else ctx.now - float(days) * DAY
    roles = set(targets) - {FACTS_TARGET}
    index = _memory_index(ctx)
    found = (
        index.search(
            query,
            roles=roles,
            top_k=top_k,
            since=since,
            exclude_turns={ctx.turn_id},
            now=ctx.now,
        )
        if roles
        else []
    )
    hits = [
        {
            "turn_id": hit.turn_id,
            "role": hit.role,
            "score": round(hit.score, 4),
            "ts": hit.ts,
            "time": iso(hit.ts),
            "snippet": hit.snippet,
            "path": _index_path(hit.turn_id),
            "block_path": hit.path,
        }
        for hit in found
    ]
    result = {
        "status": "ok",
        "query": query,
        "targets": list(targets),
        "ranking": index.mode,
        "searched": len(index),
        "hits": hits,
    }
    notices = _ranking_notices(index, tool)
    if notices:
        result["ranking_note"] = " ".join(n.message for n in notices)
    if FACTS_TARGET in targets:
        result["facts"] = [
            {
                "key": fact.key,
                "value": fact.value,
                "turn_id": fact.turn_id,
                "path": fact.path,
                "confidence": round(fact.confidence, 3),
                "score": round(score, 4),
            }
            for score, fact in ctx.fact_book.search(query, top_k)
            if since is None or fact.ts >= since
        ]
    return ReactOutcome(result, [], notices)


def _memory_index(ctx: ReactContext) -> MemIndex:
    """The conversation's index, or one built for this call from the store's rows and the
    searchable blocks of the timeline (a timeline that was never persisted)."""
    if ctx.memindex is not None:
        return ctx.memindex
    index = MemIndex()
    store, cid = ctx.store, ctx.timeline.conversation_id
    if store is not None and cid:
        index.add(store.index_rows(cid))
    index.add(index_rows(ctx.timeline.blocks))
    return index


def _ranking_notices(index: MemIndex, tool: str) -> list[Notice]:
    """What the model must know about how the hits were ranked: by keywords alone (no
    embedding model), or partly so (rows still being embedded in the background)."""
    if index.mode == "bm25":
        reason = embeddings_status()["reason"]
        why = "no embedding model is loaded" if reason == "ok" else reason
        message = f"react.memsearch ranked by keywords only (BM25): {why}."
        return [Notice("memsearch_keywords_only", message, tool)]
    if index.pending():
        message = (
            f"react.memsearch: {index.pending()} of {len(index)} rows are still being embedded "
            "in the background; they were ranked by keywords only this time."
        )
        return [Notice("memsearch_partly_embedded", message, tool)]
    return []


def _index_path(turn_id: str) -> str:
    try:
        return ar_path(turn_id, "react.turn.index")
    except PathError:
        return ""
