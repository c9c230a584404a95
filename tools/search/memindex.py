"""The memsearch index: incremental hybrid (BM25 + dense) search over earlier turns.

A conversation feeds ``MemIndex.add`` its stored index rows on load and each new row as it is
persisted: ``{"turn_id", "role", "ts", "text", "path", optional "vector", optional
"speaker"}``, the vector being the little-endian float16 bytes of the L2-normalised embedding
(``encode_vector``), the speaker the outside agent whose DONE the row is. Adding is
incremental: the row's terms go to an inverted index (term -> row ids and term frequencies in
``array`` buffers), its length to a running total (``avgdl``), its vector to a float32 matrix
that grows by doubling. Nothing is rebuilt.

Rows without a vector are *pending*. The owner embeds them in three steps so that the model
runs on a worker thread while the owner keeps adding and searching: ``pending_batch`` (on
the owner's thread) names rows and texts, ``compute`` (any thread; cache first, keyed by model
and text, then the model) gives their vectors, ``install`` (owner's thread) sets them.
``embed_pending`` does the three at once. A hybrid search embeds at most
``search_embed_rows`` of the newest pending rows itself (``SEARCH_EMBED_ROWS``; 0 when the
owner embeds in the background, as ``actline.actors.services.memory`` does); pending rows rank by
BM25 alone.

``search`` scores BM25 (``K1``, ``B``, terms from ``actline.tools.search.text.tokenize``) with numpy
over the postings of the query terms only. With an embedder (hybrid) it takes the cosine of every
embedded row to the query vector (one matrix product), keeps the best ``CANDIDATES`` rows of
each ranker and fuses them by a convex combination, which Bruch, Gai and Ingber ("An Analysis
of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023) found more accurate than reciprocal
rank fusion::

    score = w * dense' + (1 - w) * bm25' + RECENCY_WEIGHT * 2 ** (-age / HALF_LIFE)
            + SPEAKER_BOOST * speaks + EXACT_BOOST * exact

- ``w = DENSE_WEIGHT = 0.5``: equal weights.
- ``bm25' = min(1, bm25 / sum of the query terms' idf)``: the share of the query's lexical
  evidence the row holds (a row with every term once, at average length, scores the sum). A
  term the index has never seen counts with the idf of a term in no row, so a query that
  only partly matches keeps a small lexical weight. Dividing by the best candidate's BM25
  instead gives a stray word match in a paraphrased query full credit.
- ``dense'``: the cosine min-max normalised over the embedded candidates (the cosines of
  unrelated texts are not near 0 with this model; the spread among candidates is the
  signal); 0 for a pending row.
- recency: at most 0.02 on a scale of about 1, so it only orders turns of near-equal relevance.
- ``speaks``: 1 when a query term names the row's speaker ("what did the reviewer say?").
- ``exact``: the share of the query's identifiers (``actline.tools.search.text.identifiers``:
``OPS-2291``,
  ``cache-stg-04``, ``3.11.9``) the row's text holds exactly, case aside and not inside a
  longer word. Dense vectors cannot tell ``OPS-2291`` from ``OPS-2290``; this makes the exact
  id win rank 1 (``EXACT_BOOST`` exceeds any score without it).

In BM25 mode the score is the raw BM25 score, plus the idf mass for a speaker and more than
the best score for an exact identifier.

Measured (``tests/tools/test_memsearch_recall.py``, ``test_memsearch_unseen.py``): recall@3
of hybrid ranking 22/24 on the first 200-turn conversation, 79/88 on the tuning set of the
second (``memfixture``), 32/37 on its unseen set and 34/38 on its blind set, neither of which
the constants were tuned on (BM25 alone: 4/24, 53/88, 22/37, 24/38); every identifier that
appears in one turn ranks it first (20 of 20, hybrid and BM25), near-neighbour ids in the
filler notwithstanding. ``w`` from 0.5 to 0.8, min-max over all rows, z-scores, raw cosines,
extra rows per clause or per whole turn all stay within two queries of this on the tuning
sets, and reciprocal rank fusion loses up to 9. Tried on the tuning set for issue 23, against
80/88 for this fusion in the same script (recency aside), none gaining more than one query:
late interaction (the same MiniLM's L2-normalised last-layer word-piece vectors, MaxSim of
the query's pieces over a row's, min-max normalised and added with weight 0.1 to 3 to the
fused score of the best 20 to 50 turns) 78 to 80, its recall-side and F1 (BERTScore) forms
76 to 80, with the query's stop words left out 75 to 79; Rocchio feedback on the query vector
from the best 2 to 5 rows 65 to 77; RM3 expansion of the BM25 query with 3 to 10 terms of the
best 2 to 10 fused rows 66 to 80; the query without its question words mixed into the query
vector 78 to 79; BM25 expansion with each query word's nearest word pieces in the model's
input embeddings (holiday: vacation, but also christmas) 80 to 81; a dense weight that grows
as the lexical evidence shrinks 78 to 80. BM25 expansion of the query with WordNet 3.0
synonyms (Debian ``wordnet-base``: the other lemmas of the first 1 to 3 senses of each word or
two- and three-word phrase, base forms as morphy finds them, at most 3 to 12 per word, nouns,
verbs and adjectives or fewer, added with 0.1 to 3 times a query term's weight), measured
through ``search`` itself (79/88 without it), gives 75 to 80: 79 with the first sense at every
weight from 0.1 to 1, 77 to 79 with 2 or 3 senses, 80 only at 1.5 times the term's weight with
3 synonyms; BM25 alone goes from 53 to at most 57. WordNet's first senses seldom hold the
paraphrase (holiday: vacation, green light: go-ahead, but substitute: replacement, not covers;
alarm bells: tocsin, not fire drill) and add noise (test: trial, store: stash away). The
paraphrases missed are the model's limit, not the fusion's: with all-mpnet-base-v2
(``ACTLINE_EMBED_MODEL=mpnet``, ``actline.tools.embeddings.mpnet``) in MiniLM's place and this
fusion unchanged, recall@3 is 83/88 on the tuning set (dense weight 0.5, 0.6 and 0.7 alike; the two
models' cosines averaged: 82/88), then, measured once after that choice, 36/37 unseen and 35/38
blind; identifiers still rank first (20 of 20).

Rows are filtered by role, ``since`` and ``exclude_turns``; each turn gives one hit, its best
row; ties go to the newer turn, then the smaller turn id. The index is not thread-safe: one
owner at a time, only ``compute`` may run elsewhere. Unlike ``actline.tools.embeddings.minilm``,
this module imports numpy at load, BM25 mode included.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from array import array
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from actline.tools.embeddings.minilm import EmbeddingsUnavailable

from .text import identifiers, snippet, tokenize

__all__ = [
    "DictVectorCache",
    "MemHit",
    "MemIndex",
    "PendingBatch",
    "TextEmbedder",
    "VectorCache",
    "decode_vector",
    "encode_vector",
    "vector_key",
]

log = logging.getLogger(__name__)

K1: Final = 1.5
B: Final = 0.75
DENSE_WEIGHT: Final = 0.5
"""Weight of the normalised cosine in the hybrid score; BM25 gets the rest."""
RECENCY_WEIGHT: Final = 0.02
HALF_LIFE: Final = 30 * 86_400.0
"""Seconds after which the recency bonus of a row halves."""
CANDIDATES: Final = 100
"""Rows each ranker contributes to the fusion (at least; ``8 * top_k`` when larger)."""
SNIPPET_CHARS: Final = 240
EMBED_BATCH: Final = 32
SEARCH_EMBED_ROWS: Final = 16
"""Pending rows a hybrid search embeds itself (the newest); older ones rank by BM25 alone
until the owner's background embedding reaches them."""
SPEAKER_BOOST: Final = 1.0
"""Added (hybrid; times the query's idf mass in BM25 mode) to the rows whose speaker a query
term names: "what did the reviewer say?" wants the reviewer's DONE, not the prompt that
mentions the reviewer."""
EXACT_BOOST: Final = 1.0
"""Added to the score of a row holding every identifier of the query exactly (a share of it
for some of them): more than any fused score without it, so an exact id wins rank 1."""
MAX_TF: Final = 65_535


