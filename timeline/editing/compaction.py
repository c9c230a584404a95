"""Compaction: the hard ceiling. Replace an old range by a ``conv.range.summary``.

Runs when system + visible tokens exceed ``compaction_ratio * max_tokens`` or
when forced after a context-limit error.

- The window is everything after the latest summary.
- Recent message blocks worth ``compaction_keep_ratio`` of the budget stay raw;
  whole recent turns are kept instead when they fit clearly below the trigger
  (the original also kept them when they did not, and then compacted again on
  every round).
- The cut is a message block (prompt, completion, tool call, header, ...),
  never a tool result, and never inside a round: no call is separated from its
  result (the original could split a call from a late result).
- When the cut falls inside a turn, that turn's prefix is summarised apart.
- Inserted right before the cut, in order: the summary at
  ``su:<turn>.conv.range.summary`` (covered turn ids and a digest of produced
  artifacts, tool outputs, hidden blocks and carried refs in ``meta``), the
  internal notes of the compacted range, its followups, and the active plan
  when its latest snapshot would be left behind. Nothing is deleted: the
  compacted blocks stay reachable by path.

Planning and applying are separate so that an async caller can get the
summaries from a model in between (``plan`` -> summarise -> ``apply``);
``compact`` does all three with a synchronous ``Summarizer``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    NOTE_PRESERVED,
    PLAN,
    SUMMARY,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_FOLLOWUP,
    USER_FOLLOWUP_PRESERVED,
    USER_PROMPT,
    Block,
)
from actline.timeline.config import TimelineConfig
from actline.timeline.errors import CompactionError
from actline.timeline.facts import StructuredSummary
from actline.timeline.paths import ar_path, su_path
from actline.timeline.timeline import Timeline
from actline.timeline.tokens import TokenCounter, block_tokens

from .summary import SUMMARY_RECORD, Summarizer, SummaryRequest, offline_record, record_of

CUT_TYPES = frozenset({USER_PROMPT, COMPLETION, TOOL_CALL, TURN_HEADER})
FOLLOWUPS = {
    USER_FOLLOWUP: USER_FOLLOWUP_PRESERVED,
    USER_FOLLOWUP_PRESERVED: USER_FOLLOWUP_PRESERVED,
    "user.steer": "user.steer.preserved",
    "user.steer.preserved": "user.steer.preserved",
}
SPLIT_SEPARATOR = "\n\n---\n\n**Turn Context (split turn):**\n\n"


def is_cut_point(block: Block) -> bool:
    """A block compaction may keep as the first raw block after the summary."""
    if block.type in (TOOL_RESULT, SUMMARY):
        return False
    if block.type in CUT_TYPES:
        return True
    return bool(block.author) and block.author not in ("system", "tool")


def is_message(block: Block) -> bool:
    return block.type == TOOL_RESULT or is_cut_point(block)


def visible_tokens(block: Block, counter: TokenCounter) -> int:
    """What a block costs in the rendered stream (its replacement when hidden)."""
    if block.hidden:
        return counter.count(block.replacement) if block.replacement else 0
    return block_tokens(block, counter)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """Where to cut and what to summarise; valid until the timeline changes."""

    cut: Block
    history: tuple[Block, ...]
    prefix: tuple[Block, ...]
    previous_summary: str
    split_turn_id: str | None
    before_tokens: int
    saved_tokens: int
    """What the compacted range costs now, minus what is carried past the cut."""
    revision: int
    """``Timeline.version`` when planned: ``apply`` refuses a timeline changed since."""
    previous_record: StructuredSummary | None = None
    """The structured summary of the latest ``su:`` block (what the integrity check uses)."""

    def requests(self, cfg: TimelineConfig, budget: int) -> list[SummaryRequest]:
        """The summary requests, history first then the split turn's prefix (if any).

        Summaries get at most a tenth (history) and a twentieth (turn prefix) of the
        context ``budget``, so that kept blocks plus summary stay under the trigger.
        """
        limit = max(32, min(cfg.summary_max_tokens, budget // 10))
        out = [SummaryRequest(self.history, self.previous_summary, limit)]
        if self.split_turn_id is not None:
            limit = max(16, min(cfg.split_turn_summary_max_tokens, budget // 20))
            out.append(SummaryRequest(self.prefix, "", limit, "turn_prefix"))
        return out


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    summary_path: str
    covered_turn_ids: tuple[str, ...]
    compacted_blocks: int
    before_tokens: int
    after_tokens: int
    """Visible tokens after (the renderer reports its rendered measure here)."""
    carried: tuple[str, ...]
    split_turn_id: str | None = None


def plan(
    tl: Timeline,
    cfg: TimelineConfig,
    *,
    system_tokens: int,
    counter: TokenCounter,
    force: bool = False,
    cost: Callable[[Block], int] | None = None,
    keep_limit: int | None = None,
) -> CompactionPlan | None:
    """Choose the cut, or None when nothing can be compacted.

    ``force`` (after a context-limit error: the estimate was wrong) keeps at most
    half of what is there, so that something is always compacted when it can be.
    ``keep_limit`` caps the raw tokens kept after the cut (the context policy leaves room
    for the turn ahead).
    ``cost`` measures a block as the trigger did (the renderer passes its rendered
    entry sizes); by default a block costs its visible content.
    """
    blocks = tl.blocks
    start = tl.visible_start + (1 if tl.latest_summary is not None else 0)
    if start >= len(blocks):
        return None
    measure = cost or (lambda b: visible_tokens(b, counter))
    tokens = [measure(b) for b in blocks[start:]]
    budget = max(1, cfg.max_tokens - system_tokens)
    keep = max(1, int(cfg.compaction_keep_ratio * budget))
    recent = _recent_turns_tokens(blocks, start, tokens, cfg.compaction_keep_turns)
    roomy = int((cfg.compaction_ratio + cfg.compaction_keep_ratio) / 2 * budget)
    if recent is not None and recent <= roomy:
        keep = max(keep, recent)
    if keep_limit is not None:
        keep = max(1, min(keep, keep_limit))
    if force:
        keep = min(keep, max(1, sum(tokens) // 2))
    inside = _inside_rounds(blocks, start)
    valid = [
        i for i in range(start, len(blocks)) if is_cut_point(blocks[i]) and not inside[i - start]
    ]
    if not valid:
        return None
    kept, cut = 0, valid[0]
    for i in range(len(blocks) - 1, start - 1, -1):
        if is_message(blocks[i]):
            kept += tokens[i - start]
        if kept >= keep:
            after = bisect.bisect_left(valid, i)
            # No cut at or after i (an open call spans the rest): keep more, cut earlier.
            cut = valid[after] if after < len(valid) else valid[-1]
            break
    while (
        cut > start
        and cut < len(blocks)
        and not is_message(blocks[cut - 1])
        and blocks[cut - 1].type != SUMMARY
        and not inside[cut - 1 - start]
    ):
        cut -= 1
    if cut < len(blocks):
        header = tl.header(blocks[cut].turn_id)
        if cut - 1 > start and blocks[cut - 1] is header and not inside[cut - 1 - start]:
            cut -= 1  # a kept turn keeps its header
    if cut <= start or cut >= len(blocks):
        return None
    history_end = cut
    split = None
    anchor = blocks[cut]
    if anchor.type not in (TURN_HEADER, USER_PROMPT) and anchor.author != "user":
        turn_start = cut
        while turn_start > start and blocks[turn_start - 1].turn_id == anchor.turn_id:
            turn_start -= 1
        if turn_start < cut:
            history_end, split = turn_start, anchor.turn_id
    summary = tl.latest_summary
    carried = {b.id for b in blocks[start:cut] if b.type in (NOTE, NOTE_PRESERVED, *FOLLOWUPS)}
    active = tl.active_plan_block()
    if active is not None and active.order < anchor.order:
        carried.add(active.id)
    carried_tokens = sum(tokens[i - start] for i in range(start, cut) if blocks[i].id in carried)
    return CompactionPlan(
        cut=anchor,
        history=tuple(blocks[start:history_end]),
        prefix=tuple(blocks[history_end:cut]) if split else (),
        previous_summary=summary.content if summary is not None else "",
        split_turn_id=split,
        before_tokens=sum(tokens),
        saved_tokens=sum(tokens[: cut - start]) - carried_tokens,
        revision=tl.version,
        previous_record=record_of(summary),
    )


def _recent_turns_tokens(
    blocks: list[Block], start: int, tokens: list[int], keep_turns: int
) -> int | None:
    """Tokens from the start of the ``keep_turns``-th most recent turn to the end."""
    if keep_turns <= 0:
        return None
    seen: set[str] = set()
    for i in range(len(blocks) - 1, start - 1, -1):
        seen.add(blocks[i].turn_id)
        if len(seen) > keep_turns:
            return sum(tokens[i + 1 - start :])
    return None


def _inside_rounds(blocks: list[Block], start: int) -> list[bool]:
    """For each position of the window: would a cut there separate a call from its result?

    A call whose result has not arrived yet (an outside agent still working) is open
    to the end of the window: its result will land after everything seen so far.
    """
    spans: dict[tuple[str, str], list[int]] = {}
    answered: set[tuple[str, str]] = set()
    for i in range(start, len(blocks)):
        if blocks[i].call_id:  # call ids are a turn's own (c1-1 comes again next turn)
            call = (blocks[i].turn_id, blocks[i].call_id)
            span = spans.setdefault(call, [i, i])
            span[1] = i
            if blocks[i].type == TOOL_RESULT:
                answered.add(call)
    end = len(blocks) - 1
    depth = [0] * (len(blocks) - start + 1)
    for call, (first, last) in spans.items():
        if call not in answered and blocks[first].type == TOOL_CALL:
            last = end
        depth[first + 1 - start] += 1
        depth[last + 1 - start] -= 1
    inside, level = [], 0
    for d in depth[:-1]:
        level += d
        inside.append(level > 0)
    return inside


def apply(
    tl: Timeline,
    plan: CompactionPlan,
    *,
    summary: str,
    prefix_summary: str = "",
    now: float,
    record: Mapping[str, Any] | None = None,
) -> CompactionOutcome:
    """Insert the summary and the carried blocks before the cut; ``record`` (the
    structured summary as a dict) goes on the ``su:`` block's ``meta``."""
    if tl.version != plan.revision or tl.get(plan.cut.id) is not plan.cut:
        raise CompactionError("the timeline changed since the compaction was planned")
    if plan.split_turn_id is not None:
        summary = f"{summary}{SPLIT_SEPARATOR}{prefix_summary}" if summary else prefix_summary
    compacted = [*plan.history, *plan.prefix]
    cut = plan.cut
    turn = cut.turn_id
    covered = tuple(dict.fromkeys(b.turn_id for b in compacted if b.type != SUMMARY))
    carried = _carried(tl, compacted, cut, now)
    digest = _digest(compacted, [b.path for b in carried])
    head = Block.new(
        SUMMARY,
        turn,
        now,
        path=su_path(turn),
        text=summary,
        author="system",
        meta={
            "covered_turn_ids": list(covered),
            "compaction_digest": digest,
            **({"split_turn_id": plan.split_turn_id} if plan.split_turn_id else {}),
            **({SUMMARY_RECORD: dict(record)} if record is not None else {}),
        },
    )
    tl.insert_before(cut, [head, *carried])
    return CompactionOutcome(
        summary_path=head.path,
        covered_turn_ids=covered,
        compacted_blocks=len(compacted),
        before_tokens=plan.before_tokens,
        after_tokens=0,
        carried=tuple(b.path for b in carried),
        split_turn_id=plan.split_turn_id,
    )


