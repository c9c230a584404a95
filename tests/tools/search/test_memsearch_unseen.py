"""memsearch recall on a second conversation (``memfixture``), with two held-out query sets.

The ranking was tuned on ``memqueries_tuning``; ``memqueries_unseen`` was written first and
kept out of the tuning, but its totals were seen while tuning, so ``memqueries_blind`` was
written later, before any further ranking change and never used to choose
anything. All three are measured and printed (``pytest -s``) with BM25 alone beside hybrid,
and so is rank 1 for every identifier that appears in one turn only (the filler talks about
near-neighbour ids in the same words).

Each test runs with both dense models (``ACTLINE_EMBED_MODEL``): all-MiniLM-L6-v2, the default,
and all-mpnet-base-v2, which reaches the 0.9 target (``TARGET``) on the project's three first
sets. ``memqueries_tuning2`` is a second tuning set in a harder style (no content word shared
with the fact, partial recall, bare identifiers). Embedding the 400 rows takes about 2 s with
MiniLM and 8 to 36 s with mpnet on this project's shared 2-core machine (once per module).
"""

from __future__ import annotations

import os

import pytest

from actline.tools.embeddings.minilm import Embedder
from actline.tools.embeddings.mpnet import MPNetEmbedder
from actline.tools.search.memindex import MemIndex
from actline.tools.search.vectors import DictVectorCache

from . import (
    memfixture,
    memqueries_blind,
    memqueries_fresh,
    memqueries_tuning,
    memqueries_tuning2,
    memqueries_unseen,
)

TOP = 3
TARGET = 0.9
ROLES = {"user", "assistant"}
SETS = {
    "tuning": memqueries_tuning,
    "tuning2": memqueries_tuning2,
    "unseen": memqueries_unseen,
    "blind": memqueries_blind,
    "fresh": memqueries_fresh,
}
# Embedding the 400 rows with mpnet takes 8 to 36 s, more on a busy machine: the fixture's
# setup counts against the first test's time limit.
pytestmark = pytest.mark.timeout(600)


FULL = os.environ.get("ACTLINE_RECALL_FULL") == "1"
"""Every set with both models (``make recall``). Otherwise (``make test``) the default model
alone: the optional all-mpnet-base-v2's query embeddings cost minutes on two cores (its own
tests, ``tests/tools/embeddings/test_mpnet.py``, run in ``make test``)."""


