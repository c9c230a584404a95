"""A conversation's memsearch index, its rows embedded in the background as they are written.

Rows are embedded when they are committed, not when they are searched: each commit's new
rows go through the model on a worker thread in the background (newest first, batches of
``EMBED_STEP``) and their vectors to the store's embedding cache. While a conversation
holds no index, its rows join the node's one backlog (``BackgroundEmbedding``): every
conversation's commits share its steps, one worker-thread step at a time, and a text
queued by several commits is looked up once. The index itself
(``actline.tools.search.memindex.MemIndex``) is loaded only by the conversation's first search: its
rows from the store, their vectors from the cache (a lookup, never the model), so a node holding
thousands of conversations that nobody searches holds no index for them. Once loaded, it
takes each commit's rows and embeds them in the background as before. A search never embeds
rows itself (``search_embed_rows = 0``): it waits for the background when a step's worth of
rows is pending (the last commits), else it ranks the rows still pending by BM25 alone, and
``react.memsearch`` says so in a notice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from actline.actors.configuration.settings import NodeSettings
from actline.storage import Store
from actline.tools.embeddings.embedders import (
    DEFAULT_EMBED_MODEL,
    default_embedder,
    loaded_embedder,
)
from actline.tools.embeddings.minilm import Embedder
from actline.tools.search.memindex import MemIndex, row_texts
from actline.tools.search.vectors import cache_vectors

__all__ = ["EMBED_STEP", "SEARCH_WAIT_ROWS", "BackgroundEmbedding", "ConversationMemory"]

log = logging.getLogger(__name__)

EMBED_STEP: Final = 64
"""Rows per background embedding step (one worker-thread call)."""
SEARCH_WAIT_ROWS: Final = EMBED_STEP
"""A search waits for the background when at most this many rows are pending."""

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class StoreVectors:
    """The store's embedding cache as a ``actline.tools.search.memindex.VectorCache``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        return self.store.get_vectors(keys)

    def put_many(self, items: Mapping[str, bytes]) -> None:
        self.store.put_vectors(items)


async def _load_embedder(embed_model: str, model_cache: Path | None) -> Embedder | None:
    """The process-wide model (loaded on a worker thread the first time), or None."""
    loaded = loaded_embedder(embed_model)
    if loaded is not None:
        return loaded
    return await asyncio.to_thread(default_embedder, embed_model, model_cache)


class BackgroundEmbedding:
    """A node's backlog of committed texts whose conversation holds no index: their vectors
    go to the store's cache, newest first, ``EMBED_STEP`` texts per worker-thread step and
    one step at a time, whichever conversations they came from. A text queued twice is
    embedded (or found in the cache) once, and counts for each conversation that queued it
    (``ConversationMemory.embedded_in_background``)."""

    def __init__(
        self,
        store: Store,
        *,
        embed_model: str = DEFAULT_EMBED_MODEL,
        model_cache: Path | None = None,
    ) -> None:
        self.embed_model = embed_model
        self.model_cache = model_cache
        self._vectors = StoreVectors(store)
        self._texts: dict[str, list[ConversationMemory]] = {}
        """Queued text -> the conversations that queued it (insertion order: newest last)."""
        self._worker: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def of(cls, store: Store, settings: NodeSettings) -> BackgroundEmbedding:
        """The backlog of a node with ``settings`` (its model, its home's model cache)."""
        return cls(store, embed_model=settings.embed_model, model_cache=settings.home / "models")

    def __len__(self) -> int:
        return len(self._texts)

    def add(self, owner: ConversationMemory, texts: Sequence[str]) -> None:
        if self._closed:
            return
        for text in texts:
            self._texts.setdefault(text, []).append(owner)
        if self._texts and (self._worker is None or self._worker.done()):
            self._worker = asyncio.get_running_loop().create_task(
                self._run(), name="memsearch:background"
            )

    async def _run(self) -> None:
        try:
            embedder = await _load_embedder(self.embed_model, self.model_cache)
        except Exception as exc:  # a broken model cache, say: searches say keywords only
            log.warning(
                "memsearch: the embedding model %s did not load (%s: %s); %d rows stay "
                "searchable by keywords", self.embed_model, type(exc).__name__, exc, len(self),
            )  # fmt: skip
            embedder = None
        if embedder is None:
            self._texts.clear()
            return
        while self._texts and not self._closed:
            count = min(EMBED_STEP, len(self._texts))
            step = [self._texts.popitem() for _ in range(count)]  # the newest
            try:
                await asyncio.to_thread(
                    cache_vectors, embedder, self._vectors, [t for t, _ in step]
                )
            except Exception as exc:  # a full store, say: the rows stay searchable
                log.warning(
                    "memsearch: %d rows not embedded in the background (%s: %s); a search "
                    "ranks them by keywords until it embeds them",
                    count, type(exc).__name__, exc,
                )  # fmt: skip
                continue
            for _, owners in step:
                for owner in owners:
                    owner.embedded_in_background += 1

    async def idle(self) -> None:
        """Wait until the backlog is empty (tests, benchmarks)."""
        while self._worker is not None and not self._worker.done():
            await asyncio.wait([self._worker])

    async def aclose(self) -> None:
        """Drop what is queued and wait for the step in flight, which writes to the store
        (a node stopping, before its store closes)."""
        self._closed = True
        self._texts.clear()
        await self.idle()


class ConversationMemory:
    """The memsearch index of conversation ``cid`` in ``store``, hybrid when ``embeddings``
    (and the model loads); ``spawn`` starts the background job (the actor's ``spawn``, so
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
        background: BackgroundEmbedding | None = None,
    ) -> None:
        self.cid = cid
        self.store = store
        self.embeddings = embeddings
        self.embed_model = embed_model
        """Which model (``actline.tools.embeddings.minilm.EMBED_MODELS``); ``model_cache`` is where
        a model shipped as a split zip is unpacked (``default_model_cache()`` when None)."""
        self.model_cache = model_cache
        self._spawn = spawn
        self._index: MemIndex | None = None
        self._loading = asyncio.Lock()
        self._load_started = False
        self._early: list[dict[str, Any]] = []
        """Rows written while the index loads (added after the stored ones)."""
        if background is None:
            background = BackgroundEmbedding(
                store, embed_model=embed_model, model_cache=model_cache
            )
        self.background = background
        """Where rows written while no index is loaded wait for their vectors to be cached
        (the node's backlog; a backlog of its own when none is given)."""
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
        index.search_embed_rows = 0  # the background job embeds; a search never waits
        return index

    async def _embedder(self) -> Embedder | None:
        if not self.embeddings:
            return None
        return await _load_embedder(self.embed_model, self.model_cache)

    def written(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rows of a commit: indexed now (or once loaded), embedded in the background."""
        if self._index is not None:
            self._index.add(rows)
        elif self._load_started:
            self._early.extend(rows)
        else:
            if self.embeddings:  # to the store's cache; no index is held
                self.background.add(self, row_texts(rows))
            return
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
        """Wait for the background embedding to finish (tests, benchmarks): this
        conversation's index and the backlog its rows joined."""
        embedding = self._embedding
        if embedding is not None:
            await asyncio.wait([embedding])
        await self.background.idle()

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
