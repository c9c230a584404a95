"""react.memsearch: search latency and update cost of the incremental hybrid index.

A deterministic conversation (seeded ``random.Random``) of N index rows, N in ``--sizes``:
turns of a user row and an assistant row, texts of 8-120 words drawn 60% from the common
words of ``bench.harness.WORDS`` and 40% from a Zipf-distributed vocabulary of 20,000
made-up words of 2-4 syllables, so that postings range from most rows to a handful. Every
row carries a random unit vector (float16 bytes, as stored rows do): embedding 100,000 rows
for real would take about an hour, and the cost of a search does not depend on the vectors'
values. The query vector is the real model's. Queries are 2-5 words from the same distribution.

Search (``MemIndex.search``, roles user+assistant, top_k 5, the last turn excluded), per size:

- bm25: ``mode="bm25"``.
- hybrid: BM25 + the query's embedding + cosine over every row + fusion (the default mode).
- linear scan (the baseline): what react.memsearch did before the index, tokenizing and
  scoring every row per call (``linear_scan``); skipped at a size when its samples would
  pass ``--scan-budget`` seconds.

The samples of the kinds are interleaved at each size (the machine is shared and noisy).
Sanity check: at every size where the scan runs, its top turns equal the index's BM25 ones.

Update cost per added row (the first three on an index that already holds 10,000 rows):

- bm25 add: ``add([row])`` without an embedder.
- add with vector: ``add([row])`` of a row that carries its vector (how a reload feeds rows).
- embed one by one: ``add([row]); embed_pending()`` with the real model, row by row.
- embed batched: ``add`` of 32 rows, then one ``embed_pending()``; per row.

The two embedding measures take the same 32 texts (each into a new index without a cache),
short ones (4-16 words, a chat line) and long ones (8-120 words), 3 times on new texts; the
median is reported.
- tokenize (the baseline): ``actline.tools.search.text.tokenize(text)`` of the row, the floor of any
add.

The model's memory: how much the process's resident set grows from loading the embedder and
embedding 64 rows with it (every weight read once), what a node pays for hybrid memsearch.

Target: bm25 search p50 at 100,000 rows under 100 ms.

    python -m bench.memsearch [--quick] [--sizes 1000,10000,100000] [--samples 60]
        [--out bench/results/memsearch.json]
"""

from __future__ import annotations

import gc
import itertools
import math
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from actline.tools.embeddings.minilm import Embedder, EmbeddingsUnavailable
from actline.tools.search.memindex import MemIndex
from actline.tools.search.text import tokenize
from actline.tools.search.vectors import DictVectorCache, encode_vector
from bench.harness import (
    WORDS,
    SanityCheckFailed,
    add_counts,
    add_sizes,
    checked,
    finish,
    ms,
    new_table,
    parser,
    platform_info,
    settle,
    summary,
    verdict,
)

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
SAMPLES = 60
QUICK_SAMPLES = 15
SEED = 7
T0 = 1_800_000_000.0
DIM = 384
VOCABULARY = 20_000
ZIPF = 1.1
UPDATE_BASE = 10_000
UPDATE_ROWS = 200
EMBED_ROWS = 32
EMBED_REPEATS = 3
"""Embedding measures, each on new texts; the median is reported."""
EMBED_TEXTS = {"short": (4, 16), "long": (8, 120)}
"""Words per row of the texts embedded in the update measure: a chat line, a long answer."""
SCAN_BUDGET_S = 20.0
TARGET_MS = 100.0
TARGET_ROWS = 100_000
ROLES = frozenset({"user", "assistant"})
TOP_K = 5


