"""The console's list of conversations on a real LMDB store: what it shows of each, read
without loading any conversation whole, newest first and at most ``limit``."""

from __future__ import annotations

from pathlib import Path

import pytest

from actline.web import views
from storage import Store
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
    by_id = {r["conversation_id"]: r for r in rows}
    assert set(by_id) == {"c-long", "c-busy", "c-new"}
    assert by_id["c-long"]["title"] == "c-long question 1"
    assert (by_id["c-long"]["turns"], by_id["c-long"]["last_status"]) == (60, "completed")
    assert (by_id["c-busy"]["turns"], by_id["c-busy"]["last_status"]) == (2, "running")
    assert {r["conversation_id"]: r["last_status"] for r in live}["c-busy"] == "waiting"
    updated = [float(r["updated"]) for r in rows]
    assert updated == sorted(updated, reverse=True)
    assert [r["conversation_id"] for r in two] == [r["conversation_id"] for r in rows[:2]]