@pytest.fixture(scope="module", params=["minilm", "mpnet"] if FULL else ["minilm"])
def model(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def index(model: str, request: pytest.FixtureRequest) -> MemIndex:
    # `make` installs both models; mpnet comes unpacked from the session's `mpnet` fixture.
    embedder = Embedder.load() if model == "minilm" else request.getfixturevalue("mpnet")
    assert isinstance(embedder, MPNetEmbedder) == (model == "mpnet")
    index = MemIndex(embedder, DictVectorCache())
    assert index.add(memfixture.conversation()) == 2 * memfixture.TURNS
    assert index.embed_pending() == 2 * memfixture.TURNS
    return index


def recall(index: MemIndex, queries: list[tuple[str, int]], mode: str) -> tuple[float, list[str]]:
    misses = []
    for query, turn in queries:
        hits = index.search(query, roles=ROLES, top_k=TOP, mode=mode)  # type: ignore[arg-type]
        if memfixture.turn_id(turn) not in [h.turn_id for h in hits]:
            misses.append(f"{query!r}: want {turn}, got {[h.turn_id for h in hits]}")
    return 1 - len(misses) / len(queries), misses


def test_the_fixture_plants_every_fact_and_the_query_sets_cover_them() -> None:
    rows = list(memfixture.conversation())
    assert rows == list(memfixture.conversation())
    assert len({r["turn_id"] for r in rows}) == memfixture.TURNS == 200
    texts = {(r["turn_id"], r["text"]) for r in rows}
    for turn, user, answer in memfixture.FACTS:
        assert (memfixture.turn_id(turn), user) in texts
        assert (memfixture.turn_id(turn), answer) in texts
    assert len(memfixture.FACTS) >= 25
    facts = {turn for turn, _, _ in memfixture.FACTS}
    seen: set[str] = set()
    for module in SETS.values():
        assert len(module.QUERIES) >= 35
        assert {turn for _, turn in module.QUERIES} == facts
        asked = {q for q, _ in module.QUERIES}
        assert not asked & seen, "the query sets share no query"
        seen |= asked
    for fact_id in memfixture.FACT_IDS:  # the ids of the facts are in their fact turn only
        assert {r["turn_id"] for r in rows if fact_id in r["text"]} != set()
        assert all(
            r["turn_id"] in {memfixture.turn_id(t) for t in facts}
            for r in rows
            if fact_id in r["text"]
        )
    for family in memfixture.NEIGHBOUR_IDS.values():  # near neighbours are talked about
        assert sum(any(n in r["text"] for r in rows) for n in family) >= 2


FLOORS = {
    "minilm": {"tuning": 0.90, "tuning2": 0.90, "unseen": 0.89, "blind": 0.92, "fresh": 0.78},
    "mpnet": {"tuning": 0.94, "tuning2": 0.88, "unseen": 0.97, "blind": 0.92, "fresh": 0.76},
}
"""What each set is asserted to keep with each model: its measured recall (one query fewer
fails). all-MiniLM-L6-v2: tuning 80 of 88 = 0.909, tuning2 64 of 71 = 0.901, unseen 33 of 37 =
0.892, blind 35 of 38 = 0.921; before a turn's second row counted (``TURN_WEIGHT``), 79, 61, 32
and 34. all-mpnet-base-v2 with the same fusion: tuning 83 of 88 = 0.943, tuning2 63 of 71 =
0.887, unseen 36 of 37 = 0.973, blind 35 of 38 = 0.921 (before: 83, 62, 36, 35). The constants
were chosen on the two tuning sets alone, then unseen and blind measured once. Asserted so that
the recall cannot silently get worse; raise them when the ranking gets better. ``fresh`` (46
queries in the hardest style: 26 share no content word with the fact) was written while the
ranking was being tuned, by someone who never saw it, and measured once after the tuning:
MiniLM 37 of 46 = 0.804, mpnet 36 of 46 = 0.783, BM25 alone 18 of 46 = 0.391."""
REACHES_TARGET = {"minilm": {"tuning", "tuning2"}, "mpnet": {"tuning", "unseen", "blind"}}
"""The sets on which a model is asserted to reach ``TARGET``."""


@pytest.mark.parametrize("name", list(SETS), ids=[f"{name}-set" for name in SETS])
def test_hybrid_recall_at_three(index: MemIndex, model: str, name: str) -> None:
    queries = SETS[name].QUERIES
    hybrid, misses = recall(index, queries, "hybrid")
    bm25, _ = recall(index, queries, "bm25")
    print(f"\nmemsearch recall@{TOP}, {name} set ({len(queries)} queries, 200 turns), {model}:")
    print(f"  bm25 {bm25:.3f}  hybrid {hybrid:.3f}  (target {TARGET})")
    assert hybrid >= FLOORS[model][name], "\n".join(misses)
    if name in REACHES_TARGET[model]:
        assert hybrid >= TARGET, "\n".join(misses)


def test_exact_identifiers_rank_first(index: MemIndex) -> None:
    queries = memfixture.id_queries()
    assert len(queries) >= 10
    assert {memfixture.turn_id(t) for t in (17, 41, 63, 92, 137, 144)} <= {t for _, t in queries}
    wrong = []
    for mode in ("hybrid", "bm25"):
        for query, turn in queries:
            hits = index.search(query, roles=ROLES, top_k=TOP, mode=mode)
            if not hits or hits[0].turn_id != turn:
                wrong.append(f"{mode} {query!r}: want {turn}, got {[h.turn_id for h in hits]}")
    print(f"\nexact identifiers at rank 1: {2 * len(queries) - len(wrong)} of {2 * len(queries)}")
    assert not wrong, "\n".join(wrong)


def test_facts_only_in_an_answer_are_found(index: MemIndex, model: str) -> None:
    """Thirteen facts live only in the assistant's answer: asked about, their turn is found."""
    for name, module in SETS.items():
        queries = [(q, t) for q, t in module.QUERIES if t in memfixture.ANSWER_ONLY]
        found, misses = recall(index, queries, "hybrid")
        print(f"\nfacts only in an answer, {name} set: {found:.3f} of {len(queries)} queries")
        assert found >= FLOORS[model][name], "\n".join(misses)