# -- the synthetic conversation ---------------------------------------------------------------
class Corpus:
    """Deterministic row texts and queries: common words plus a Zipf tail."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.common = [w for w in WORDS if tokenize(w)]
        syllables = [a + b for a, b in itertools.product("bdfgklmnprstvz", "aeiou")]
        words = (
            "".join(parts) for n in (2, 3, 4) for parts in itertools.product(syllables, repeat=n)
        )
        self.rare = self.rng.sample(list(itertools.islice(words, 3 * VOCABULARY)), VOCABULARY)
        weights = [1 / (k + 1) ** ZIPF for k in range(VOCABULARY)]
        self.cumulative = list(itertools.accumulate(weights))

    def _words(self, count: int) -> list[str]:
        out = []
        for _ in range(count):
            if self.rng.random() < 0.6:
                out.append(self.rng.choice(self.common))
            else:
                out.append(self.rng.choices(self.rare, cum_weights=self.cumulative)[0])
        return out

    def text(self, low: int = 8, high: int = 120) -> str:
        words = self._words(self.rng.randint(low, high))
        return " ".join(words).capitalize() + "."

    def query(self) -> str:
        return " ".join(self._words(self.rng.randint(2, 5)))


def unit_vectors(count: int, seed: int = SEED) -> np.ndarray[Any, np.dtype[np.float32]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def rows(
    count: int, corpus: Corpus, *, vectors: bool = True, words: tuple[int, int] = (8, 120)
) -> list[dict[str, Any]]:
    """``count`` index rows of ``count // 2`` turns (user, then assistant)."""
    out: list[dict[str, Any]] = []
    matrix = unit_vectors(count) if vectors else None
    for i in range(count):
        turn = f"t{i // 2}"
        role = "user" if i % 2 == 0 else "assistant"
        row: dict[str, Any] = {
            "turn_id": turn,
            "role": role,
            "ts": T0 + i * 60.0,
            "text": corpus.text(*words),
            "path": f"ar:{turn}.{role}",
        }
        if matrix is not None:
            row["vector"] = encode_vector(matrix[i])
        out.append(row)
    return out


# -- the baseline -------------------------------------------------------------------------------
def linear_scan(docs: Sequence[dict[str, Any]], query: str, exclude: str) -> list[str]:
    """The previous react.memsearch: tokenize and BM25-score every row per call; top turns.

    Statistics (idf, average length) are over every row, as in ``MemIndex``, so that the
    rankings can be compared.
    """
    wanted = set(tokenize(query))
    terms = [Counter(tokenize(d["text"])) for d in docs]
    if not terms:
        return []
    average = sum(sum(c.values()) for c in terms) / len(terms) or 1.0
    df = Counter(t for c in terms for t in wanted if t in c)
    n = len(terms)
    idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}
    best: dict[str, tuple[float, float]] = {}
    for doc, counts in zip(docs, terms, strict=True):
        if doc["role"] not in ROLES or doc["turn_id"] == exclude:
            continue
        norm = 1.5 * (1 - 0.75 + 0.75 * sum(counts.values()) / average)
        score = 0.0
        for term in sorted(idf):
            tf = counts.get(term, 0)
            if tf:
                score += idf[term] * tf * 2.5 / (tf + norm)
        if score > 0 and score > best.get(doc["turn_id"], (0.0, 0.0))[0]:
            best[doc["turn_id"]] = (score, doc["ts"])
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
    return [turn for turn, _ in ranked[:TOP_K]]


# -- measuring ----------------------------------------------------------------------------------
def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _summary(samples: list[float]) -> dict[str, Any] | None:
    """Count, p50, p90, p99, min and mean in milliseconds; None without samples."""
    return summary(samples, points=(50, 90, 99)) if samples else None