class TextEmbedder(Protocol):
    """What the index needs of an embedder (``actline.tools.embeddings.minilm.Embedder`` is one)."""

    dim: int
    model_id: str

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> NDArray[np.float32]: ...


class VectorCache(Protocol):
    """A persistent text-embedding cache: ``vector_key`` -> float16 little-endian bytes."""

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]: ...

    def put_many(self, items: Mapping[str, bytes]) -> None: ...


class DictVectorCache:
    """An in-memory ``VectorCache``."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        return {k: self.data[k] for k in keys if k in self.data}

    def put_many(self, items: Mapping[str, bytes]) -> None:
        self.data.update(items)

    def __len__(self) -> int:
        return len(self.data)


def vector_key(model_id: str, text: str) -> str:
    """The cache key of ``text`` embedded by ``model_id``."""
    return f"{model_id}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


def encode_vector(vector: Sequence[float] | NDArray[Any]) -> bytes:
    """A vector as the little-endian float16 bytes index rows and caches carry."""
    return np.asarray(vector, dtype="<f2").tobytes()


def decode_vector(raw: bytes | bytearray | memoryview | Sequence[float]) -> NDArray[np.float32]:
    """float16 bytes (or a list of numbers) as an L2-normalised float32 vector."""
    if isinstance(raw, bytes | bytearray | memoryview):
        vector = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    else:
        vector = np.asarray(raw, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


@dataclass(frozen=True, slots=True)
class MemHit:
    """One earlier turn found by ``MemIndex.search``: its best row and that row's scores.

    ``dense`` is the cosine to the query (None in BM25 mode); ``bm25`` the raw BM25 score.
    """

    turn_id: str
    role: str
    score: float
    bm25: float
    dense: float | None
    ts: float
    snippet: str
    path: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PendingBatch(NamedTuple):
    """Rows waiting for a vector (``MemIndex.pending_batch``): their ids and texts."""

    rids: tuple[int, ...]
    texts: tuple[str, ...]


class _Row(NamedTuple):
    turn_id: str
    role: str
    ts: float
    text: str
    path: str
    speaker: str


def _parse(row: Mapping[str, Any]) -> _Row | None:
    """The fields of a well-formed row (its vector aside), or None."""
    if not isinstance(row, Mapping):
        return None
    turn_id, role, ts, text = row.get("turn_id"), row.get("role"), row.get("ts"), row.get("text")
    path = row.get("path") or ""
    speaker = row.get("speaker") or ""
    if not (isinstance(turn_id, str) and turn_id and isinstance(role, str) and role):
        return None
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        return None
    if not isinstance(text, str) or not text.strip() or not isinstance(path, str):
        return None
    if not isinstance(speaker, str):
        return None
    return _Row(turn_id, role, float(ts), text, path, speaker)


def _cap(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    cut = cut[: cut.rfind(" ")] if " " in cut else cut
    return cut + "…"


class MemIndex:
    """Incremental BM25 (and, with an embedder, dense) search over memsearch index rows.

    ``skipped`` counts malformed rows ``add`` refused, ``duplicates`` rows it had already.
    """

    def __init__(
        self, embedder: TextEmbedder | None = None, cache: VectorCache | None = None
    ) -> None:
        self._embedder = embedder
        self._cache = cache
        self.skipped = 0
        self.duplicates = 0
        self._rows: list[_Row] = []
        self._seen: set[tuple[str, str, str]] = set()
        self._postings: dict[str, tuple[array[int], array[int]]] = {}
        self._speakers: dict[str, array[int]] = {}
        """Term of a speaker's name -> the rows of that speaker (a DONE's agent)."""
        self._total_length = 0
        self._role_codes: dict[str, int] = {}
        self._turn_codes: dict[str, int] = {}
        self._turn_ids: list[str] = []
        self._capacity = 0
        self._ts = np.zeros(0, dtype=np.float64)
        self._role = np.zeros(0, dtype=np.int32)
        self._turn = np.zeros(0, dtype=np.int32)
        self._length = np.zeros(0, dtype=np.float64)
        self._dim = 0 if embedder is None else int(embedder.dim)
        self._vectors = np.zeros((0, self._dim), dtype=np.float32)
        self._embedded = np.zeros(0, dtype=bool)
        self._pending: dict[int, None] = {}
        """Row ids without a vector, oldest first (an ordered set)."""
        self.search_embed_rows = SEARCH_EMBED_ROWS
        self.model_texts = 0
        """Texts run through the model so far (not found in the cache): a statistic."""

    @property
    def mode(self) -> Literal["hybrid", "bm25"]:
        """``hybrid`` when the index has an embedder, else ``bm25``."""
        return "hybrid" if self._embedder is not None else "bm25"

    def __len__(self) -> int:
        return len(self._rows)

    def pending(self) -> int:
        """Rows still without a vector (always 0 without an embedder)."""
        return len(self._pending)

    # -- adding ---------------------------------------------------------------------------------
    def add(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Index ``rows``; returns how many were new. Malformed rows and exact duplicates (same
        turn, role and text) are skipped. A row's vector is used when it has the embedder's
        dimension; otherwise the row waits for ``embed_pending``."""
        added = 0
        for raw in rows:
            row = _parse(raw)
            if row is None:
                self.skipped += 1
                continue
            key = (row.turn_id, row.role, row.text)
            if key in self._seen:
                self.duplicates += 1
                continue
            self._seen.add(key)
            self._append(row, raw.get("vector"))
            added += 1
        return added

    def _append(self, row: _Row, vector: Any) -> None:
        rid = len(self._rows)
        if rid == self._capacity:
            self._grow(max(64, 2 * self._capacity))
        self._rows.append(row)
        self._ts[rid] = row.ts
        self._role[rid] = self._role_codes.setdefault(row.role, len(self._role_codes))
        code = self._turn_codes.get(row.turn_id)
        if code is None:
            code = self._turn_codes[row.turn_id] = len(self._turn_ids)
            self._turn_ids.append(row.turn_id)
        self._turn[rid] = code
        for term in set(tokenize(row.speaker)):
            self._speakers.setdefault(term, array("I")).append(rid)
        terms = Counter(tokenize(row.text))
        length = sum(terms.values())
        self._length[rid] = length
        self._total_length += length
        for term, tf in terms.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = (array("I"), array("H"))
            postings[0].append(rid)
            postings[1].append(min(tf, MAX_TF))
        if self._embedder is not None:
            decoded = self._row_vector(vector)
            if decoded is None:
                self._pending[rid] = None
            else:
                self._vectors[rid] = decoded
                self._embedded[rid] = True

    def _row_vector(self, vector: Any) -> NDArray[np.float32] | None:
        return _usable_vector(vector, self._dim)

    def _grow(self, capacity: int) -> None:
        def grown(old: NDArray[Any]) -> NDArray[Any]:
            new = np.zeros((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: len(old)] = old
            return new

        self._ts, self._role, self._turn = grown(self._ts), grown(self._role), grown(self._turn)
        self._length = grown(self._length)
        if self._embedder is not None:
            self._vectors = grown(self._vectors)
            self._embedded = grown(self._embedded)
        self._capacity = capacity

    def embed_pending(self, max_rows: int | None = None) -> int:
        """Embed up to ``max_rows`` pending rows (all by default, oldest first), cache first;
        returns how many. ``pending_batch``, ``compute`` and ``install`` in one call."""
        batch = self.pending_batch(max_rows)
        return self.install(batch, self.compute(batch)) if batch.rids else 0

    def pending_batch(self, max_rows: int | None = None, *, newest: bool = False) -> PendingBatch:
        """Up to ``max_rows`` pending rows (oldest first, or the newest with ``newest``), for
        ``compute`` and then ``install``."""
        if self._embedder is None or not self._pending:
            return PendingBatch((), ())
        rids = list(self._pending)
        count = len(rids) if max_rows is None else max(0, max_rows)
        taken = rids[-count:] if newest and count else rids[:count]
        return PendingBatch(tuple(taken), tuple(self._rows[r].text for r in taken))

    def compute(self, batch: PendingBatch) -> list[bytes]:
        """The float16 vectors of ``batch``'s texts: from the cache, else embedded (and put in
        the cache). Touches no index state, so it may run on a worker thread while the owner
        keeps adding and searching; ``install`` (by the owner) applies the result."""
        embedder = self._embedder
        if embedder is None or not batch.texts:
            return []
        vectors, embedded = cache_vectors(embedder, self._cache, batch.texts)
        self.model_texts += embedded
        return vectors

    def cached(self, batch: PendingBatch) -> tuple[PendingBatch, list[bytes]]:
        """The rows of ``batch`` whose vectors are in the cache, with those vectors (a cache
        lookup, never the model). Touches no index state, like ``compute``; ``install`` them."""
        embedder = self._embedder
        if embedder is None or self._cache is None or not batch.texts:
            return PendingBatch((), ()), []
        keys = [vector_key(embedder.model_id, text) for text in batch.texts]
        stored = self._cache.get_many(sorted(set(keys)))
        rids: list[int] = []
        texts: list[str] = []
        vectors: list[bytes] = []
        for rid, text, key in zip(batch.rids, batch.texts, keys, strict=True):
            raw = stored.get(key)
            if raw is not None and self._row_vector(raw) is not None:
                rids.append(rid)
                texts.append(text)
                vectors.append(raw)
        return PendingBatch(tuple(rids), tuple(texts)), vectors

    def install(self, batch: PendingBatch, vectors: Sequence[bytes]) -> int:
        """Give ``batch``'s rows the ``vectors`` of ``compute``; rows that got one meanwhile
        are left as they are. Fresh vectors went through float16, like cached and stored ones,
        so a row gets the same vector whichever way it came. Returns how many were set."""
        if len(vectors) != len(batch.rids):
            raise ValueError(f"{len(batch.rids)} rows but {len(vectors)} vectors")
        installed = 0
        for rid, raw in zip(batch.rids, vectors, strict=True):
            if rid in self._pending:
                self._vectors[rid] = decode_vector(raw)
                self._embedded[rid] = True
                del self._pending[rid]
                installed += 1
        return installed

    # -- searching ------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        roles: Collection[str],
        top_k: int = 5,
        since: float | None = None,
        exclude_turns: Collection[str] = (),
        now: float | None = None,
        mode: Literal["auto", "bm25", "hybrid"] = "auto",
    ) -> list[MemHit]:
        """The ``top_k`` best turns for ``query`` among rows of ``roles`` (at or after ``since``,
        not in ``exclude_turns``), one hit per turn, best first.

        ``now`` (default: the newest row's time) dates the recency bonus of hybrid scores.
        ``mode="hybrid"`` without an embedder raises ``EmbeddingsUnavailable``.
        """
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        if isinstance(roles, str):
            roles = {roles}
        if mode == "hybrid" and self._embedder is None:
            raise EmbeddingsUnavailable("this memsearch index was built without an embedder")
        hybrid = self._embedder is not None and mode != "bm25"
        n = len(self._rows)
        if not n or not query.strip():
            return []
        allowed = self._allowed(n, roles, since, exclude_turns)
        if not allowed.any():
            return []
        terms = sorted(set(tokenize(query)))
        bm25, idf = self._bm25(n, terms)
        exact = self._exact(n, identifiers(query))
        speaking = self._speaking(n, terms)
        dense: NDArray[np.float32] | None = None
        if hybrid:
            candidates, dense, fused = self._fuse(query, n, top_k, allowed, bm25, terms, idf, now)
            if speaking is not None:
                candidates, fused = _boost(candidates, fused, speaking, allowed, SPEAKER_BOOST)
            if exact is not None:
                candidates, fused = _boost(candidates, fused, exact, allowed, EXACT_BOOST)
        else:
            candidates = np.flatnonzero((bm25 > 0) & allowed)
            fused = bm25[candidates]
            if speaking is not None:
                weight = SPEAKER_BOOST * _mass(n, terms, idf)
                candidates, fused = _boost(candidates, fused, speaking, allowed, weight)
            if exact is not None:
                top = float(fused.max(initial=0.0)) + 1.0
                candidates, fused = _boost(candidates, fused, exact, allowed, top)
        return self._hits(candidates, fused, bm25, dense, top_k, set(terms), idf)

    def _allowed(
        self, n: int, roles: Collection[str], since: float | None, exclude: Collection[str]
    ) -> NDArray[np.bool_]:
        role_ok = np.zeros(len(self._role_codes), dtype=bool)
        for role in roles:
            code = self._role_codes.get(role)
            if code is not None:
                role_ok[code] = True
        allowed: NDArray[np.bool_] = role_ok[self._role[:n]]
        if since is not None:
            allowed &= self._ts[:n] >= since
        excluded = [self._turn_codes[t] for t in exclude if t in self._turn_codes]
        if excluded:
            turn_ok = np.ones(len(self._turn_ids), dtype=bool)
            turn_ok[excluded] = False
            allowed &= turn_ok[self._turn[:n]]
        return allowed

    def _bm25(self, n: int, terms: list[str]) -> tuple[NDArray[np.float64], dict[str, float]]:
        """BM25 of every row (0 without a query term) and the idf of each query term."""
        scores = np.zeros(n, dtype=np.float64)
        idf: dict[str, float] = {}
        average = self._total_length / n or 1.0
        for term in terms:  # sorted: the same float sums every run
            postings = self._postings.get(term)
            if postings is None:
                continue
            ids = np.frombuffer(postings[0], dtype=np.uint32)
            tf = np.frombuffer(postings[1], dtype=np.uint16).astype(np.float64)
            weight = idf[term] = math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
            norm = K1 * (1 - B + B * self._length[ids] / average)
            scores[ids] += weight * tf * (K1 + 1) / (tf + norm)
        return scores, idf

    def _speaking(self, n: int, terms: Sequence[str]) -> NDArray[np.float64] | None:
        """1 for the rows whose speaker a query term names ("what did the reviewer say?"),
        None when no query term names a speaker."""
        named = [self._speakers[t] for t in terms if t in self._speakers]
        if not named:
            return None
        out = np.zeros(n, dtype=np.float64)
        for rids in named:
            ids = np.frombuffer(rids, dtype=np.uint32)
            out[ids[ids < n]] = 1.0
        return out

    def _exact(self, n: int, idents: Sequence[str]) -> NDArray[np.float64] | None:
        """Per row, the share of ``idents`` its text holds exactly (case aside, not inside a
        longer word); None without identifiers. Only rows holding every part term of an
        identifier (the rarest one's postings) are read."""
        if not idents:
            return None
        share = np.zeros(n, dtype=np.float64)
        for ident in idents:
            terms = tokenize(ident)
            parts = terms[1:] if len(terms) > 1 else terms
            postings = [self._postings.get(t) for t in parts]
            if not parts or any(p is None for p in postings):
                continue
            rarest = min((p for p in postings if p is not None), key=lambda p: len(p[0]))
            pattern = re.compile(rf"(?<!\w){re.escape(ident)}(?!\w)", re.IGNORECASE)
            for rid in rarest[0]:
                if rid < n and pattern.search(self._rows[rid].text):
                    share[rid] += 1.0 / len(idents)
        return share if share.any() else None

    def _fuse(
        self,
        query: str,
        n: int,
        top_k: int,
        allowed: NDArray[np.bool_],
        bm25: NDArray[np.float64],
        terms: list[str],
        idf: dict[str, float],
        now: float | None,
    ) -> tuple[NDArray[np.intp], NDArray[np.float32], NDArray[np.float64]]:
        """Candidate rows, every row's cosine and the candidates' fused scores."""
        assert self._embedder is not None
        if self._pending and self.search_embed_rows > 0:
            batch = self.pending_batch(self.search_embed_rows, newest=True)
            self.install(batch, self.compute(batch))
        query_vector = self._embedder.embed([query])[0]
        dense: NDArray[np.float32] = self._vectors[:n] @ query_vector
        embedded = allowed & self._embedded[:n]
        size = max(CANDIDATES, 8 * top_k)
        dense_ids = _top(np.where(embedded, dense, -np.inf), size, embedded)
        lexical = np.where(allowed, bm25, 0.0)
        bm25_ids = _top(lexical, size, lexical > 0)
        candidates = np.union1d(dense_ids, bm25_ids)
        cos = dense[candidates].astype(np.float64)
        has = embedded[candidates]
        low, high = (float(cos[has].min()), float(cos[has].max())) if has.any() else (0.0, 0.0)
        dense_norm = (cos - low) / (high - low) if high - low > 1e-9 else np.ones_like(cos)
        dense_norm = np.where(has, dense_norm, 0.0)  # a row without a vector: BM25 alone
        mass = _mass(n, terms, idf)
        lex_norm = np.minimum(bm25[candidates] / mass, 1.0) if mass > 0 else np.zeros_like(cos)
        newest = float(self._ts[:n].max()) if now is None else now
        age = np.maximum(newest - self._ts[candidates], 0.0)
        recency = RECENCY_WEIGHT * np.exp2(-age / HALF_LIFE)
        fused = DENSE_WEIGHT * dense_norm + (1 - DENSE_WEIGHT) * lex_norm + recency
        return candidates, dense, fused

    def _hits(
        self,
        candidates: NDArray[np.intp],
        fused: NDArray[np.float64],
        bm25: NDArray[np.float64],
        dense: NDArray[np.float32] | None,
        top_k: int,
        terms: set[str],
        idf: dict[str, float],
    ) -> list[MemHit]:
        """One hit per turn (its best row), ranked by score, newer turn, turn id."""
        if not len(candidates):
            return []
        # Only the best rows can be a turn's best; widen until top_k turns or no rows are left.
        want = 8 * top_k
        while True:
            if want >= len(candidates):
                chosen = np.arange(len(candidates))
            else:
                threshold = np.partition(fused, len(fused) - want)[len(fused) - want]
                chosen = np.flatnonzero(fused >= threshold)
            order = sorted(
                chosen.tolist(),
                key=lambda i: (
                    -fused[i],
                    -self._ts[candidates[i]],
                    self._rows[candidates[i]].turn_id,
                    int(candidates[i]),
                ),
            )
            best: dict[str, int] = {}
            for i in order:
                best.setdefault(self._rows[candidates[i]].turn_id, i)
            if len(best) >= top_k or len(chosen) == len(candidates):
                break
            want *= 2
        hits = []
        for i in list(best.values())[:top_k]:
            rid = int(candidates[i])
            row = self._rows[rid]
            hits.append(
                MemHit(
                    turn_id=row.turn_id,
                    role=row.role,
                    score=float(fused[i]),
                    bm25=float(bm25[rid]),
                    dense=None if dense is None else float(dense[rid]),
                    ts=row.ts,
                    snippet=_cap(snippet(row.text, terms, idf) or row.text),
                    path=row.path,
                    text=row.text,
                )
            )
        return hits


