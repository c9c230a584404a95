"""What conversation management reads of a stored conversation: its summary (title, times,
turns, tokens, cost), whether it matches a search, and its export as JSON or Markdown.

Every function reads the node's store and never loads a timeline: a summary is the outline
(``Store.outline``), the management row, the turn log and the turn records; a search adds
the turn briefs (each turn's question and answer); an export reads every block once.
Blocking: run them off the event loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from actline.llm.pricing import result_cost
from actline.messages import ConversationSummary, Cost, Usage
from actline.storage import Store
from actline.storage.manage import management_row, turn_order
from actline.timeline.snapshot import SOURCE_PREFIX

__all__ = ["Priced", "export_json", "export_markdown", "matches", "summarize"]

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Priced:
    """The usage and cost of a conversation's own finished turns."""

    usage: Usage
    cost: Cost
    priced: bool
    """Some turn's model is in the price table (else the cost is only an estimate)."""

    @property
    def cost_usd(self) -> float | None:
        tokens = self.usage.total_input_tokens + self.usage.output_tokens
        return self.cost.total_usd if self.priced or tokens == 0 else None


def turn_usage(record: Any) -> tuple[Usage, Cost] | None:
    """A final turn record's usage and cost (its stored cost, else priced now); None for a
    running turn or a record that does not read as a result."""
    result = record.get("result") if isinstance(record, Mapping) else None
    return result_cost(result) if isinstance(result, Mapping) else None


def priced(records: Mapping[str, Any]) -> Priced:
    """The sum over the records a conversation ran itself (a fork's inherited turns are
    its parent's)."""
    usage, cost, known = Usage(), Cost(), False
    for record in records.values():
        if isinstance(record, Mapping) and record.get("inherited_from"):
            continue
        found = turn_usage(record)
        if found is not None:
            usage, cost = usage + found[0], cost + found[1]
            known = known or bool(found[1].priced_as)
    return Priced(usage, cost, known)


def summarize(store: Store, cid: str) -> ConversationSummary:
    """The summary of a stored conversation (``NotStored`` when it has none)."""
    outline = store.outline(cid)
    meta = management_row(store, cid)
    order = turn_order(store, cid)
    records = store.turn_records(cid)
    created = float(order[0][1].get("ts") or 0.0) if order else 0.0
    forked = meta.get("forked_from")
    fork_created = float(meta.get("created") or 0.0)
    created = created or fork_created or outline.last_ts
    updated = max(outline.last_ts, fork_created)
    cost = priced(records)
    return ConversationSummary(
        conversation_id=cid,
        title=outline.title,
        created=created,
        updated=updated or created,
        turns=len(order),
        input_tokens=cost.usage.input_tokens,
        output_tokens=cost.usage.output_tokens,
        cache_read_tokens=cost.usage.cache_read_tokens,
        cost_usd=cost.cost_usd,
        forked_from=str(forked[0]) if isinstance(forked, list) and forked else None,
        forked_at_turn=str(forked[1]) if isinstance(forked, list) and len(forked) > 1 else None,
    )


def words_of(text: str) -> list[str]:
    """The search words of ``text``: its word characters, lower-cased (any case matches)."""
    return [w.casefold() for w in _WORD.findall(text)]


def matches(store: Store, cid: str, title: str, words: Sequence[str]) -> bool:
    """Every one of ``words`` occurs, in any case, in the title, a question or an answer
    (as part of a word: ``cach`` finds ``caching``). Reads the turn briefs only when the
    title alone does not match."""
    wanted = [w.casefold() for w in words if w]
    if not wanted:
        return True
    haystack = title.casefold()
    missing = [w for w in wanted if w not in haystack]
    if not missing:
        return True
    texts = [f"{b.prompt}\n{b.answer}".casefold() for b in store.turn_briefs(cid)]
    whole = "\n".join(texts)
    return all(w in whole for w in missing)


# -- export ---------------------------------------------------------------------------------------
def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z") if ts else ""