def measure_size(
    count: int, embedder: Embedder | None, samples: int, scan_budget: float, progress: Progress
) -> dict[str, Any]:
    corpus = Corpus(SEED + count)
    data = rows(count, corpus)
    queries = [corpus.query() for _ in range(20)]
    last = data[-1]["turn_id"]
    built = time.perf_counter()
    index = MemIndex(embedder, DictVectorCache())
    index.add(data)
    build_seconds = time.perf_counter() - built
    if index.pending():
        raise SanityCheckFailed(count, f"{index.pending()} rows without a vector after add")
    gc.collect()

    def search(query: str, mode: Any) -> list[str]:
        hits = index.search(query, roles=ROLES, top_k=TOP_K, exclude_turns={last}, mode=mode)
        return [h.turn_id for h in hits]

    def bm25_search(query: str) -> list[str]:
        return search(query, "bm25")

    def hybrid_search(query: str) -> list[str]:
        return search(query, "hybrid")

    def scan(query: str) -> list[str]:
        return linear_scan(data, query, last)

    for query in queries[:5]:  # warm the tokenizer cache, numpy and the model
        search(query, "bm25")
        if embedder is not None:
            search(query, "hybrid")
    scan_first = _timed(lambda: linear_scan(data, queries[0], last))
    scan_n = min(samples, max(0, int(scan_budget / max(scan_first, 1e-9))))
    skipped = None if scan_n >= 3 else f"one scan took {scan_first:.1f} s"
    if skipped is None:
        for query in queries[:3]:
            if linear_scan(data, query, last) != search(query, "bm25"):
                raise SanityCheckFailed(count, f"bm25 and the linear scan differ on {query!r}")
    times: dict[str, list[float]] = {"bm25": [], "hybrid": [], "scan": []}
    task = progress.add_task(f"searching {count:,} rows", total=samples)
    for i in range(samples):
        query = queries[i % len(queries)]
        kinds: list[tuple[str, Callable[[str], object]]] = [("bm25", bm25_search)]
        if embedder is not None:
            kinds.append(("hybrid", hybrid_search))
        if skipped is None and i < scan_n:
            kinds.append(("scan", scan))
        for name, fn in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
            gc.collect(0)
            t0 = time.perf_counter()
            fn(query)
            times[name].append(time.perf_counter() - t0)
        progress.advance(task)
    got = {kind: _summary(samples) for kind, samples in times.items()}
    bm25, scanned = got["bm25"], got["scan"]
    return {
        "rows": count,
        "turns": count // 2,
        "terms": len({t for d in data for t in tokenize(d["text"])}),
        "build_seconds": build_seconds,
        "bm25": bm25,
        "hybrid": got["hybrid"],
        "scan": scanned,
        "scan_skipped": skipped,
        "speedup_bm25": None
        if scanned is None or bm25 is None
        else scanned["p50_ms"] / bm25["p50_ms"],
    }


def embed_one_by_one(index: MemIndex, batch: list[dict[str, Any]]) -> None:
    for row in batch:
        index.add([row])
        index.embed_pending()


def embed_batch(index: MemIndex, batch: list[dict[str, Any]]) -> None:
    index.add(batch)
    index.embed_pending()


