"""A model-backed summariser for compaction, and compaction with an async summariser.

``timeline/`` is pure and its ``Summarizer`` is synchronous (the offline one is
the default). A model is asynchronous, so compaction runs in two halves around
it: ``Renderer.plan_compaction`` chooses the cut, the model writes the
summaries, ``Renderer.finish_compaction`` inserts them; ``compact`` does the
three steps. A model failure falls back to the offline summary (logged), so a
context-window overflow can always be recovered from.
"""

from __future__ import annotations

import logging

from messages import GenerateRequest
from timeline import Renderer
from timeline.compaction import CompactionOutcome, needs_summary
from timeline.summary import OfflineSummarizer, Summarizer, SummaryRequest
from timeline.tokens import DEFAULT_COUNTER, TokenCounter
from timeline.view import block_text

from .errors import ModelError
from .protocol import Model, complete

log = logging.getLogger("llm.summarizer")

SUMMARY_SYSTEM = (
    "You compact the history of an agent's conversation so it can keep working with less "
    "context. Write a factual summary in plain text: what the user asked, what was decided "
    "and done, results that matter, open questions, and every logical path (ar:, fi:, so:, "
    "su:, tc:, ks:) that leads back to details. Keep internal notes verbatim. Do not invent "
    "anything. Stay under the token budget you are given."
)


class ModelSummarizer:
    """Summaries written by a model, cut to the requested budget."""

    def __init__(
        self,
        model: Model,
        *,
        fallback: Summarizer | None = None,
        counter: TokenCounter = DEFAULT_COUNTER,
        conversation_id: str = "compaction",
        max_input_chars: int = 400_000,
    ) -> None:
        self.model = model
        self.counter = counter
        self.fallback = fallback or OfflineSummarizer(counter)
        self.conversation_id = conversation_id
        self.max_input_chars = max_input_chars
        self.fallbacks = 0

    def request(self, request: SummaryRequest) -> GenerateRequest:
        """The model call for one summary request."""
        history = "\n\n".join(block_text(b) for b in request.blocks)
        if len(history) > self.max_input_chars:
            history = history[-self.max_input_chars :]
        what = "this turn so far" if request.kind == "turn_prefix" else "the conversation history"
        parts = [f"Summarise {what} in at most {request.max_tokens} tokens."]
        if request.previous_summary:
            parts.append("The summary so far (fold it in):\n" + request.previous_summary)
        parts.append("History:\n" + (history or "(nothing new)"))
        turn = request.blocks[0].turn_id if request.blocks else "summary"
        return GenerateRequest(
            conversation_id=self.conversation_id,
            turn_id=turn,
            system=SUMMARY_SYSTEM,
            blocks=[{"type": "text", "text": p} for p in parts],
            max_output_tokens=max(64, request.max_tokens * 2),
        )

    async def summarize(self, request: SummaryRequest) -> str:
        try:
            result = await complete(self.model, self.request(request))
            text = result.text.strip()
        except ModelError as exc:
            log.warning(
                "summary model %s failed (%s); using the offline summary", self.model.name, exc
            )
            text = ""
        if not text:
            self.fallbacks += 1
            return self.fallback.summarize(request)
        return self._fit(text, request.max_tokens)

    def _fit(self, text: str, budget: int) -> str:
        if self.counter.count(text) <= budget:
            return text
        low, high = 0, len(text)
        while low < high:
            mid = (low + high + 1) // 2
            if self.counter.count(text[:mid] + "…") <= budget:
                low = mid
            else:
                high = mid - 1
        return text[:low].rstrip() + "…"


async def compact(
    renderer: Renderer,
    summarizer: ModelSummarizer,
    *,
    now: float,
    system_tokens: int = 0,
    force: bool = False,
) -> CompactionOutcome | None:
    """Compact ``renderer``'s timeline with model summaries when due (or ``force``)."""
    chosen = renderer.plan_compaction(now=now, system_tokens=system_tokens, force=force)
    if chosen is None:
        return None
    budget = max(1, renderer.config.max_tokens - system_tokens)
    texts = [
        await summarizer.summarize(r) if needs_summary(r) else ""
        for r in chosen.requests(renderer.config, budget)
    ]
    return renderer.finish_compaction(chosen, texts, now=now)
