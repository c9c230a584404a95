"""How the memsearch index fuses its two rankers into one score, and why these constants.

``MemIndex.search`` scores BM25 (``actline.tools.search.bm25``: ``K1``, ``B``, terms from
``actline.tools.search.text.tokenize``) with numpy over the postings of the query terms only.
With an embedder (hybrid) it takes the cosine of every embedded row to the query vector (one
matrix product), keeps the best ``CANDIDATES`` rows of each ranker and fuses them by a convex
combination, which Bruch, Gai and Ingber ("An Analysis of Fusion Functions for Hybrid
Retrieval", ACM TOIS 2023) found more accurate than reciprocal rank fusion::

    score = w * dense' + (1 - w) * bm25' + RECENCY_WEIGHT * 2 ** (-age / HALF_LIFE)
            + SPEAKER_BOOST * speaks + EXACT_BOOST * exact
    row score = score + TURN_WEIGHT * (best score among the other candidate rows of its turn)

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

- turn: a turn is its prompt and its answer, and a person asking recalls them together ("who
  covers for me?" names the prompt's words and the answer's), so the turn's best row gets
  ``TURN_WEIGHT = 0.3`` of its second best row's score (``with_turn``; the best row stays the
  best for a weight below 1). Chosen on the tuning sets alone (``memqueries_tuning`` and the
  harder ``memqueries_tuning2``): with MiniLM 0 gives 79/88 and 61/71, 0.1 79 and 61, 0.2 80
  and 62, 0.3 and 0.5 80 and 64; with mpnet 0 gives 83/88 and 62/71, 0.3 83 and 63.

In BM25 mode the score is the raw BM25 score, plus the idf mass for a speaker and more than
the best score for an exact identifier.

Measured (``tests/tools/search/test_memsearch_recall.py``, ``test_memsearch_unseen.py``): recall@3
of hybrid ranking 22/24 on the first 200-turn conversation, 80/88 on the tuning set of the
second (``memfixture``), 64/71 on its second tuning set, 33/37 on its unseen set and 35/38 on
its blind set, neither of which the constants were tuned on (BM25 alone: 4/24, 53/88, 37/71,
22/37, 24/38; without the turn term 22, 79, 61, 32, 34); every identifier that
appears in one turn ranks it first (20 of 20, hybrid and BM25), near-neighbour ids in the
filler notwithstanding. ``w`` from 0.5 to 0.8, min-max over all rows, z-scores, raw cosines,
extra rows per clause or per whole turn all stay within two queries of this on the tuning
sets, and reciprocal rank fusion loses up to 9. Tried on the tuning set, against
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

The BM25 side is ``actline.tools.search.bm25``, the vectors ``actline.tools.search.vectors``; the
index that keeps both and filters, embeds and picks one hit per turn is
``actline.tools.search.memindex``.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["EXACT_BOOST", "SPEAKER_BOOST", "TURN_WEIGHT", "boost", "fuse", "top", "with_turn"]

DENSE_WEIGHT: Final = 0.5
"""Weight of the normalised cosine in the hybrid score; BM25 gets the rest."""
RECENCY_WEIGHT: Final = 0.02
HALF_LIFE: Final = 30 * 86_400.0
"""Seconds after which the recency bonus of a row halves."""
CANDIDATES: Final = 100
"""Rows each ranker contributes to the fusion (at least; ``8 * top_k`` when larger)."""
SPEAKER_BOOST: Final = 1.0
"""Added (hybrid; times the query's idf mass in BM25 mode) to the rows whose speaker a query
term names: "what did the reviewer say?" wants the reviewer's DONE, not the prompt that
mentions the reviewer."""
EXACT_BOOST: Final = 1.0
"""Added to the score of a row holding every identifier of the query exactly (a share of it
for some of them): more than any fused score without it, so an exact id wins rank 1."""
TURN_WEIGHT: Final = 0.3
"""Share of the best other row's score of the same turn added to a row's (hybrid): a question
and its answer are read together, so a turn whose prompt and answer both match beats one
whose single row matches a little better."""


def fuse(
    dense: NDArray[np.float32],
    embedded: NDArray[np.bool_],
    allowed: NDArray[np.bool_],
    bm25: NDArray[np.float64],
    mass: float,
    ts: NDArray[np.float64],
    now: float | None,
    top_k: int,
) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """The candidate rows of a hybrid search and their fused scores (without the boosts).

    ``dense`` is every row's cosine to the query, ``embedded`` the allowed rows with a vector,
    ``bm25`` every row's BM25, ``mass`` the query's idf mass (``actline.tools.search.bm25.mass``),
    ``ts`` every row's time; ``now`` (default: the newest row's time) dates the recency bonus.
    """
    size = max(CANDIDATES, 8 * top_k)
    dense_ids = top(np.where(embedded, dense, -np.inf), size, embedded)
    lexical = np.where(allowed, bm25, 0.0)
    bm25_ids = top(lexical, size, lexical > 0)
    candidates = np.union1d(dense_ids, bm25_ids)
    cos = dense[candidates].astype(np.float64)
    has = embedded[candidates]
    low, high = (float(cos[has].min()), float(cos[has].max())) if has.any() else (0.0, 0.0)
    dense_norm = (cos - low) / (high - low) if high - low > 1e-9 else np.ones_like(cos)
    dense_norm = np.where(has, dense_norm, 0.0)  # a row without a vector: BM25 alone
    lex_norm = np.minimum(bm25[candidates] / mass, 1.0) if mass > 0 else np.zeros_like(cos)
    newest = float(ts.max()) if now is None else now
    age = np.maximum(newest - ts[candidates], 0.0)
    recency = RECENCY_WEIGHT * np.exp2(-age / HALF_LIFE)
    fused = DENSE_WEIGHT * dense_norm + (1 - DENSE_WEIGHT) * lex_norm + recency
    return candidates, fused


def boost(
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


def with_turn(
    turns: NDArray[np.integer[Any]], fused: NDArray[np.float64], weight: float
) -> NDArray[np.float64]:
    """``fused`` plus ``weight`` times the best score among the other candidate rows of the same
    turn (``turns``: each candidate's turn code); a turn's best row stays its best for
    ``weight`` below 1, its score becoming best + ``weight`` * second best."""
    if not len(fused) or weight == 0:
        return fused
    order = np.lexsort((-fused, turns))
    ranked_turns = turns[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = ranked_turns[1:] != ranked_turns[:-1]
    starts = np.flatnonzero(first)
    group = np.cumsum(first) - 1
    best = fused[order[starts]]
    second = np.zeros(len(starts))
    has_second = np.zeros(len(order), dtype=bool)
    has_second[starts[starts + 1 < len(order)] + 1] = True
    has_second &= ~first
    second[group[has_second]] = fused[order[has_second]]
    other = np.where(first, second[group], best[group])
    out = fused.copy()
    out[order] = fused[order] + weight * other
    return out


def top(values: NDArray[Any], size: int, eligible: NDArray[np.bool_]) -> NDArray[np.intp]:
    """Indices of the ``size`` largest ``values`` among ``eligible`` ones (any order)."""
    count = int(eligible.sum())
    if count <= size:
        return np.flatnonzero(eligible)
    part = np.argpartition(values, len(values) - size)[len(values) - size :]
    return part[eligible[part]]
