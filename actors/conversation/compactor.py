"""Model-written compaction summaries and memory facts for one conversation.

``Compactor`` sits beside the ``ConversationActor``'s renderer:

- ``before_render``: when the round's model is a real model (``llm.writes_summaries``:
  not the offline ``extractive``/``replay`` ones), compaction due by size or forced
  (``Render.force_compaction``: after a context-window error, or a watchdog) runs
  here, asynchronously, with ``llm.ModelSummarizer`` (a tool-free call through the
  streamer's non-streaming ``complete``: nothing reaches the clients). Its usage is
  returned for the turn's usage. A failed or unparsable summary falls back to the
  offline digest with a notice the model sees (``fallbacks`` counts them). Offline
  models keep compacting inside ``Renderer.render`` with the offline digest.
- Memory facts (``actline.timeline.facts.FactBook``): the book in effect is the timeline's
  (scope ``conversation``, persisted as its ``fact/`` rows) or the turn's user's
  (scope ``user``, rows in the store's ``ufacts``, written by ``flush``). The stable
  facts of every new ``su:`` record are upserted into it (``harvest``); ``react.write``
  ``[K]`` notes go in through ``ReactContext.facts``. ``announce`` puts the most
  relevant few, against the turn's user prompt, in ANNOUNCE's hotset.

``TurnSettings.memory_scope`` and ``memory_hotset`` (the turn's profile) choose the scope and
the count.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from actline.actors.configuration.turn_settings import TurnSettings
from actline.actors.services.shared import Services
from actline.actors.turn import remote
from actline.llm import ModelConfigError, ModelSummarizer, compact, writes_summaries
from actline.llm.config import OFFLINE_MODELS, CacheMode, model_spec
from actline.llm.pricing import CACHE_READ, CACHE_WRITE_5M
from actline.messages import TurnRequest, Usage
from actline.timeline import Renderer, Timeline
from actline.timeline.editing.cost import Prices
from actline.timeline.editing.summary import record_of
from actline.timeline.facts import FactBook
from actline.timeline.rendering.announce import AnnounceContext

log = logging.getLogger(__name__)


CACHE_WEIGHTS: Mapping[CacheMode, tuple[float, float]] = {
    "anthropic": (CACHE_READ, CACHE_WRITE_5M),
    "automatic": (CACHE_READ, 1.0),
    "none": (1.0, 1.0),
}
"""How a server caches -> what a cached token read and a token written cost, in input
prices: marks (reads at 0.1x, 5-minute writes at 1.25x, the lifetime the timeline's marks
ask for); a server that caches prefixes itself (a read is almost free, a write costs what
any input token does); no cache (every token is read in full, so an edit never costs a
rewrite and saves every token it removes)."""


def prices_of(model_name: str) -> Prices:
    """The cost model's prices for ``model_name``: its cache mode's weights and its price
    table's output ratio. A model priced at nothing (a local server configured without
    prices) weighs output as the default table does."""
    spec = model_spec(model_name)
    read, write = CACHE_WEIGHTS[spec.cache]
    if spec.input_price <= 0:
        return Prices(read=read, write=write)
    return Prices(read=read, write=write, output=spec.output_price / spec.input_price)


class Compactor:
    """Compaction with model summaries, and the memory facts, of one conversation."""

    def __init__(
        self, services: Services, timeline: Timeline, renderer: Renderer, system_tokens: int
    ) -> None:
        self.services = services
        self.tl = timeline
        self.renderer = renderer
        self.system_tokens = system_tokens
        self.fallbacks = 0
        """Summaries that fell back to the offline digest (model failure or bad output)."""
        self.compactions = 0
        """Compactions written with model summaries."""
        self.scope = "conversation"
        self.hotset_size = 5
        self.query = ""
        self.user_id = ""
        self._user_book: FactBook | None = None
        self._harvested: str | None = None
        self._sources: tuple[tuple[int, int], list[dict[str, Any]]] | None = None

    # -- memory facts ---------------------------------------------------------------------------
    @property
    def book(self) -> FactBook:
        """The fact book in effect: the user's (scope ``user``), else the timeline's."""
        return self._user_book if self._user_book is not None else self.tl.facts

    async def begin_turn(self, request: TurnRequest, turn: TurnSettings) -> None:
        """Take the turn's memory settings; load the user's facts under scope ``user``."""
        self.scope, self.hotset_size = turn.memory_scope, turn.memory_hotset
        self.query, self.user_id = request.text, request.user_id
        self._user_book = None
        if self.scope == "user":
            if not request.user_id:
                self.tl.notices.current.append(
                    "memory_scope: scope 'user' needs the turn's user_id; this turn's memory "
                    "facts stay in the conversation"
                )
            else:
                rows = await asyncio.to_thread(self.services.store.user_facts, request.user_id)
                self._user_book = FactBook.from_rows(rows)
        self.harvest()

    def harvest(self) -> int:
        """Upsert the stable facts of the latest ``su:`` record (once per summary)."""
        summary = self.tl.latest_summary
        if summary is None or summary.id == self._harvested:
            return 0
        self._harvested = summary.id
        record = record_of(summary)
        if record is None:
            return 0
        book, cid = self.book, self.tl.conversation_id
        for fact in record.stable_facts:
            stamped = replace(
                fact,
                turn_id=fact.turn_id or summary.turn_id,
                path=fact.path or summary.path,
                ts=fact.ts or summary.ts,
            )
            book.upsert(stamped, now=self.services.clock(), conversation_id=cid)
        return len(record.stable_facts)

    async def flush(self) -> None:
        """Write the user's changed fact rows (scope ``user``; the timeline's go with it)."""
        book = self._user_book
        if book is None or not book.dirty:
            return
        rows = book.take_dirty()
        try:
            await asyncio.to_thread(self.services.store.put_user_facts, self.user_id, rows)
        except Exception as exc:  # kept dirty: the next flush writes them
            book.mark_dirty(rows)
            log.exception("the memory facts of user %r could not be stored", self.user_id)
            self.tl.notices.once.append(f"memory_facts: not stored yet ({type(exc).__name__})")

    def announce(self, announce: AnnounceContext) -> AnnounceContext:
        """``announce`` with the hotset: the facts most relevant to the user's prompt."""
        self.harvest()
        lines = self.book.hotset(self.query, self.hotset_size)
        return replace(announce, hotset=[*announce.hotset, *lines]) if lines else announce

    # -- compaction ------------------------------------------------------------------------------
    async def before_render(
        self, model_name: str, *, force: bool, boundary: bool | None = None
    ) -> tuple[Usage | None, bool]:
        """Compact with model summaries when due (or ``force``) and the model is real.

        ``boundary``: the round is its turn's first (the context policy's cheap moment).
        Returns the summaries' usage (None: no model call) and whether a forced
        compaction was handled here (the render must not compact again). Either way the
        renderer's context policy is priced by the model's price table first.
        """
        self.harvest()  # a summary the last render wrote offline
        await self.flush()
        self.renderer.policy.prices = prices_of(model_name)
        self.renderer.policy.summaries_cost_a_call = False
        streamer = self.services.streamer
        try:
            model = streamer.models(model_name) if streamer is not None else None
        except ModelConfigError:  # not served here: the round's model call fails with why
            return None, False
        if model is None:
            named = model_name not in OFFLINE_MODELS and model_spec(model_name).known
            if named and force:
                self.tl.notices.once.append(
                    "summary_offline: no streamer on this node to write the compaction "
                    "summary; the offline digest is used"
                )
            return None, False
        if not writes_summaries(model):
            return None, False
        self.renderer.policy.summaries_cost_a_call = True
        assert streamer is not None
        services = self.services
        summarizer = ModelSummarizer(
            model,
            call=lambda request: remote.complete(
                services, request.model_copy(update={"model": model_name})
            ),
            counter=self.renderer.counter,
            conversation_id=self.tl.conversation_id,
        )
        try:
            done = await compact(
                self.renderer,
                summarizer,
                now=self.services.clock(),
                system_tokens=self.system_tokens,
                force=force,
                boundary=boundary,
            )
        except Exception as exc:  # the render still compacts, with the offline digest
            log.exception("model compaction of %s failed", self.tl.conversation_id)
            self.fallbacks += 1
            self.tl.notices.once.append(
                f"summary_fallback: the model compaction failed ({type(exc).__name__}); "
                "the offline digest is used"
            )
            return None, False
        if done is None:
            return None, False
        self.fallbacks += summarizer.fallbacks
        self.tl.notices.once.extend(done.notices)
        if done.outcome is not None:
            self.compactions += 1
            log.info(
                "conversation %s compacted with model summaries: %d -> %d tokens%s",
                self.tl.conversation_id,
                done.outcome.before_tokens,
                done.outcome.after_tokens,
                f" ({summarizer.fallbacks} fallback)" if summarizer.fallbacks else "",
            )
            self.harvest()
            await self.flush()
        return done.usage, True

    def citable(self) -> list[dict[str, Any]]:
        """The pool as the streamer resolves citations against it (rebuilt when changed)."""
        pool = self.tl.sources
        key = (id(pool), pool.revision)
        if self._sources is None or self._sources[0] != key:
            rows = [{"sid": r.sid, "title": r.title, "url": r.url} for r in pool.rows()]
            self._sources = (key, rows)
        return self._sources[1]
