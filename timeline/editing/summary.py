"""Summaries for compaction: the ``Summarizer`` protocol and a deterministic offline one.

Compaction asks for two kinds of summary: the compacted history (with the
previous summary folded in) and, when the cut falls inside a turn, that turn's
prefix. A model-backed summarizer lives in ``llm/``; the ``OfflineSummarizer``
here needs no model: it keeps what the agent needs to find its way back —
internal notes verbatim, decisions, every logical path produced or read, and a
short preview of each message — in priority order until the token budget is
spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    NOTE_PRESERVED,
    PLAN,
    REACT_NOTES,
    SUMMARY,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_FOLLOWUP,
    USER_PROMPT,
    Block,
)
from actline.timeline.errors import PlanError
from actline.timeline.facts import (
    Fact,
    IntegrityReport,
    StructuredSummary,
    canonical_facts,
    check_integrity,
    note_facts,
    result_text,
)
from actline.timeline.memory import Plan
from actline.timeline.tokens import DEFAULT_COUNTER, TokenCounter
from actline.timeline.view import preview


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What to summarise: ``blocks`` in order, the summary they continue, and a budget."""

    blocks: Sequence[Block]
    previous_summary: str = ""
    max_tokens: int = 800
    kind: Literal["history", "turn_prefix"] = "history"


class Summarizer(Protocol):
    """Turns a range of blocks into a compact summary text."""

    def summarize(self, request: SummaryRequest) -> str: ...


def _plan_line(data: dict[str, Any]) -> str:
    try:
        plan = Plan.from_dict(data)
    except PlanError:
        return f"- plan {preview(str(data), 200)}"
    return f"- plan {plan.plan_id} ({plan.state}): " + " · ".join(plan.lines())


class OfflineSummarizer:
    """Deterministic and extractive: same blocks, same summary, no model."""

    def __init__(self, counter: TokenCounter = DEFAULT_COUNTER) -> None:
        self.counter = counter

    def summarize(self, request: SummaryRequest) -> str:
        blocks = request.blocks
        turns = list(dict.fromkeys(b.turn_id for b in blocks if b.type != SUMMARY))
        title = "Turn prefix" if request.kind == "turn_prefix" else "Summary"
        head = f"{title} of {len(blocks)} blocks from turns {', '.join(turns) or '-'}."
        notes: list[str] = []
        messages: list[str] = []
        paths: list[str] = []
        plans: dict[str, str] = {}
        for b in blocks:
            text = b.replacement if b.hidden else b.content
            if b.type in (NOTE, NOTE_PRESERVED, REACT_NOTES):
                notes.append(f"- {preview(text, 300)}")
            elif b.type == PLAN and isinstance(b.data, dict):
                plans[str(b.data.get("plan_id"))] = _plan_line(b.data)
            elif b.type in (USER_PROMPT, USER_FOLLOWUP):
                messages.append(f"- {b.turn_id} user: {preview(text, 160)}")
            elif b.type == COMPLETION:
                messages.append(f"- {b.turn_id} assistant: {preview(text, 200)}")
            elif b.type == TOOL_CALL:
                messages.append(f"- {b.turn_id} tool call {b.path}: {preview(text, 100)}")
            if b.path and b.type not in (TURN_HEADER, SUMMARY) and b.type != TOOL_CALL:
                hidden = " (hidden)" if b.hidden else ""
                kept = b.meta.get("retention")
                if b.hidden and isinstance(kept, dict):
                    hidden = (
                        f" ({kept.get('policy', 'retained')}, {kept.get('tokens', '?')} tokens)"
                    )
                if b.type == TOOL_RESULT or b.path.startswith(("fi:", "so:", "ks:", "sk:")):
                    paths.append(f"- {b.path}{hidden}")
        notes.extend(plans.values())
        sections: list[tuple[str, list[str]]] = [
            ("Notes and plans:", notes),
            ("Paths to reopen with react.read:", list(dict.fromkeys(paths))),
            ("Messages:", messages),
        ]
        if request.kind == "turn_prefix":
            sections.insert(0, sections.pop())  # the turn's own question comes first
        if request.previous_summary:
            sections.insert(0, ("Earlier:", [preview(request.previous_summary, 1200)]))
        return self._fit(head, sections, request.max_tokens)

    def _fit(self, head: str, sections: list[tuple[str, list[str]]], budget: int) -> str:
        """Lines in priority order while they fit, leaving room for the trailer."""
        trailer = "… {} more lines; reopen older content with react.memsearch."
        budget -= self.counter.count(trailer.format(10**6)) + 1
        if self.counter.count(head) > budget:
            head = preview(head, max(8, budget * 4))
        out = [head]
        used = self.counter.count(head)
        dropped = 0
        for title, lines in sections:
            if not lines:
                continue
            cost = self.counter.count(title) + 1
            if used + cost > budget:
                dropped += len(lines)
                continue
            used += cost
            # Messages keep the newest when the budget runs out; the rest keep the oldest.
            order = range(len(lines) - 1, -1, -1) if title == "Messages:" else range(len(lines))
            chosen: set[int] = set()
            for i in order:
                cost = self.counter.count(lines[i]) + 1
                if used + cost > budget:
                    dropped += 1
                    continue
                chosen.add(i)
                used += cost
            out.append(title)
            out.extend(line for i, line in enumerate(lines) if i in chosen)
        if dropped:
            out.append(trailer.format(dropped))
        return "\n".join(out)


SUMMARY_RECORD = "summary_record"
"""The ``meta`` key of a ``su:`` block that holds its structured summary."""


def record_of(block: Block | None) -> StructuredSummary | None:
    """The structured summary stored on a ``su:`` block (None: none stored)."""
    if block is None:
        return None
    data = block.meta.get(SUMMARY_RECORD)
    return StructuredSummary.from_dict(data) if isinstance(data, dict) else None


def block_facts(blocks: Sequence[Block]) -> tuple[list[Fact], list[str]]:
    """Facts of ``[K]`` notes and canonical tool output, in block order (a later value of
    a key wins), and the earlier values they replaced as ``key: value``."""
    found: dict[str, Fact] = {}
    replaced: list[str] = []
    for b in blocks:
        if b.type in (NOTE, NOTE_PRESERVED, REACT_NOTES):
            facts = note_facts(b.content, turn_id=b.turn_id, path=b.path, ts=b.ts)
            source = str(b.meta.get("source_path") or "")
            if source:
                facts = [replace(f, path=source) for f in facts]
        elif b.type == TOOL_RESULT:
            facts = canonical_facts(result_text(b), turn_id=b.turn_id, path=b.path, ts=b.ts)
        else:
            continue
        for f in facts:
            old = found.get(f.key)
            if old is not None and old.value != f.value:
                replaced.append(f"{old.key}: {old.value}")
            found[f.key] = f
    return list(found.values()), replaced


def offline_record(
    request: SummaryRequest, previous: StructuredSummary | None
) -> tuple[StructuredSummary, IntegrityReport]:
    """The structured record of an offline digest: facts from ``[K]`` notes and canonical
    tool output, checked against ``previous`` (its facts carried forward)."""
    facts, replaced = block_facts(request.blocks)
    current = {(f.key, f.value) for f in facts}
    discarded = tuple(d for d in dict.fromkeys(replaced) if tuple(d.split(": ", 1)) not in current)
    return check_integrity(StructuredSummary(tuple(facts), discarded=discarded), previous)