def row_texts(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The texts ``MemIndex.add`` would index from ``rows`` (well-formed rows only), for
    embedding them into the cache without an index (``cache_vectors``)."""
    return [row.text for raw in rows if (row := _parse(raw)) is not None]


def cache_vectors(
    embedder: TextEmbedder, cache: VectorCache | None, texts: Sequence[str]
) -> tuple[list[bytes], int]:
    """The float16 vector of each text, from ``cache`` or else from ``embedder`` (and then put
    in ``cache``), and how many went through the model. Blocking (the model): a worker
    thread's work."""
    dim = int(embedder.dim)
    keys = [vector_key(embedder.model_id, text) for text in texts]
    found: dict[str, bytes] = {}
    if cache is not None:
        for key, raw in cache.get_many(sorted(set(keys))).items():
            if _usable_vector(raw, dim) is not None:
                found[key] = raw
    missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in found}
    if missing:
        order = list(missing)
        vectors = embedder.embed([missing[k] for k in order], batch_size=EMBED_BATCH)
        fresh = {key: encode_vector(vector) for key, vector in zip(order, vectors, strict=True)}
        if cache is not None:
            cache.put_many(fresh)
        found.update(fresh)
    log.debug("memindex: %d vectors (%d embedded)", len(keys), len(missing))
    return [found[key] for key in keys], len(missing)


