"""DONE summaries are memory: "what did the reviewer say?" finds the reviewer's words.

The blocks are the ones a turn writes (``actline.actors.turn.blocks``: the ``agent.send`` call and
the applied DONE), persisted to a real store with their memsearch rows; a later view of the
conversation searches them (BM25 alone and hybrid with the real model) and reopens the DONE by
the path the hit gives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.actors.turn import events as ev
from actline.actors.turn.blocks import call_block, signal_block
from actline.storage import Store
from actline.timeline.blocks import COMPLETION
from actline.timeline.paths import ar_path
from actline.tools.embeddings.minilm import Embedder
from actline.tools.react.memsearch import index_rows
from actline.tools.search.memindex import MemIndex
from actline.tools.search.vectors import DictVectorCache

from .conversation import TOOLS, Conv

SUMMARY = (
    "The login patch is fine, but the password field needs a maximum length and a test "
    "that covers it; the error message should not echo the input."
)
FILLER = [
    ("Can you review my cover letter for the product designer job?", "It reads well; shorten "
     "the second paragraph and end with what you would do in the first month."),
    ("Please review the quarterly budget spreadsheet.", "The travel line is over by 12 percent; "
     "everything else matches the plan."),
    ("What should a code review checklist contain?", "Tests, naming, error handling, security "
     "of inputs, and whether the change is small enough to review in one sitting."),
    ("Say something nice for Lena's farewell card.", "Thank you for the patience, the jokes and "
     "the best onboarding docs we ever had."),
    ("What did the customer survey say about onboarding?", "Most people liked the checklist; "
     "the main complaint was the long sign-up form."),
]  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "db") as opened:
        yield opened


def _stored(store: Store) -> None:
    """Turn t1 asks the reviewer and records its DONE; filler turns talk about reviews."""
    old = Conv(store=store)
    old.begin("t1", "Ask the reviewer to check the login form patch before we merge it.")
    params = {"name": "reviewer", "text": "Review the login form patch in PR 812."}
    old.tl.append(call_block("t1", "k1", "agent.send", params, old.tick()))
    done = ev.DoneSignal(signal_id="s1", agent="reviewer", turn_id="t1", summary=SUMMARY)
    old.tl.append(signal_block("t1", done, "task1", old.tick()))
    old.add(COMPLETION, ar_path("t1", "assistant.completion"), "The reviewer has answered.")
    for i, (prompt, answer) in enumerate(FILLER, start=2):
        old.begin(f"t{i}", prompt)
        old.add(COMPLETION, ar_path(f"t{i}", "assistant.completion"), answer)
    store.persist(old.tl, index=index_rows)


def _search(store: Store, memindex: MemIndex | None) -> tuple[Conv, dict[str, object]]:
    conv = Conv(store=store)  # a later view: turn t1 is only in the store
    conv.begin("t9", "what did the reviewer say?")
    ctx = dataclasses.replace(conv.ctx(), memindex=memindex)
    outcome = TOOLS.run("react.memsearch", {"query": "what did the reviewer say?"}, ctx)
    assert outcome.ok
    return conv, outcome.result | {"codes": [n.code for n in outcome.notices]}


def test_the_done_summary_and_the_task_text_are_index_rows(store: Store) -> None:
    _stored(store)
    rows = {r["path"]: r for r in store.index_rows("c1")}
    done = rows["ar:t1.signal.done.task1"]
    assert done["role"] == "agents" and done["text"] == f"reviewer: {SUMMARY}"
    task = rows["tc:t1.k1.call"]
    assert task["role"] == "agents"
    assert task["text"] == "task for reviewer: Review the login form patch in PR 812."


@pytest.mark.parametrize("ranking", ["bm25", "hybrid"])
def test_what_did_the_reviewer_say_finds_the_done_and_reopens_it(
    store: Store, ranking: str
) -> None:
    _stored(store)
    memindex = None
    if ranking == "hybrid":
        memindex = MemIndex(Embedder.load(), DictVectorCache())
        memindex.add(store.index_rows("c1"))
    conv, result = _search(store, memindex)
    assert result["ranking"] == ranking
    # BM25 alone is said out loud: a notice, not a silent fallback.
    assert result["codes"] == (["memsearch_keywords_only"] if ranking == "bm25" else [])
    hits = result["hits"]
    assert isinstance(hits, list)
    best = hits[0]
    assert best["turn_id"] == "t1" and best["role"] == "agents"
    assert best["block_path"] == "ar:t1.signal.done.task1"
    assert "maximum length" in best["snippet"]
    reopened = conv.run("react.read", {"paths": [best["block_path"]]})
    assert reopened.ok and reopened.result["paths"][0]["source"] == "store"
    assert [b.text for b in reopened.blocks] == [f"reviewer: {SUMMARY}"]
