"""No cold start: a loaded conversation is embedded in the background, not in its first search.

A 100-turn conversation (the first half of ``tests.tools.memfixture``) is stored without
vectors in a real LMDB store. Its ``ConversationMemory`` (``actline.actors.services.memory``) with
the real model: the first ``react.memsearch`` embeds only its query and says in a notice that the
rows not embedded yet are ranked by keywords for now; the background task embeds the rest into the
store's cache, so a reload of the conversation runs no text through the model. Rows written
by a commit are embedded in the background too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from actline.actors.services import memory as memory_module
from actline.actors.services.memory import EMBED_STEP, BackgroundEmbedding, ConversationMemory
from actline.storage import Store
from actline.timeline import Block, Timeline
from actline.timeline.blocks import COMPLETION, USER_PROMPT
from actline.timeline.paths import ar_path
from actline.tools.react.core import ReactContext, ReactTools
from actline.tools.react.memsearch import index_rows
from actline.tools.search.vectors import vector_key
from tests.tools.search import memfixture
from tests.waiting import until

TURNS = 100
ROWS = 2 * TURNS


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "db") as opened:
        yield opened


def _spawn(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    return asyncio.create_task(coro, name=name)


def _stored(store: Store, turns: int = memfixture.TURNS) -> Timeline:
    """The fixture conversation (its first ``turns``) as blocks, persisted with its memsearch
    rows (no vectors)."""
    tl = Timeline("c1")
    kinds = {"user": (USER_PROMPT, "user.prompt"), "assistant": (COMPLETION, "completion")}
    for row in list(memfixture.conversation())[: 2 * turns]:
        tid = row["turn_id"]
        if row["role"] == "user":
            tl.begin_turn(tid, row["ts"])
        block_type, name = kinds[row["role"]]
        tl.append(Block.new(block_type, tid, row["ts"], path=ar_path(tid, name), text=row["text"]))
    store.persist(tl, index=index_rows)
    return tl


def _commit_a_turn(store: Store, tl: Timeline, memory: ConversationMemory) -> str:
    """A new turn's prompt committed and handed to ``memory`` (as a conversation's commit
    does); returns its text."""
    tl.begin_turn("m200", tl.blocks[-1].ts + 60)
    note = "Our tax adviser is Greta Lind, reachable on Tuesdays only."
    ts = tl.blocks[-1].ts + 1
    block = tl.append(Block.new(USER_PROMPT, "m200", ts, path="ar:m200.user.prompt", text=note))
    store.persist(tl, index=index_rows)
    memory.written(index_rows([block]))
    return note


def _rows(*texts: str) -> list[dict[str, Any]]:
    """The memsearch rows of one user prompt per text, as a commit hands them over."""
    blocks = [
        Block.new(USER_PROMPT, f"u{n}", 1.7e9 + n, path=ar_path(f"u{n}", "user.prompt"), text=t)
        for n, t in enumerate(texts)
    ]
    return index_rows(blocks)


def _memsearch(tl: Timeline, memory: ConversationMemory, query: str) -> Any:
    index = memory.loaded
    assert index is not None
    ctx = ReactContext(tl, None, "now", "k1", tl.blocks[-1].ts + 60, memindex=index)
    return ReactTools().run("react.memsearch", {"query": query, "top_k": 3}, ctx)


async def test_the_first_search_embeds_a_few_rows_and_the_rest_is_embedded_behind(
    store: Store,
) -> None:
    tl = _stored(store, TURNS)
    memory = ConversationMemory("c1", store, embeddings=True, spawn=_spawn)
    index = await memory.for_search()  # loads the stored rows and starts the background
    assert len(index) == ROWS
    pending = index.pending()
    started = time.perf_counter()
    first = _memsearch(tl, memory, "what caused OPS-2291?")
    took = time.perf_counter() - started
    print(f"\nfirst search: {took * 1000:.0f} ms with {pending} of {ROWS} rows not embedded yet")
    assert index.pending() == pending  # the search embedded no row (only its query)
    assert first.ok and first.result["ranking"] == "hybrid"
    assert first.result["hits"][0]["turn_id"] == memfixture.turn_id(17)  # BM25 + exact id
    if index.pending():  # the background had not finished: the model is told
        assert [n.code for n in first.notices] == ["memsearch_partly_embedded"]
        assert "ranked by keywords only" in first.result["ranking_note"]

    await memory.idle()
    assert index.pending() == 0 and memory.embedded_in_background > 0
    texts = {r["text"] for r in list(memfixture.conversation())[:ROWS]}
    keys = [vector_key("all-MiniLM-L6-v2", t) for t in texts]
    assert len(store.get_vectors(keys)) == len(texts)  # persisted in the store's cache
    later = _memsearch(tl, memory, "what caused OPS-2291?")
    assert later.notices == [] and later.result["hits"][0]["turn_id"] == "m017"

    reloaded = ConversationMemory("c1", store, embeddings=True, spawn=_spawn)
    again = await reloaded.for_search()
    await reloaded.idle()
    assert again.pending() == 0 and again.model_texts == 0  # all from the cache


async def test_rows_of_a_commit_are_embedded_in_the_background(store: Store) -> None:
    tl = _stored(store, turns=5)
    memory = ConversationMemory("c1", store, embeddings=True, spawn=_spawn)
    await memory.for_search()
    await memory.idle()
    index = memory.loaded
    assert index is not None and index.pending() == 0
    _commit_a_turn(store, tl, memory)
    assert index.pending() == 1
    await memory.idle()
    assert index.pending() == 0
    hits = index.search("who helps us with taxes?", roles={"user"}, top_k=3)
    assert hits[0].turn_id == "m200" and hits[0].dense is not None


async def test_without_embeddings_the_search_says_it_ranked_by_keywords(store: Store) -> None:
    tl = _stored(store, turns=20)
    memory = ConversationMemory("c1", store, embeddings=False, spawn=_spawn)
    await memory.for_search()
    out = _memsearch(tl, memory, "what caused OPS-2291?")
    assert out.result["ranking"] == "bm25"
    assert [n.code for n in out.notices] == ["memsearch_keywords_only"]
    assert out.result["hits"][0]["turn_id"] == "m017"


async def test_a_conversation_nobody_searches_holds_no_index_but_its_rows_are_embedded(
    store: Store,
) -> None:
    """Thousands of conversations (turns parked on agents) must not each hold an index: a
    commit's rows are embedded into the store's cache without one, and the first search
    takes their vectors from there (a lookup, not the model)."""
    tl = _stored(store, turns=3)
    memory = ConversationMemory("c1", store, embeddings=True, spawn=_spawn)
    note = _commit_a_turn(store, tl, memory)
    await memory.idle()
    assert memory.loaded is None  # no index held for a conversation nobody searched
    assert memory.embedded_in_background == 1
    assert store.get_vectors([vector_key("all-MiniLM-L6-v2", note)])  # in the store's cache
    index = await memory.for_search()
    assert len(index) == 7 and index.pending() == 0
    hits = index.search("who helps us with taxes?", roles={"user"}, top_k=3)
    assert hits[0].turn_id == "m200" and hits[0].dense is not None
    # only the six rows stored before this memory existed went through the model (a search
    # waits for so few): the committed row's vector came from the cache
    assert index.model_texts == 6


async def test_conversations_share_the_nodes_background_queue_newest_first_each_text_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's one queue (``BackgroundEmbedding``): two conversations' commits go
    through the same worker-thread steps, newest first; a text both queued is looked up
    once and counts for each; a stopping node drops what is queued but lets the step in
    flight finish before its store closes."""
    steps: list[list[str]] = []
    real = memory_module.cache_vectors

    def recording(embedder: Any, cache: Any, texts: list[str]) -> Any:
        steps.append(list(texts))
        return real(embedder, cache, texts)

    monkeypatch.setattr(memory_module, "cache_vectors", recording)
    background = BackgroundEmbedding(store)
    a = ConversationMemory("ca", store, embeddings=True, spawn=_spawn, background=background)
    b = ConversationMemory("cb", store, embeddings=True, spawn=_spawn, background=background)
    shared = "The quarterly report is due on the first Friday of the month."
    a.written(_rows("Greta Lind advises on taxes.", shared))
    b.written(_rows(shared, "Deploys freeze on Fridays."))
    assert len(background) == 3  # the shared text is queued once
    await a.idle()
    assert steps == [["Deploys freeze on Fridays.", shared, "Greta Lind advises on taxes."]]
    assert (a.embedded_in_background, b.embedded_in_background) == (2, 2)
    assert a.loaded is None and b.loaded is None  # neither holds an index
    assert store.get_vectors([vector_key("all-MiniLM-L6-v2", shared)])

    a.written(_rows(*(f"row {n} of a long backlog" for n in range(3 * EMBED_STEP))))
    await until(lambda: len(steps) > 1)  # a step is in flight (or done)
    await background.aclose()
    assert len(background) == 0 and a.embedded_in_background % EMBED_STEP == 2  # whole steps
    a.written(_rows("Written after the node stopped."))  # nothing is queued
    assert len(background) == 0