def _usable_vector(vector: Any, dim: int) -> NDArray[np.float32] | None:
    """``vector`` decoded when it has the model's width and finite values, else None (a row's
    or a cache entry's vector: what ``add`` and ``cache_vectors`` accept)."""
    if vector is None:
        return None
    try:
        decoded = decode_vector(vector)
    except (TypeError, ValueError):
        return None
    if decoded.shape != (dim,) or not np.isfinite(decoded).all():
        return None
    return decoded


def _mass(n: int, terms: Sequence[str], idf: Mapping[str, float]) -> float:
    """The idf mass of the query: what a row with every query term once, at average length,
    scores (a term in no row counts with the idf of such a term)."""
    return sum(idf.get(t, math.log(1 + (n + 0.5) / 0.5)) for t in terms)


def _boost(
    candidates: NDArray[np.intp],
    fused: NDArray[np.float64],
    exact: NDArray[np.float64],
    allowed: NDArray[np.bool_],
    weight: float,
) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """``candidates`` joined by the allowed rows with an exact identifier, their fused score
    raised by ``weight`` times their share of the query's identifiers."""
    extra = np.setdiff1d(np.flatnonzero((exact > 0) & allowed), candidates)
    if len(extra):
        candidates = np.concatenate([candidates, extra])
        fused = np.concatenate([fused, np.zeros(len(extra))])
    return candidates, fused + weight * exact[candidates]


def _top(values: NDArray[Any], size: int, eligible: NDArray[np.bool_]) -> NDArray[np.intp]:
    """Indices of the ``size`` largest ``values`` among ``eligible`` ones (any order)."""
    count = int(eligible.sum())
    if count <= size:
        return np.flatnonzero(eligible)
    part = np.argpartition(values, len(values) - size)[len(values) - size :]
    return part[eligible[part]]