def measure_updates(embedder: Embedder | None, quick: bool) -> dict[str, Any]:
    """Per-row cost of adding to an index of ``UPDATE_BASE`` rows, in microseconds."""
    corpus = Corpus(SEED)
    base = rows(UPDATE_BASE, corpus)
    extra = rows(UPDATE_ROWS, corpus)
    for i, row in enumerate(extra):  # new turns after the base ones
        row["turn_id"] = f"u{i // 2}"
    out: dict[str, Any] = {"base_rows": UPDATE_BASE, "rows": UPDATE_ROWS}

    def per_row(fn: Callable[[], object], count: int) -> float:
        gc.collect()
        return _timed(fn) / count * 1e6

    def plain(row: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if k != "vector"}

    texts = [r["text"] for r in extra]
    out["tokenize_us"] = per_row(lambda: [tokenize(t) for t in texts], len(texts))
    index = MemIndex()
    index.add([plain(r) for r in base])
    plain_rows = [plain(r) for r in extra]
    out["bm25_add_us"] = per_row(lambda: [index.add([r]) for r in plain_rows], len(plain_rows))
    out["add_with_vector_us"] = None
    out["embed"] = []
    if embedder is not None:
        index = MemIndex(embedder, DictVectorCache())
        index.add(base)
        out["add_with_vector_us"] = per_row(lambda: [index.add([r]) for r in extra], len(extra))
        count = 8 if quick else EMBED_ROWS
        repeats = 1 if quick else EMBED_REPEATS
        for label, words in EMBED_TEXTS.items():
            corpus = Corpus(SEED + words[1])
            ones: list[float] = []
            batches: list[float] = []
            pieces: list[int] = []
            for _ in range(repeats):
                # The same texts both ways, each into its own index without a cache.
                fresh = rows(count, corpus, vectors=False, words=words)
                pieces += map(len, embedder.token_ids([row["text"] for row in fresh]))
                ones.append(per_row(partial(embed_one_by_one, MemIndex(embedder), fresh), count))
                batches.append(per_row(partial(embed_batch, MemIndex(embedder), fresh), count))
            out["embed"].append(
                {
                    "texts": label,
                    "words": list(words),
                    "word_pieces_mean": sum(pieces) / len(pieces),
                    "rows": count,
                    "repeats": repeats,
                    "one_by_one_us": statistics.median(ones),
                    "batched_us": statistics.median(batches),
                }
            )
        if index.pending():
            raise SanityCheckFailed(UPDATE_BASE, "rows left without a vector after embedding")
    return out


def run(
    sizes: Sequence[int] = SIZES,
    samples: int = SAMPLES,
    *,
    scan_budget: float = SCAN_BUDGET_S,
    quick: bool = False,
) -> dict[str, Any]:
    started = time.perf_counter()
    before = rss_mb()
    try:
        embedder: Embedder | None = Embedder.load()
        embedder_note = "all-MiniLM-L6-v2 (numpy)"
    except EmbeddingsUnavailable as exc:
        embedder, embedder_note = None, f"unavailable: {exc.reason}"
    model_rss = None
    if embedder is not None:  # every weight read once, as a node's first embeddings do
        corpus = Corpus(SEED - 1)
        embedder.embed([corpus.text() for _ in range(EMBED_ROWS)])
        embedder.embed([corpus.text(*EMBED_TEXTS["short"]) for _ in range(EMBED_ROWS)])
        model_rss = rss_mb() - before
    with Progress(transient=True) as progress:
        results = [
            measure_size(size, embedder, max(3, samples), scan_budget, progress)
            for size in sorted(set(sizes))
        ]
        updates = measure_updates(embedder, quick)
    top = next((r for r in results if r["rows"] == TARGET_ROWS), None)
    value = None if top is None else top["bm25"]["p50_ms"]
    target = {
        "rows": TARGET_ROWS,
        "figure": "bm25 p50 ms",
        "maximum": TARGET_MS,
        "value": value,
        "met": value is not None and value < TARGET_MS,
    }
    return {
        "benchmark": "memsearch",
        "seed": SEED,
        "samples": samples,
        "top_k": TOP_K,
        "embedder": embedder_note,
        "vectors": "random unit vectors in the rows; the query embedded by the real model",
        "sizes": results,
        "updates": updates,
        "model_rss_mb": model_rss,
        "targets": [target],
        "targets_met": target["met"] if top is not None else True,
        "seconds": time.perf_counter() - started,
        **platform_info(),
        "numpy": np.__version__,
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
    }


