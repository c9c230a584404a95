"""Structured compaction summaries written by a model, and compaction with them.

``timeline/`` is pure and its ``Summarizer`` is synchronous (the offline digest). A
model is asynchronous, so compaction runs in two halves around it:
``Renderer.plan_compaction`` chooses the cut, the model writes the summaries,
``actline.timeline.editing.compaction.finish`` inserts them; ``compact`` does the three steps.

``ModelSummarizer.summarize`` makes one tool-free call asking for strict JSON:
stable facts with confidence, active goals, open
questions, discarded facts, a short narrative. The answer is parsed
(``actline.timeline.facts.parse_summary``), merged with the canonical facts of the tool
output in the range, repaired against the previous summary's record
(``check_integrity``) and rendered. A model error or an answer without a JSON
object falls back to the offline digest (with its own record): compaction still
goes ahead, ``fallbacks`` counts it and the outcome carries a notice for the model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from actline.messages import GenerateRequest, Usage
from actline.timeline import Renderer
from actline.timeline.blocks import TOOL_RESULT
from actline.timeline.editing.compaction import CompactionOutcome, finish, needs_summary
from actline.timeline.editing.summary import (
    OfflineSummarizer,
    Summarizer,
    SummaryRequest,
    block_facts,
    offline_record,
)
from actline.timeline.facts import (
    IntegrityReport,
    StructuredSummary,
    check_integrity,
    merge_facts,
    parse_summary,
)
from actline.timeline.tokens import DEFAULT_COUNTER, TokenCounter
from actline.timeline.view import block_text

from .protocol import Completion, Model, complete

log = logging.getLogger("actline.llm.summarizer")

SUMMARY_SYSTEM = (
    "You are a helpful assistant that summarizes an agent's conversation history "
    "efficiently. Return strict JSON only."
)
SUMMARY_PROMPT = """Summarize the conversation into strict JSON.

Return exactly one JSON object with this schema:
{{
  "stable_facts": [{{ "key": string, "value": string, "confidence": number }}],
  "active_goals": [string],
  "open_questions": [string],
  "discarded_obsolete": [string],
  "rawSummary": string
}}

Rules:
- Keep stable_facts only for facts that future turns must remember.
- Put invalidated or superseded facts in discarded_obsolete as "key: old value".
- Preserve active_goals still relevant to the user.
- Preserve unresolved questions.
- In rawSummary, say briefly what was asked, decided and done, and keep the logical
  paths (ar:, fi:, so:, su:, tc:, ks:) that lead back to details.
- Do not include prose outside JSON. Stay under {budget} tokens.
- This summarizes {what}.

Previous summary text:
{previous_text}

Previous structured summary:
{previous_record}

Conversation:
{conversation}

Canonical facts extracted from tool outputs:
{canonical}"""
OMITTED = "[Earlier conversation history omitted for brevity]"
MESSAGE_CHARS = 2000

Call = Callable[[GenerateRequest], Awaitable[Completion]]


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """One summary: its text, its structured record, and how it was written."""

    text: str
    record: StructuredSummary
    integrity: IntegrityReport
    usage: Usage = field(default_factory=Usage)
    fallback: str = ""
    """Why the offline digest was used instead of the model's summary (empty: it was not)."""

    def stored(self) -> dict[str, Any]:
        """The record as the ``su:`` block keeps it."""
        writer = "fallback" if self.fallback else "model"
        out = {**self.record.to_dict(), "integrity": self.integrity.to_dict(), "writer": writer}
        if self.fallback:
            out["fallback"] = self.fallback
        return out


