"""A conversation's memsearch index, kept current and embedded in the background.

The index (``tools.memindex.MemIndex``) is loaded from the store's rows at the first commit
of the actor's life (or the first search, whichever comes first) and gets each commit's new
rows. Rows without a vector are embedded by one background task per conversation: batches of
``EMBED_STEP`` rows, the cache lookup and the model on a worker thread (``MemIndex.compute``
touches no index state), the vectors installed on the event loop. The vectors go to the
store's embedding cache, so a conversation loaded again later finds them there and embeds
nothing. The newest rows go first (recent turns are the likeliest to be asked about). A
search never embeds rows itself (``search_embed_rows = 0``): it waits for the background when
a step's worth of rows is pending (the last commits), else it ranks the rows still pending
by BM25 alone, and ``react.memsearch`` says so in a notice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final

from storage import Store
from tools.embeddings import default_embedder
from tools.memindex import MemIndex

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

    def __init__(self, cid: str, store: Store, *, embeddings: bool, spawn: Spawn) -> None:
        self.cid = cid
        self.store = store
        self.embeddings = embeddings
        self._spawn = spawn
        self._index: MemIndex | None = None
        self._loading = asyncio.Lock()
        self._early: list[dict[str, Any]] = []
        """Rows written while the index was not loaded yet (added after the stored ones)."""
        self._embedding: asyncio.Task[None] | None = None
        self.embedded_in_background = 0

    @property
    def loaded(self) -> MemIndex | None:
        return self._index

    async def index(self) -> MemIndex:
        """The index, loaded from the stored rows on first use (the embedder too)."""
        async with self._loading:
            if self._index is None:
                embedder = None
                if self.embeddings:
                    embedder = await asyncio.to_thread(default_embedder)
                index = MemIndex(embedder, StoreVectors(self.store))
                index.search_embed_rows = 0  # the background task embeds; a search never waits
                index.add(await asyncio.to_thread(self.store.index_rows, self.cid))
                index.add(self._early)
                self._early.clear()
                self._index = index
            return self._index

    def written(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rows of a commit: indexed now (or once loaded), embedded in the background."""
        if self._index is not None:
            self._index.add(rows)
        else:
            self._early.extend(rows)
        self.kick()

    def kick(self) -> None:
        """Start the background loading and embedding unless it runs already."""
        if self._embedding is None or self._embedding.done():
            self._embedding = self._spawn(self._embed(), f"memsearch:{self.cid}")

    async def _embed(self) -> None:
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
