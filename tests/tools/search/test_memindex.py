"""The memsearch index: incremental adds, filters, one hit per turn, ranking, vectors and cache.

Most tests use ``BagEmbedder``, a small deterministic stand-in for the model (a sum of one
random vector per word), so that they are fast and count what gets embedded; the recall test
(``test_memsearch_recall.py``) runs the real model.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from actline.tools.embeddings.minilm import EmbeddingsUnavailable
from actline.tools.search.fusion import with_turn
from actline.tools.search.memindex import SNIPPET_CHARS, MemHit, MemIndex
from actline.tools.search.text import tokenize
from actline.tools.search.vectors import (
    DictVectorCache,
    decode_vector,
    encode_vector,
    vector_key,
)

T0 = 1_800_000_000.0
DAY = 86_400.0
ROLES = {"user", "assistant", "notes", "summary", "attachment"}


class BagEmbedder:
    """Deterministic word-bag vectors: texts sharing words point the same way."""

    dim = 32
    model_id = "bag-test"

    def __init__(self) -> None:
        self.calls = 0
        self.texts: list[str] = []

    def _word(self, word: str) -> NDArray[np.float64]:
        return np.random.default_rng(zlib.crc32(word.encode())).standard_normal(self.dim)

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> NDArray[np.float32]:
        self.calls += 1
        self.texts.extend(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            vector = sum((self._word(w) for w in tokenize(text)), np.zeros(self.dim))
            norm = np.linalg.norm(vector)
            out[i] = vector / norm if norm else np.eye(self.dim)[0]
        return out


def row(turn: int, role: str, text: str, ts: float | None = None, **extra: Any) -> dict[str, Any]:
    when = T0 + turn * 3600.0 if ts is None else ts
    path = f"ar:t{turn}.{role}"
    return {"turn_id": f"t{turn}", "role": role, "ts": when, "text": text, "path": path, **extra}


ROWS = [
    row(1, "user", "How do I rotate the staging database password?"),
    row(1, "assistant", "Rotate it in Vault; the staging database password changes every 45 days."),
    row(2, "user", "Draft an email to Globex about the overdue invoice."),
    row(2, "assistant", "Here is a friendly reminder about the invoice and the payment link."),
    row(3, "user", "Who owns the billing migration?"),
    row(3, "assistant", "Priya owns the billing migration and the invoice tables."),
    row(3, "notes", "[K] Priya owns billing migration"),
    row(4, "user", "Suggest a two-day itinerary for Porto."),
    row(4, "assistant", "Walk the old town, eat at a tasca, take the tram to the beach."),
    row(5, "summary", "Earlier: database password rotation, invoices, billing owner, Porto trip."),
    row(6, "attachment", "staging-db-runbook.pdf: the database password rotation procedure"),
]
QUERIES = ["database password", "billing migration owner", "invoice", "Porto", "rotation"]


def ranking(index: MemIndex, query: str, **kw: Any) -> list[tuple[str, str, float]]:
    kw.setdefault("roles", ROLES)
    return [(h.turn_id, h.role, round(h.score, 9)) for h in index.search(query, **kw)]


def test_incremental_adds_rank_like_one_bulk_add() -> None:
    bulk = MemIndex()
    assert bulk.add(ROWS) == len(ROWS)
    incremental = MemIndex()
    for r in ROWS:
        assert incremental.add([r]) == 1
    assert len(bulk) == len(incremental) == len(ROWS)
    for query in QUERIES:
        assert ranking(bulk, query, top_k=10) == ranking(incremental, query, top_k=10)


@given(st.lists(st.integers(min_value=1, max_value=len(ROWS)), max_size=6))
def test_any_split_into_add_calls_gives_the_same_hybrid_ranking(cuts: list[int]) -> None:
    bulk = MemIndex(BagEmbedder())
    bulk.add(ROWS)
    split = MemIndex(BagEmbedder())
    start = 0
    for cut in [*sorted(set(cuts)), len(ROWS)]:
        split.add(ROWS[start:cut])
        split.embed_pending()
        start = max(start, cut)
    for query in QUERIES:
        assert ranking(bulk, query, top_k=10) == ranking(split, query, top_k=10)


def test_bm25_scores_equal_a_plain_implementation() -> None:
    index = MemIndex()
    index.add(ROWS)
    docs = [Counter(tokenize(r["text"])) for r in ROWS]
    average = sum(sum(d.values()) for d in docs) / len(docs)
    terms = set(tokenize("staging database password"))
    expected: dict[str, float] = {}
    for r, counts in zip(ROWS, docs, strict=True):
        score = 0.0
        for term in terms:
            df = sum(1 for d in docs if term in d)
            if counts[term]:
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                norm = 1.5 * (1 - 0.75 + 0.75 * sum(counts.values()) / average)
                score += idf * counts[term] * 2.5 / (counts[term] + norm)
        expected[r["turn_id"]] = max(expected.get(r["turn_id"], 0.0), score)
    hits = index.search("staging database password", roles=ROLES, top_k=10)
    assert {h.turn_id: h.bm25 for h in hits} == pytest.approx(
        {turn: score for turn, score in expected.items() if score > 0}
    )
    assert all(h.score == h.bm25 and h.dense is None for h in hits)


def test_roles_select_the_rows_searched() -> None:
    index = MemIndex()
    index.add(ROWS)
    assert [h.role for h in index.search("database password", roles={"summary"})] == ["summary"]
    assert [h.turn_id for h in index.search("database password", roles={"attachment"})] == ["t6"]
    assert {h.role for h in index.search("database password", roles={"user", "assistant"})} <= {
        "user",
        "assistant",
    }
    assert index.search("database password", roles={"nonexistent"}) == []
    assert index.search("database password", roles=()) == []


def test_since_drops_older_rows() -> None:
    index = MemIndex()
    index.add(ROWS)
    since = T0 + 4 * 3600.0
    hits = index.search("database password billing Porto", roles=ROLES, top_k=10, since=since)
    assert hits
    assert all(h.ts >= since for h in hits)
    assert {h.turn_id for h in hits} == {"t4", "t5", "t6"}


def test_excluded_turns_are_never_returned() -> None:
    index = MemIndex(BagEmbedder())
    index.add(ROWS)
    hits = index.search("billing migration", roles=ROLES, top_k=10, exclude_turns={"t3", "t9"})
    assert hits
    assert "t3" not in {h.turn_id for h in hits}


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_each_turn_gives_one_hit_its_best_row(mode: Literal["bm25", "hybrid"]) -> None:
    index = MemIndex(BagEmbedder())
    index.add(ROWS)
    hits = index.search("Priya billing migration", roles=ROLES, top_k=10, mode=mode)
    turns = [h.turn_id for h in hits]
    assert len(turns) == len(set(turns))
    assert turns[0] == "t3"
    assert hits == sorted(hits, key=lambda h: -h.score)


def test_top_k_limits_the_turns() -> None:
    index = MemIndex(BagEmbedder())
    index.add(ROWS)
    assert len(index.search("database", roles=ROLES, top_k=2)) == 2
    with pytest.raises(ValueError, match="top_k"):
        index.search("database", roles=ROLES, top_k=0)


def test_equal_scores_go_to_the_newer_turn_then_the_smaller_turn_id() -> None:
    index = MemIndex(BagEmbedder())
    index.add(
        [
            row(1, "user", "the quarterly report is ready", ts=T0),
            row(2, "user", "the quarterly report is ready", ts=T0 + 50),
            row(3, "user", "the quarterly report is ready", ts=T0 + 50),
            row(4, "user", "lunch on Friday", ts=T0 + 10),
        ]
    )
    modes: tuple[Literal["bm25", "hybrid"], ...] = ("bm25", "hybrid")
    for mode in modes:
        hits = index.search("quarterly report", roles={"user"}, top_k=3, mode=mode)
        assert [h.turn_id for h in hits] == ["t2", "t3", "t1"]
        assert hits == index.search("quarterly report", roles={"user"}, top_k=3, mode=mode)


def test_exact_duplicates_are_added_once() -> None:
    index = MemIndex()
    assert index.add(ROWS) == len(ROWS)
    assert index.add(ROWS) == 0
    assert index.duplicates == len(ROWS)
    same_text_other_turn = {**ROWS[0], "turn_id": "t99"}
    assert index.add([same_text_other_turn]) == 1
    assert len(index) == len(ROWS) + 1


def test_malformed_rows_are_skipped_and_counted() -> None:
    good = row(1, "user", "a fine row")
    bad: list[Any] = [
        {k: v for k, v in good.items() if k != "turn_id"},
        {**good, "turn_id": ""},
        {**good, "role": 7},
        {**good, "ts": "yesterday"},
        {**good, "ts": True},
        {**good, "ts": math.nan},
        {**good, "text": "   "},
        {**good, "text": None},
        {**good, "path": 12},
        "not a mapping",
    ]
    index = MemIndex()
    assert index.add([*bad, good]) == 1
    assert index.skipped == len(bad)
    assert len(index) == 1
    assert index.search("fine", roles={"user"})[0].text == "a fine row"


def test_bm25_mode_ignores_vectors_and_never_embeds() -> None:
    embedder = BagEmbedder()
    index = MemIndex(embedder)
    assert index.mode == "hybrid"
    index.add(ROWS)
    hits = index.search("database password", roles=ROLES, mode="bm25")
    assert hits
    assert all(h.dense is None and h.score == h.bm25 > 0 for h in hits)
    assert embedder.calls == 0
    assert index.pending() == len(ROWS)


def test_an_index_without_embedder_is_bm25_and_refuses_hybrid() -> None:
    index = MemIndex()
    index.add([row(1, "user", "hello there", vector=encode_vector(np.ones(32) / math.sqrt(32)))])
    assert index.mode == "bm25"
    assert index.pending() == 0
    assert index.embed_pending() == 0
    assert index.search("hello", roles={"user"})[0].dense is None
    with pytest.raises(EmbeddingsUnavailable):
        index.search("hello", roles={"user"}, mode="hybrid")


def test_hybrid_search_embeds_pending_rows_first() -> None:
    embedder = BagEmbedder()
    index = MemIndex(embedder)
    index.add(ROWS)
    assert index.pending() == len(ROWS)
    hits = index.search("Porto itinerary", roles=ROLES)
    assert index.pending() == 0
    assert hits[0].turn_id == "t4"
    assert hits[0].dense is not None and hits[0].dense > 0


def test_hybrid_finds_a_row_without_shared_words_by_its_vector() -> None:
    """BM25 cannot see the row; its vector (given with the row) is what finds it."""
    embedder = BagEmbedder()
    target = embedder.embed(["secret handshake"])[0]
    index = MemIndex(embedder)
    index.add(ROWS)
    index.add([row(7, "notes", "unrelated wording entirely", vector=encode_vector(target))])
    assert index.search("secret handshake", roles=ROLES, mode="bm25") == []
    hits = index.search("secret handshake", roles=ROLES)
    assert hits[0].turn_id == "t7"
    assert hits[0].bm25 == 0.0
    assert hits[0].dense == pytest.approx(1.0, abs=1e-3)


def test_rows_carrying_vectors_are_used_as_is() -> None:
    embedder = BagEmbedder()
    given_vectors = BagEmbedder().embed([r["text"] for r in ROWS])
    index = MemIndex(embedder)
    index.add([{**r, "vector": encode_vector(v)} for r, v in zip(ROWS, given_vectors, strict=True)])
    assert index.pending() == 0
    hits = index.search("billing migration", roles=ROLES, top_k=10)
    assert hits
    assert embedder.texts == ["billing migration"]
    query = embedder.embed(["billing migration"])[0]
    stored = {
        r["text"]: decode_vector(encode_vector(v)) for r, v in zip(ROWS, given_vectors, strict=True)
    }
    for hit in hits:
        assert hit.dense == pytest.approx(float(stored[hit.text] @ query), abs=1e-6)


def test_a_vector_of_the_wrong_size_waits_for_embedding() -> None:
    index = MemIndex(BagEmbedder())
    index.add([row(1, "user", "hello there", vector=encode_vector(np.ones(8)))])
    index.add([row(2, "user", "hello again", vector=b"\x00\x01\x02")])
    assert index.pending() == 2
    assert index.embed_pending() == 2


def test_embed_pending_goes_through_the_cache() -> None:
    cache = DictVectorCache()
    first = BagEmbedder()
    index = MemIndex(first, cache)
    index.add(ROWS)
    assert index.embed_pending(max_rows=3) == 3
    assert index.pending() == len(ROWS) - 3
    assert index.embed_pending() == len(ROWS) - 3
    assert index.embed_pending() == 0
    assert sorted(first.texts) == sorted(r["text"] for r in ROWS)
    assert len(cache) == len(ROWS)
    assert vector_key(first.model_id, ROWS[0]["text"]) in cache.data

    second = BagEmbedder()
    again = MemIndex(second, cache)
    again.add(ROWS)
    assert again.embed_pending() == len(ROWS)
    assert second.texts == []
    for query in QUERIES:
        assert ranking(index, query) == ranking(again, query)


def test_the_same_text_in_two_turns_is_embedded_once() -> None:
    embedder = BagEmbedder()
    index = MemIndex(embedder, DictVectorCache())
    index.add([row(1, "user", "same words"), row(2, "user", "same words")])
    assert index.embed_pending() == 2
    assert embedder.texts == ["same words"]


def test_the_snippet_is_short_and_shows_the_query_terms() -> None:
    filler = "Nothing to see in this sentence about gardens and weather. " * 12
    text = filler + "The staging database password rotates every 45 days. " + filler
    index = MemIndex()
    index.add([row(1, "assistant", text)])
    hit = index.search("staging password rotation", roles={"assistant"})[0]
    assert len(hit.snippet) <= SNIPPET_CHARS
    assert "staging database password rotates" in hit.snippet
    assert hit.text == text


def test_a_query_without_terms_or_rows_finds_nothing() -> None:
    assert MemIndex().search("database", roles=ROLES) == []
    index = MemIndex()
    index.add(ROWS)
    assert index.search("   ", roles=ROLES) == []
    assert index.search("the of and", roles=ROLES) == []


def test_a_hit_carries_its_row_and_serialises() -> None:
    index = MemIndex()
    index.add(ROWS)
    hit = index.search("Porto", roles=ROLES)[0]
    assert isinstance(hit, MemHit)
    assert hit.to_dict() == {
        "turn_id": "t4",
        "role": "user",
        "score": hit.score,
        "bm25": hit.bm25,
        "dense": None,
        "ts": T0 + 4 * 3600.0,
        "snippet": "Suggest a two-day itinerary for Porto.",
        "path": "ar:t4.user",
        "text": "Suggest a two-day itinerary for Porto.",
    }


def test_vectors_round_trip_through_float16_bytes() -> None:
    vector = BagEmbedder().embed(["round trip"])[0]
    raw = encode_vector(vector)
    assert len(raw) == 2 * len(vector)
    back = decode_vector(raw)
    assert back.dtype == np.float32
    assert np.allclose(back, vector, atol=2e-3)
    assert np.linalg.norm(back) == pytest.approx(1.0, abs=1e-6)
    assert np.allclose(decode_vector(list(vector)), vector, atol=1e-6)


@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.floats(0, 3, allow_nan=False)), min_size=0, max_size=12
    ),
    st.sampled_from([0.0, 0.3, 0.9]),
)
def test_a_row_gains_a_share_of_the_best_other_row_of_its_turn(
    rows: list[tuple[int, float]], weight: float
) -> None:
    turns = np.array([t for t, _ in rows], dtype=np.int32)
    fused = np.array([f for _, f in rows], dtype=np.float64)
    got = with_turn(turns, fused, weight)
    for i, (turn, score) in enumerate(rows):
        others = [f for j, (t, f) in enumerate(rows) if j != i and t == turn]
        assert got[i] == pytest.approx(score + weight * max(others, default=0.0))
    for turn in set(turns.tolist()):  # a turn's best row stays its best
        mine = np.flatnonzero(turns == turn)
        assert fused[mine].max() == fused[mine[np.argmax(got[mine])]]


def test_a_turn_whose_prompt_and_answer_both_match_beats_one_matching_row() -> None:
    index = MemIndex(BagEmbedder())
    index.add(
        [
            row(1, "user", "which port does the exporter use now"),
            row(1, "assistant", "the exporter port is 9187"),
            row(2, "user", "which port does the exporter use"),
            row(2, "assistant", "lunch is at noon in the canteen"),
        ]
    )
    index.embed_pending()
    query = "which port does the exporter use"
    assert [h.turn_id for h in index.search(query, roles=ROLES, top_k=2)] == ["t1", "t2"]
    index.turn_weight = 0.0  # each row alone: the exact prompt wins
    assert [h.turn_id for h in index.search(query, roles=ROLES, top_k=2)] == ["t2", "t1"]