class ModelSummarizer:
    """Structured summaries from a model; the offline digest when the model fails.

    ``call`` runs one model call to the end (default: ``complete(model, request)``; a
    node passes its streamer's non-streaming ``complete``). ``usage`` sums every call.
    """

    def __init__(
        self,
        model: Model,
        *,
        call: Call | None = None,
        fallback: Summarizer | None = None,
        counter: TokenCounter = DEFAULT_COUNTER,
        conversation_id: str = "compaction",
        prompt_max_tokens: int = 7000,
    ) -> None:
        self.model = model
        self.call: Call = call or (lambda request: complete(model, request))
        self.counter = counter
        self.fallback = fallback or OfflineSummarizer(counter)
        self.conversation_id = conversation_id
        self.prompt_max_tokens = prompt_max_tokens
        self.fallbacks = 0
        self.usage = Usage()

    def conversation(self, blocks: Sequence[Any]) -> str:
        """The range as ``AUTHOR (type path): text`` lines, newest kept first within the
        prompt budget (each cut to 2,000 characters)."""
        room = max(200, self.prompt_max_tokens - 500)
        texts: list[str] = []
        used = 0
        for b in reversed(blocks):
            content = block_text(b)
            if len(content) > MESSAGE_CHARS:
                content = content[:MESSAGE_CHARS] + "... [TRUNCATED]"
            line = f"{(b.author or 'system').upper()} ({b.type} {b.path}): {content}"
            cost = self.counter.count(line)
            if used + cost > room:
                texts.append(OMITTED)
                break
            texts.append(line)
            used += cost
        return "\n\n".join(reversed(texts)) or "(nothing new)"

    def request(
        self, request: SummaryRequest, previous: StructuredSummary | None
    ) -> GenerateRequest:
        """The tool-free model call for one summary request."""
        canonical = block_facts([b for b in request.blocks if b.type == TOOL_RESULT])[0]
        what = "this turn so far" if request.kind == "turn_prefix" else "the conversation history"
        prompt = SUMMARY_PROMPT.format(
            budget=request.max_tokens,
            what=what,
            previous_text=request.previous_summary or "(none)",
            previous_record=json.dumps(previous.to_dict()) if previous is not None else "(none)",
            conversation=self.conversation(request.blocks),
            canonical="\n".join(f"- {f.key}: {f.value}" for f in canonical) or "(none)",
        )
        turn = request.blocks[0].turn_id if request.blocks else "summary"
        return GenerateRequest(
            conversation_id=self.conversation_id,
            turn_id=turn,
            model=self.model.name,
            system=SUMMARY_SYSTEM,
            blocks=[{"type": "text", "text": prompt}],
            max_output_tokens=max(256, request.max_tokens * 2),
        )

    async def summarize(
        self, request: SummaryRequest, previous: StructuredSummary | None = None
    ) -> SummaryOutcome:
        """One structured summary of ``request``, checked against ``previous``."""
        usage = Usage(model=self.model.name)
        try:
            done = await self.call(self.request(request, previous))
        except Exception as exc:  # any failure: the compaction must still happen
            log.warning("summary model %s failed (%s); offline digest used", self.model.name, exc)
            return self._fallback(request, previous, f"the model call failed: {exc}", usage)
        usage = done.usage
        self.usage = self.usage + usage
        parsed = parse_summary(done.text)
        if parsed is None:
            shown = " ".join(done.text.split())[:120]
            reason = f"the model's summary was not a JSON object: {shown!r}"
            log.warning("summary model %s: %s", self.model.name, reason)
            return self._fallback(request, previous, reason, usage)
        last = request.blocks[-1] if request.blocks else None
        where = {"turn_id": last.turn_id, "ts": last.ts} if last is not None else {}
        stamped = tuple(replace(f, **where) for f in parsed.stable_facts)  # type: ignore[arg-type]
        parsed = replace(parsed, stable_facts=stamped)
        facts, _ = block_facts(request.blocks)
        merged = merge_facts(parsed, [f for f in facts if f.source == "canonical_tool_output"])
        record, report = check_integrity(merged, previous)
        return SummaryOutcome(self._fit(record, request.max_tokens), record, report, usage)

    def _fallback(
        self,
        request: SummaryRequest,
        previous: StructuredSummary | None,
        reason: str,
        usage: Usage,
    ) -> SummaryOutcome:
        self.fallbacks += 1
        record, report = offline_record(request, previous)
        text = self.fallback.summarize(request)
        return SummaryOutcome(text, record, report, usage, fallback=reason)

    def _fit(self, record: StructuredSummary, budget: int) -> str:
        """The rendered summary within ``budget``: the narrative is cut first, then the
        trailing lines (the stable facts come first and stay longest)."""
        text = record.render()
        if self.counter.count(text) <= budget:
            return text
        lines = text.split("\n")
        while len(lines) > 2 and self.counter.count("\n".join([*lines, "…"])) > budget:
            lines.pop()
        return "\n".join([*lines, "…"])


@dataclass(frozen=True, slots=True)
class Compacted:
    """A compaction with model summaries: the outcome, the summaries' usage, notices."""

    outcome: CompactionOutcome | None
    usage: Usage
    summaries: tuple[SummaryOutcome, ...]

    @property
    def notices(self) -> list[str]:
        """What the model should hear (a fallback to the offline digest)."""
        return [
            f"summary_fallback: the compaction summary is the offline digest ({s.fallback})"
            for s in self.summaries
            if s.fallback
        ]


async def compact(
    renderer: Renderer,
    summarizer: ModelSummarizer,
    *,
    now: float,
    system_tokens: int = 0,
    force: bool = False,
    boundary: bool | None = None,
) -> Compacted | None:
    """Compact ``renderer``'s timeline with model summaries when due (or ``force``;
    ``boundary``: the round is its turn's first, ``Renderer.plan_compaction``).

    None when no compaction is due or possible; otherwise a ``Compacted`` whose
    ``outcome`` is None when the summary would not have made the context smaller.
    """
    chosen = renderer.plan_compaction(
        now=now, system_tokens=system_tokens, force=force, boundary=boundary
    )
    if chosen is None:
        return None
    budget = max(1, renderer.config.max_tokens - system_tokens)
    outcomes: list[SummaryOutcome] = []
    texts: list[str] = []
    usage = Usage()
    for i, request in enumerate(chosen.requests(renderer.config, budget)):
        if not needs_summary(request):
            texts.append("")
            continue
        done = await summarizer.summarize(request, chosen.previous_record if i == 0 else None)
        outcomes.append(done)
        texts.append(done.text)
        usage = usage + done.usage
    record = None
    if outcomes:
        first = outcomes[0]
        merged = merge_facts(first.record, [f for o in outcomes[1:] for f in o.record.stable_facts])
        record = replace(first, record=merged).stored()
    outcome = finish(
        renderer.timeline, chosen, texts, now=now, counter=renderer.counter, record=record
    )
    renderer.sync()
    if outcome is not None:
        outcome = replace(outcome, after_tokens=renderer.stable_tokens)
    return Compacted(outcome, usage, tuple(outcomes))
