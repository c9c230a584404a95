"""Hand-written memsearch parts against the libraries that do the same job, in one run.

``python -m bench.memsearch_libs`` prints, for the two benchmark conversations
(``tests/tools/test_memsearch_recall.py`` and ``tests/tools/memfixture.py``) and their query
sets:

- stemming: the light suffix stemmer ``tools.text`` had (``light_stem``, kept here as the
  reference) against Snowball English (``snowballstemmer``, what ``tools.text`` uses now):
  recall@3 of BM25 alone and of hybrid ranking, and tokenize speed;
- BM25: ``MemIndex`` (incremental, numpy over the query terms' postings) against ``bm25s``
  and ``rank_bm25``: the same ranking? build time, the cost of adding one row (the libraries
  rebuild: they have no incremental add) and query time;
- safetensors: ``tools.embeddings.read_safetensors`` (numpy memory map) against the
  ``safetensors`` package (``safe_open`` / ``load_file``, framework numpy): load time and
  equal tensors.

Snowball won and is a dependency; ``bm25s``, ``rank_bm25`` and ``safetensors`` lost and are
imported here only (``pip install 'actline[compare]'``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tools import memfixture, memqueries_tuning, memqueries_unseen
from tests.tools import test_memsearch_recall as first
from tools import text
from tools.embeddings import Embedder, find_model_dir, read_safetensors
from tools.memindex import DictVectorCache, MemIndex

SETS: list[tuple[str, Callable[[], Iterable[dict[str, Any]]], Any, list[tuple[str, int]]]] = [
    ("first conversation", first.conversation, first.turn_id, first.QUERIES),
    ("memfixture tuning", memfixture.conversation, memfixture.turn_id, memqueries_tuning.QUERIES),
    ("memfixture unseen", memfixture.conversation, memfixture.turn_id, memqueries_unseen.QUERIES),
]


def light_stem(word: str) -> str:
    """The light suffix stemmer ``tools.text`` had before Snowball (plural s/es/ies, ing,
    ed, final e)."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ied") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ing", "ed")) and not word.endswith("eed"):
        base = word[:-3] if word.endswith("ing") else word[:-2]
        if len(base) >= 3:
            if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]
            word = base
    elif word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def _clock(fn: Callable[[], Any], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _recall(index: MemIndex, turn_id: Any, queries: list[tuple[str, int]], mode: Any) -> float:
    found = 0
    for query, turn in queries:
        hits = index.search(query, roles={"user", "assistant"}, top_k=3, mode=mode)
        found += turn_id(turn) in [h.turn_id for h in hits]
    return found / len(queries)


def stemming(embedder: Embedder, cache: DictVectorCache) -> None:
    snowball = text._stem
    print("stemming: recall@3 bm25 / hybrid per query set, and tokenize time of 400 rows")
    for name, stem in (("light (hand-written)", light_stem), ("snowball (tools.text)", snowball)):
        text._stem = stem
        text._word_terms.cache_clear()
        cells = []
        for _, conversation, turn_id, queries in SETS:
            index = MemIndex(embedder, cache)
            index.add(conversation())
            index.embed_pending()
            bm25 = _recall(index, turn_id, queries, "bm25")
            hybrid = _recall(index, turn_id, queries, "hybrid")
            cells.append(f"{bm25:.3f} / {hybrid:.3f}")
        texts = [r["text"] for r in memfixture.conversation()]

        def run(texts: list[str] = texts) -> None:
            text._word_terms.cache_clear()
            for t in texts:
                text.tokenize(t)

        print(f"  {name:20} " + "  ".join(cells) + f"  tokenize {_clock(run) * 1000:.1f} ms")
    text._stem = snowball
    text._word_terms.cache_clear()


def bm25_libraries() -> None:
    import bm25s
    from rank_bm25 import BM25Okapi

    rows = list(memfixture.conversation())
    docs = [text.tokenize(r["text"]) for r in rows]
    queries = [text.tokenize(q) for q, _ in memqueries_tuning.QUERIES]

    def ours() -> MemIndex:
        index = MemIndex()
        index.add(rows)
        return index

    index = ours()

    def ours_query() -> None:
        for query, _ in memqueries_tuning.QUERIES:
            index.search(query, roles={"user", "assistant"}, top_k=3)

    def lib_bm25s() -> bm25s.BM25:
        model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        model.index(docs, show_progress=False)
        return model

    model = lib_bm25s()

    def bm25s_query() -> None:
        for query in queries:
            if query:
                model.get_scores(query)

    okapi = BM25Okapi(docs, k1=1.5, b=0.75)

    def okapi_query() -> None:
        for query in queries:
            okapi.get_scores(query)

    agree = 0
    for query, terms in zip(memqueries_tuning.QUERIES, queries, strict=True):
        best_ours = index.search(query[0], roles={"user", "assistant"}, top_k=1, mode="bm25")
        scores = model.get_scores(terms) if terms else np.zeros(len(rows))
        best_lib = rows[int(np.argmax(scores))]["turn_id"] if scores.max() > 0 else None
        agree += (best_ours[0].turn_id if best_ours else None) == best_lib
    print(f"bm25 over {len(rows)} rows, {len(queries)} queries (best row agrees: {agree})")
    print(
        f"  ours       build {_clock(ours) * 1000:7.1f} ms  add one row ~0 (incremental)"
        f"  queries {_clock(ours_query) * 1000:7.1f} ms"
    )
    print(
        f"  bm25s      build {_clock(lib_bm25s) * 1000:7.1f} ms  add one row = a rebuild"
        f"  queries {_clock(bm25s_query) * 1000:7.1f} ms (scores only, no filters)"
    )
    print(
        f"  rank_bm25  build {_clock(lambda: BM25Okapi(docs)) * 1000:7.1f} ms  add one row = a "
        f"rebuild  queries {_clock(okapi_query) * 1000:7.1f} ms (scores only)"
    )


def safetensors_reader() -> None:
    from safetensors import safe_open
    from safetensors.numpy import load_file

    folder = find_model_dir()
    assert folder is not None
    path = folder / "model.safetensors"
    ours = read_safetensors(path)

    def lib_open() -> dict[str, Any]:
        with safe_open(str(path), framework="np") as f:
            return {k: f.get_tensor(k) for k in f.keys()}

    lib = load_file(str(path))
    same = ours.keys() == lib.keys() and all(np.array_equal(ours[k], lib[k]) for k in ours)
    print(f"safetensors ({path.stat().st_size / 1e6:.0f} MB, {len(ours)} tensors, equal: {same})")
    print(f"  ours (memory map)        {_clock(lambda: read_safetensors(path)) * 1000:7.2f} ms")
    print(f"  safetensors.load_file    {_clock(lambda: load_file(str(path))) * 1000:7.2f} ms")
    print(f"  safetensors.safe_open    {_clock(lib_open) * 1000:7.2f} ms")


def main() -> None:
    embedder = Embedder.load()
    cache = DictVectorCache()
    stemming(embedder, cache)
    bm25_libraries()
    safetensors_reader()


if __name__ == "__main__":
    main()
