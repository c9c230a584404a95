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

``search`` ranks rows by BM25 over the inverted index (``actline.tools.search.bm25``) and, with
an embedder (hybrid), by the cosine of every embedded row to the query vector (one matrix
product), fused by a convex combination with a recency bonus, a speaker boost, an exact
identifier boost and a share of the score of the turn's other best row;
``actline.tools.search.fusion`` gives the formula and how its constants were measured. Vectors,
their encoding and the cache are ``actline.tools.search.vectors``.

Rows are filtered by role, ``since`` and ``exclude_turns``; each turn gives one hit, its best
row; ties go to the newer turn, then the smaller turn id. The index is not thread-safe: one
owner at a time, only ``compute`` may run elsewhere. Unlike ``actline.tools.embeddings.minilm``,
this module imports numpy at load, BM25 mode included.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from actline.tools.embeddings.minilm import EmbeddingsUnavailable

from .bm25 import Bm25Index, mass
from .fusion import EXACT_BOOST, SPEAKER_BOOST, TURN_WEIGHT, boost, fuse, with_turn
from .text import identifiers, snippet, tokenize
from .vectors import (
    TextEmbedder,
    VectorCache,
    cache_vectors,
    decode_vector,
    usable_vector,
    vector_key,
)

__all__ = ["SNIPPET_CHARS", "MemHit", "MemIndex", "PendingBatch", "row_texts"]

SNIPPET_CHARS: Final = 240
SEARCH_EMBED_ROWS: Final = 16
"""Pending rows a hybrid search embeds itself (the newest); older ones rank by BM25 alone
until the owner's background embedding reaches them."""


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
        self._lexical = Bm25Index()
        self._role_codes: dict[str, int] = {}
        self._turn_codes: dict[str, int] = {}
        self._turn_ids: list[str] = []
        self._capacity = 0
        self._ts = np.zeros(0, dtype=np.float64)
        self._role = np.zeros(0, dtype=np.int32)
        self._turn = np.zeros(0, dtype=np.int32)
        self._dim = 0 if embedder is None else int(embedder.dim)
        self._vectors = np.zeros((0, self._dim), dtype=np.float32)
        self._embedded = np.zeros(0, dtype=bool)
        self._pending: dict[int, None] = {}
        """Row ids without a vector, oldest first (an ordered set)."""
        self.search_embed_rows = SEARCH_EMBED_ROWS
        self.turn_weight = TURN_WEIGHT
        """``actline.tools.search.fusion.TURN_WEIGHT`` (hybrid); 0 ranks each row alone."""
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
        self._lexical.add(rid, row.text, row.speaker)
        if self._embedder is not None:
            decoded = self._row_vector(vector)
            if decoded is None:
                self._pending[rid] = None
            else:
                self._vectors[rid] = decoded
                self._embedded[rid] = True

    def _row_vector(self, vector: Any) -> NDArray[np.float32] | None:
        return usable_vector(vector, self._dim)

    def _grow(self, capacity: int) -> None:
        def grown(old: NDArray[Any]) -> NDArray[Any]:
            new = np.zeros((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: len(old)] = old
            return new

        self._ts, self._role, self._turn = grown(self._ts), grown(self._role), grown(self._turn)
        if self._embedder is not None:
            self._vectors = grown(self._vectors)
            self._embedded = grown(self._embedded)
        self._lexical.grow(capacity)
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
        bm25, idf = self._lexical.scores(n, terms)
        exact = self._lexical.exact(n, identifiers(query), lambda rid: self._rows[rid].text)
        speaking = self._lexical.speaking(n, terms)
        dense: NDArray[np.float32] | None = None
        if hybrid:
            candidates, dense, fused = self._fuse(query, n, top_k, allowed, bm25, terms, idf, now)
            if speaking is not None:
                candidates, fused = boost(candidates, fused, speaking, allowed, SPEAKER_BOOST)
            if exact is not None:
                candidates, fused = boost(candidates, fused, exact, allowed, EXACT_BOOST)
            fused = with_turn(self._turn[candidates], fused, self.turn_weight)
        else:
            candidates = np.flatnonzero((bm25 > 0) & allowed)
            fused = bm25[candidates]
            if speaking is not None:
                weight = SPEAKER_BOOST * mass(n, terms, idf)
                candidates, fused = boost(candidates, fused, speaking, allowed, weight)
            if exact is not None:
                top = float(fused.max(initial=0.0)) + 1.0
                candidates, fused = boost(candidates, fused, exact, allowed, top)
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
        weight = mass(n, terms, idf)
        candidates, fused = fuse(dense, embedded, allowed, bm25, weight, self._ts[:n], now, top_k)
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