def _carried(tl: Timeline, compacted: list[Block], cut: Block, now: float) -> list[Block]:
    """Copies of notes, followups and the active plan that must stay visible."""
    out: list[Block] = []
    seen: set[str] = set()
    notes_first = sorted(compacted, key=lambda b: b.type not in (NOTE, NOTE_PRESERVED))
    for b in notes_first:
        if b.type in (NOTE, NOTE_PRESERVED):
            kind = name = NOTE_PRESERVED
        elif b.type in FOLLOWUPS:
            kind = name = FOLLOWUPS[b.type]
        else:
            continue
        source = str(b.meta.get("source_path") or b.path or b.id)
        key = str(b.meta.get("message_id") or source)
        if key in seen:
            continue
        seen.add(key)
        origin = str(b.meta.get("origin_turn_id") or b.turn_id)
        seq = int(b.meta.get("source_seq", b.seq))
        meta: dict[str, Any] = {"source_path": source, "origin_turn_id": origin, "source_seq": seq}
        if "message_id" in b.meta:
            meta["message_id"] = b.meta["message_id"]
        if "tags" in b.meta:
            meta["tags"] = b.meta["tags"]
        out.append(
            Block.new(
                kind,
                origin,
                now,
                path=ar_path(origin, f"{name}.{seq}"),
                text=b.content,
                mime=b.mime,
                author=b.author,
                meta=meta,
            )
        )
    active = tl.active_plan_block()
    if active is not None and active.order < cut.order:
        data = active.data if isinstance(active.data, dict) else {}
        plan_id = str(data.get("plan_id", ""))
        out.append(
            Block.new(
                PLAN,
                cut.turn_id,
                now,
                path=ar_path(cut.turn_id, f"react.plan.{plan_id}.carry"),
                mime=active.mime,
                data=dict(data),
                meta={"source_path": active.path},
            )
        )
    return out


