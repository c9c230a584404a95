"""A conversation's memsearch index, its rows embedded in the background as they are written.

Rows are embedded when they are committed, not when they are searched: each commit's new
rows go through the model on a worker thread in the background (newest first, batches of
``EMBED_STEP``) and their vectors to the store's embedding cache. The index itself
(``tools.memindex.MemIndex``) is loaded only by the conversation's first search: its rows
from the store, their vectors from the cache (a lookup, never the model), so a node holding
thousands of conversations that nobody searches holds no index for them. Once loaded, it
takes each commit's rows and embeds them in the background as before. A search never embeds
rows itself (``search_embed_rows = 0``): it waits for the background when a step's worth of
rows is pending (the last commits), else it ranks the rows still pending by BM25 alone, and
``react.memsearch`` says so in a notice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Final

from storage import Store
from tools.embedders import DEFAULT_EMBED_MODEL, default_embedder, loaded_embedder
from tools.embeddings import Embedder
from tools.memindex import MemIndex, cache_vectors, row_texts

from .services import StoreVectors

__all__ = ["EMBED_STEP", "SEARCH_WAIT_ROWS", "ConversationMemory"]

log = logging.getLogger(__name__)

EMBED_STEP: Final = 64
"""Rows per background embedding step (one worker-thread call)."""
SEARCH_WAIT_ROWS: Final = EMBED_STEP
"""A search waits for the background when at most this many rows are pending."""

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class ConversationMemory:
    """The memsearch index of conversation ``cid`` in ``store``, hybrid when ``embeddings``
    (and the model loads); ``spawn`` starts the background task (the actor's ``spawn``, so
    that stopping the actor cancels it)."""

    def __init__(
        self,
        cid: str,
        store: Store,
        *,
        embeddings: bool,
        spawn: Spawn,
        embed_model: str = DEFAULT_EMBED_MODEL,
        model_cache: Path | None = None,
    ) -> None:
        self.cid = cid
        self.store = store
        self.embeddings = embeddings
        self.embed_model = embed_model
        """Which model (``tools.embeddings.EMBED_MODELS``); ``model_cache`` is where a model
        shipped as a split zip is unpacked (``default_model_cache()`` when None)."""
        self.model_cache = model_cache
        self._spawn = spawn
        self._index: MemIndex | None = None
        self._loading = asyncio.Lock()
        self._load_started = False
        self._early: list[dict[str, Any]] = []
        """Rows written while the index loads (added after the stored ones)."""
        self._unembedded: list[dict[str, Any]] = []
        """Rows written while no index is loaded, waiting for their vectors to be cached."""
        self._embedding: asyncio.Task[None] | None = None
        self._vectors = StoreVectors(store)
        self.embedded_in_background = 0

    @property
    def loaded(self) -> MemIndex | None:
        return self._index

    async def index(self) -> MemIndex:
        """The index, loaded from the stored rows on first use (the embedder too)."""
        async with self._loading:
            if self._index is None:
                self._load_started = True
                index = await self._new_index()
                index.add(await asyncio.to_thread(self.store.index_rows, self.cid))
                index.add(self._early)
                self._early.clear()
                found, vectors = await asyncio.to_thread(index.cached, index.pending_batch())
                index.install(found, vectors)
                self._index = index
            return self._index

    async def _new_index(self) -> MemIndex:
        index = MemIndex(await self._embedder(), self._vectors)
        index.search_embed_rows = 0  # the background task embeds; a search never waits
        return index

    async def _embedder(self) -> Embedder | None:
        """The process-wide model (loaded on a worker thread the first time), or None."""
        if not self.embeddings:
            return None
        loaded = loaded_embedder(self.embed_model)
        if loaded is not None:
            return loaded
        return await asyncio.to_thread(default_embedder, self.embed_model, self.model_cache)

    def written(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rows of a commit: indexed now (or once loaded), embedded in the background."""
        if self._index is not None:
            self._index.add(rows)
        elif self._load_started:
            self._early.extend(rows)
        elif self.embeddings:
            self._unembedded.extend(rows)  # to the store's cache; no index is held
        else:
            return
        self.kick()

    def kick(self) -> None:
        """Start the background loading and embedding unless it runs already."""
        if self._embedding is None or self._embedding.done():
            self._embedding = self._spawn(self._embed(), f"memsearch:{self.cid}")

    async def _embed(self) -> None:
        while self._index is None and not self._load_started and self._unembedded:
            rows, self._unembedded = self._unembedded, []
            embedder = await self._embedder()
            if embedder is None:
                break
            texts = row_texts(rows)  # no index: the vectors only go to the store's cache
            for end in range(len(texts), 0, -EMBED_STEP):  # newest first
                step = texts[max(0, end - EMBED_STEP) : end]
                await asyncio.to_thread(cache_vectors, embedder, self._vectors, step)
                self.embedded_in_background += len(step)
        if self._index is None and not self._load_started:
            return
        self._unembedded.clear()
        index = await self.index()
        while index.pending():
            batch = index.pending_batch(EMBED_STEP, newest=True)  # recent turns first
            vectors = await asyncio.to_thread(index.compute, batch)
            self.embedded_in_background += index.install(batch, vectors)

    async def idle(self) -> None:
        """Wait for the background embedding to finish (tests, benchmarks)."""
        task = self._embedding
        if task is not None:
            await asyncio.wait([task])

    async def for_search(self) -> MemIndex:
        """The index for a ``react.memsearch`` call: loaded, its background embedding on.

        With at most ``SEARCH_WAIT_ROWS`` rows pending (the rows of the last commits, one
        background step) the search waits for them; with more (a conversation loaded cold)
        it does not, and those rows rank by BM25 alone this time."""
        index = await self.index()
        if index.pending():
            self.kick()
            if index.pending() <= SEARCH_WAIT_ROWS:
                await self.idle()
        return index
