"""The console's views on a real LMDB store: the list of conversations (what it shows of
each, newest first and at most ``limit``) and a conversation's turns, both read without
loading any conversation whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from actline.storage import Store
from actline.timeline import Block
from actline.web import views
from bench.console_list import scanned_turns
from tests.timeline.builders import Build, words


def stored(store: Store, cid: str, turns: int, *, running: bool = False) -> None:
    b = Build()
    b.tl.conversation_id = cid
    for n in range(1, turns + 1):
        b.turn(f"t{n}", f"{cid} question {n}")
        b.rounds(2, size=60, prefix=f"c{n}x")
        b.completion(words(8))
    records = {f"t{n}": {"status": "completed"} for n in range(1, turns + 1)}
    if running:
        records[f"t{turns}"] = {"status": "running", "round": 1}
    store.persist(b.tl, turn_records=records)


def test_the_list_shows_each_conversation_from_its_outline_and_loads_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "db", sync=False) as store:
        stored(store, "c-long", 60)
        stored(store, "c-busy", 2, running=True)
        stored(store, "c-new", 1)

        def whole(*args: object, **kwargs: object) -> None:
            raise AssertionError("the list read a conversation whole")

        monkeypatch.setattr(Store, "load", whole)
        monkeypatch.setattr(Store, "iter_blocks", whole)
        rows = views.conversations(store, {}, {})
        live = views.conversations(store, {"t2": "waiting"}, {"c-busy": "t2"})
        two = views.conversations(store, {}, {}, limit=2)
        found = views.conversations(store, {}, {}, search="QUESTION 60")
    by_id = {r["conversation_id"]: r for r in rows}
    assert set(by_id) == {"c-long", "c-busy", "c-new"}
    assert by_id["c-long"]["title"] == "c-long question 1"
    assert (by_id["c-long"]["turns"], by_id["c-long"]["last_status"]) == (60, "completed")
    assert (by_id["c-busy"]["turns"], by_id["c-busy"]["last_status"]) == (2, "running")
    assert {r["conversation_id"]: r["last_status"] for r in live}["c-busy"] == "waiting"
    updated = [float(r["updated"]) for r in rows]
    assert updated == sorted(updated, reverse=True)
    assert [r["conversation_id"] for r in two] == [r["conversation_id"] for r in rows[:2]]
    assert [r["conversation_id"] for r in found] == ["c-long"]  # words of a question
    assert all(0 < r["created"] <= r["updated"] for r in rows), rows


def test_a_conversations_turns_are_read_turn_by_turn_as_the_block_scan_read_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = Build()
    b.tl.conversation_id = "c-open"
    b.turn("t1", "first question")
    b.rounds(3, size=200, prefix="a")
    b.completion("first answer")
    b.turn("t2", "second question")
    b.followup("and the price?", "f1-x")
    b.completion("a draft answer")
    b.rounds(1, prefix="b")
    b.completion("the answer after the followup")  # the latest completion is the answer
    b.turn("t3", "")  # a prompt without text, then an empty completion: both stay ""
    b.completion("")
    b.turn("t10", "a turn whose id sorts before t2")
    b.rounds(2, prefix="c")  # still running: no completion yet
    with Store(tmp_path / "db", sync=False) as store:
        store.persist(b.tl)
        expected = scanned_turns(store, "c-open")
        assert [t["turn_id"] for t in expected] == ["t1", "t2", "t3", "t10"]
        assert expected[1]["answer"] == "the answer after the followup"
        assert views.turns(store, "c-open") == expected
        # A conversation taken over from its durable copy: written again, read the same.
        blocks = list(store.iter_blocks("c-open"))
        store.replace_conversation(
            "c-open", store.header("c-open") or {}, [Block.from_dict(d) for d in blocks]
        )
        assert views.turns(store, "c-open") == expected
        assert views.turns(store, "c-none") == []

        def whole(*args: object, **kwargs: object) -> None:
            raise AssertionError("the turns view read the conversation whole")

        monkeypatch.setattr(Store, "load", whole)
        monkeypatch.setattr(Store, "iter_blocks", whole)
        assert views.turns(store, "c-open") == expected