def _digest(compacted: list[Block], carried: list[str]) -> dict[str, Any]:
    artifacts = [b.path for b in compacted if b.path.startswith("fi:")]
    outputs = [b.path for b in compacted if b.type == TOOL_RESULT and b.path]
    hidden = [
        {"path": b.path, "replacement": b.replacement[:200]}
        for b in compacted
        if b.hidden and b.replacement
    ]
    return {
        "artifacts": list(dict.fromkeys(artifacts)),
        "tool_outputs": list(dict.fromkeys(outputs)),
        "hidden": hidden,
        "carried": carried,
    }


def compact(
    tl: Timeline,
    cfg: TimelineConfig,
    summarizer: Summarizer,
    *,
    system_tokens: int,
    now: float,
    counter: TokenCounter,
    force: bool = False,
    cost: Callable[[Block], int] | None = None,
) -> CompactionOutcome | None:
    """Plan, summarise with ``summarizer`` and apply.

    None when there is nothing to cut, or when the summary would cost as much as
    what it replaces (compaction must make the context smaller). An async
    summariser (a model) runs ``plan``, awaits the texts of ``plan.requests`` and
    calls ``finish`` itself.
    """
    chosen = plan(tl, cfg, system_tokens=system_tokens, counter=counter, force=force, cost=cost)
    if chosen is None:
        return None
    return summarize(
        tl, cfg, summarizer, chosen, system_tokens=system_tokens, now=now, counter=counter
    )