def export_data(store: Store, cid: str) -> dict[str, Any]:
    """The conversation as plain data: its summary, its turns and its blocks."""
    summary = summarize(store, cid)
    order = turn_order(store, cid)
    records = store.turn_records(cid)
    briefs = {b.turn_id: b for b in store.turn_briefs(cid)}
    pool = {
        int(row.get("sid") or 0): row
        for key, row in store.header_rows(cid).items()
        if key.startswith(SOURCE_PREFIX) and isinstance(row, Mapping)
    }
    turns: list[dict[str, Any]] = []
    for n, (tid, entry) in enumerate(order, start=1):
        record = records.get(tid)
        rec: Mapping[str, Any] = record if isinstance(record, Mapping) else {}
        result = rec.get("result")
        result = result if isinstance(result, Mapping) else {}
        brief = briefs.get(tid)
        used = [s for s in result.get("sources_used") or [] if isinstance(s, int)]
        found = turn_usage(record)
        turns.append(
            {
                "number": n,
                "turn_id": tid,
                "question": brief.prompt if brief else "",
                "answer": str(result.get("answer") or (brief.answer if brief else "")),
                "sources": [
                    {
                        "sid": sid,
                        "title": str(pool.get(sid, {}).get("title") or ""),
                        "url": str(pool.get(sid, {}).get("url") or ""),
                    }
                    for sid in used
                ],
                "status": str(rec.get("status") or result.get("status") or ""),
                "usage": None if found is None else _usage_json(found[0]),
                "cost_usd": None if found is None else found[1].total_usd,
                "inherited_from": rec.get("inherited_from"),
                "ts": float(entry.get("ts") or 0.0),
                "started": _iso(float(entry.get("ts") or 0.0)),
                "ended": _iso(float(entry.get("end_ts") or 0.0)),
            }
        )
    blocks = list(store.iter_blocks(cid))
    return {
        "conversation": {
            **summary.model_dump(mode="json"),
            "created_iso": _iso(summary.created),
            "updated_iso": _iso(summary.updated),
        },
        "turns": turns,
        "blocks": blocks,
    }


def _usage_json(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_5m_tokens": usage.cache_write_5m_tokens,
        "cache_write_1h_tokens": usage.cache_write_1h_tokens,
        "model": usage.model,
    }


def export_json(store: Store, cid: str) -> str:
    """``export_data`` as indented JSON (binary block content as base64 text, as stored)."""
    return json.dumps(export_data(store, cid), ensure_ascii=False, indent=2, default=_jsonable)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def export_markdown(store: Store, cid: str) -> str:
    """A readable transcript: the title, each turn's question and answer, its sources."""
    data = export_data(store, cid)
    conv = data["conversation"]
    lines = [f"# {conv['title'] or conv['conversation_id']}", ""]
    about = [f"conversation `{conv['conversation_id']}`", f"{conv['turns']} turn(s)"]
    if conv["created_iso"]:
        about.append(f"started {conv['created_iso']}")
    if conv.get("forked_from"):
        about.append(f"forked from `{conv['forked_from']}` at turn `{conv['forked_at_turn']}`")
    if conv.get("cost_usd") is not None:
        about.append(f"cost ${conv['cost_usd']:.4f}")
    lines += ["_" + " · ".join(about) + "_", ""]
    for turn in data["turns"]:
        lines += [
            f"## Turn {turn['number']}" + (f" · {turn['started']}" if turn["started"] else "")
        ]
        lines += ["", "**Question**", "", turn["question"].strip() or "_(no text)_", ""]
        lines += [
            "**Answer**",
            "",
            turn["answer"].strip() or f"_({turn['status'] or 'no answer'})_",
        ]
        if turn["sources"]:
            lines += ["", "**Sources**", ""]
            for src in turn["sources"]:
                label = src["title"] or src["url"] or f"source {src['sid']}"
                link = f"[{label}]({src['url']})" if src["url"] else label
                lines.append(f"{src['sid']}. {link}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