async def test_a_step_that_fails_is_logged_and_the_queue_goes_on(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full store (say) loses no row: the failed step's rows stay stored and searchable
    by keywords, the warning says so, and the next step still runs."""
    real = memory_module.cache_vectors
    calls: list[int] = []

    def full_once(embedder: Any, cache: Any, texts: list[str]) -> Any:
        calls.append(len(texts))
        if len(calls) == 1:
            raise lmdb.MapFullError("mdb_put: MDB_MAP_FULL: Environment mapsize limit reached")
        return real(embedder, cache, texts)

    monkeypatch.setattr(memory_module, "cache_vectors", full_once)
    memory = ConversationMemory("c1", store, embeddings=True, spawn=_spawn)
    memory.written(_rows(*(f"backlog row {n}" for n in range(EMBED_STEP + 1))))
    await memory.idle()
    assert calls == [EMBED_STEP, 1] and memory.embedded_in_background == 1
    assert "rows not embedded in the background (MapFullError" in caplog.text
    assert "ranks them by keywords" in caplog.text


async def test_a_model_that_does_not_load_is_logged_and_its_rows_stay_for_keywords(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(model: str, cache: Any) -> Any:
        raise OSError(f"model.safetensors of {model} is truncated")

    monkeypatch.setattr(memory_module, "_load_embedder", broken)
    memory = ConversationMemory("c1", store, embeddings=True, spawn=_spawn)
    memory.written(_rows("Greta Lind advises on taxes.", "Deploys freeze on Fridays."))
    await memory.idle()
    assert len(memory.background) == 0 and memory.embedded_in_background == 0
    assert "did not load (OSError: model.safetensors of minilm is truncated)" in caplog.text
    assert "2 rows stay searchable by keywords" in caplog.text