def summarize(
    tl: Timeline,
    cfg: TimelineConfig,
    summarizer: Summarizer,
    chosen: CompactionPlan,
    *,
    system_tokens: int,
    now: float,
    counter: TokenCounter,
) -> CompactionOutcome | None:
    """Summarise a plan with a synchronous ``summarizer`` and apply it (see ``compact``)."""
    requests = chosen.requests(cfg, max(1, cfg.max_tokens - system_tokens))
    texts = [summarizer.summarize(r) if needs_summary(r) else "" for r in requests]
    record, report = offline_record(requests[0], chosen.previous_record)
    stored = {**record.to_dict(), "integrity": report.to_dict(), "writer": "offline"}
    return finish(tl, chosen, texts, now=now, counter=counter, record=stored)


def needs_summary(request: SummaryRequest) -> bool:
    """False for a request with nothing to summarise (its text is then empty)."""
    return bool(request.blocks or request.previous_summary)


def finish(
    tl: Timeline,
    chosen: CompactionPlan,
    texts: Sequence[str],
    *,
    now: float,
    counter: TokenCounter,
    record: Mapping[str, Any] | None = None,
) -> CompactionOutcome | None:
    """Apply ``chosen`` with the summary ``texts`` (one per request, in order) and the
    structured ``record`` of the history summary (stored on the ``su:`` block).

    None when the summary is missing or would cost as much as what it replaces.
    """
    texts = list(texts)
    if not texts[0] and chosen.previous_summary:
        texts[0] = chosen.previous_summary
    if chosen.split_turn_id is not None and (len(texts) < 2 or not texts[1]):
        return None
    head = f"[CONVERSATION SUMMARY] {su_path(chosen.cut.turn_id)} · 2000-01-01T00:00:00Z\n"
    if counter.count(head + SPLIT_SEPARATOR.join(t for t in texts if t)) >= chosen.saved_tokens:
        return None
    outcome = apply(tl, chosen, summary=texts[0], prefix_summary=texts[-1], now=now, record=record)
    after = sum(visible_tokens(b, counter) for b in tl.blocks[tl.visible_start :])
    return replace(outcome, after_tokens=after)