# -- report -------------------------------------------------------------------------------------
def rss_mb() -> float:
    """This process's resident memory in MB (``/proc/self/status``; 0 where there is none)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e3:.1f} ms" if value >= 1e4 else f"{value:.1f} µs"


def table(result: dict[str, Any]) -> Table:
    out = new_table(
        (
            f"memsearch: search ms per call, top_k {result['top_k']}, "
            f"{result['samples']} samples per kind and size"
        ),
        ("rows", "kind", "p50", "p99", "vs baseline", "note"),
        left=("rows", "kind", "note"),
        caption=(
            "bm25: MemIndex.search(mode='bm25'); hybrid: BM25 + query embedding + cosine over "
            "every row + fusion; scan: the previous linear BM25 (tokenize and score every row "
            "per call), the search baseline; rows carry random unit vectors (float16), the "
            f"query vector is the real model's ({result['embedder']}). Update rows: time per "
            "added row, against one tokenize() of it; embed 1 by 1: add + embed_pending per "
            "row; batched: one add + embed_pending for all the rows"
        ),
    )
    for size in result["sizes"]:
        scan = size["scan"]
        for kind in ("bm25", "hybrid", "scan"):
            stats = size[kind]
            if stats is None and kind != "scan":
                continue
            if kind == "scan" and stats is None:
                out.add_row(f"{size['rows']:,}", kind, "-", "-", "", size["scan_skipped"] or "")
                continue
            ratio = (
                "" if scan is None or kind == "scan" else f"{scan['p50_ms'] / stats['p50_ms']:.0f}x"
            )
            note = ""
            if kind == "bm25":
                note = f"{size['terms']:,} terms, built in {size['build_seconds']:.1f} s"
            out.add_row(
                f"{size['rows']:,}", kind, ms(stats["p50_ms"]), ms(stats["p99_ms"]), ratio, note
            )
        out.add_section()
    updates = result["updates"]
    base = updates["tokenize_us"]
    out.add_row(
        f"+1 row on {updates['base_rows']:,}", "tokenize", _us(base), "", "", "the baseline"
    )
    for key, kind, note in (
        ("bm25_add_us", "bm25 add", "no embedder"),
        ("add_with_vector_us", "add+vector", "a stored row and its vector"),
    ):
        value = updates.get(key)
        out.add_row("", kind, _us(value), "", "" if value is None else f"{value / base:.1f}x", note)
    for embed in updates["embed"]:
        for key, how in (("one_by_one_us", "1 by 1"), ("batched_us", "batched")):
            value = embed[key]
            note = (
                f"{embed['rows']} {embed['texts']} texts, "
                f"{embed['word_pieces_mean']:.0f} word pieces"
            )
            out.add_row("", f"embed {how}", _us(value), "", f"{value / base:.0f}x", note)
    if result.get("model_rss_mb") is not None:
        out.add_row(
            "model",
            "memory",
            f"{result['model_rss_mb']:.0f} MB",
            "",
            "",
            "resident after loading it and embedding 64 rows",
        )
    target = result["targets"][0]
    out.add_section()
    judged = "not measured" if target["value"] is None else verdict(target["met"])
    out.add_row(
        "target",
        f"bm25 p50 @ {target['rows']:,}",
        ms(target["value"]),
        "",
        "",
        f"< {TARGET_MS:.0f} ms: {judged}",
    )
    return out


def main(argv: list[str] | None = None) -> int:
    cli = parser("memsearch", __doc__, quick="1,000 and 10,000 rows, few samples")
    add_sizes(cli, "indexed rows")
    add_counts(cli, samples="searches per kind and size")
    cli.add_argument(
        "--scan-budget", type=float, default=SCAN_BUDGET_S, help="seconds of linear scans per size"
    )
    args = cli.parse_args(argv)
    options = settle(
        args,
        {"sizes": list(SIZES), "samples": SAMPLES},
        {"sizes": list(QUICK_SIZES), "samples": QUICK_SAMPLES},
    )
    console = Console()
    result = checked(
        console,
        lambda: run(
            options["sizes"], options["samples"], scan_budget=args.scan_budget, quick=args.quick
        ),
    )
    if result is None:
        return 1
    result["quick"] = args.quick
    console.print(table(result))
    console.print(f"{result['seconds']:.1f} s in all")
    return finish(console, args.out, result, result["targets_met"])


if __name__ == "__main__":
    raise SystemExit(main())
