"""react.memsearch and react.hide: finding earlier turns, and hiding tail blocks of the
context."""

from __future__ import annotations

from typing import Any

import pytest

from actline.storage import Store
from actline.timeline.blocks import COMPLETION, NOTE
from actline.timeline.paths import ar_path

from .conversation import DAY, T0, Conv, refused, rounds

# -- react.memsearch ---------------------------------------------------------------------------


def _history(store: Store | None = None) -> Conv:
    conv = Conv(store=store)
    conv.begin("t1", "What is the default retention?")
    conv.add(COMPLETION, ar_path("t1", "assistant.completion"), "Retention is 72 hours.")
    conv.tick(40 * DAY)
    conv.begin("t2", "How much does the Team tier cost?")
    conv.add(COMPLETION, ar_path("t2", "assistant.completion"), "The Team tier is $490.")
    conv.add(NOTE, ar_path("t2", "react.note.1"), "[P] the user prefers yearly retention reports")
    conv.begin("t3", "Remind me about retention")
    return conv


def test_memsearch_finds_earlier_turns_and_points_at_their_index() -> None:
    conv = _history()
    params = {"query": "default retention", "targets": ["user", "assistant"], "top_k": 5}
    out = conv.run("react.memsearch", params)
    assert out.ok
    hits = out.result["hits"]
    assert [h["turn_id"] for h in hits] == ["t1"]  # one hit per turn, never the current t3
    assert hits[0]["path"] == "ar:t1.react.turn.index"
    assert hits[0]["snippet"] == "What is the default retention?"
    assert hits[0]["role"] == "user" and hits[0]["block_path"] == "ar:t1.user.prompt"
    assert isinstance(hits[0]["score"], float) and hits[0]["ts"] < conv.now
    everywhere = conv.run("react.memsearch", {"query": "retention reports"})
    assert everywhere.result["targets"] == [
        *["user", "assistant", "notes", "summary", "attachment", "agents"],
        "facts",
    ]
    assert everywhere.result["hits"][0]["turn_id"] == "t2"  # found through its note


def test_memsearch_targets_notes_and_filters_by_days() -> None:
    conv = _history()
    notes = conv.run("react.memsearch", {"query": "retention", "targets": ["notes"]})
    assert [h["block_path"] for h in notes.result["hits"]] == ["ar:t2.react.note.1"]
    recent = conv.run("react.memsearch", {"query": "retention", "targets": ["user"], "days": 7})
    assert recent.ok and recent.result["hits"] == []
    old = conv.run("react.memsearch", {"query": "retention", "targets": ["user"], "days": 60})
    assert [h["turn_id"] for h in old.result["hits"]] == ["t1"]


def test_memsearch_reads_index_rows_of_turns_no_longer_on_the_timeline(store: Store) -> None:
    row = {"turn_id": "t0", "role": "user", "ts": T0 - 10, "text": "archived retention question"}
    store.append_turn("c1", [], {"version": 1}, index_rows=[row])
    conv = _history(store)
    out = conv.run("react.memsearch", {"query": "archived retention", "top_k": 1})
    assert [h["turn_id"] for h in out.result["hits"]] == ["t0"]


@pytest.mark.parametrize("targets", [["assistant", "emails"], [], [1], "calendar"])
def test_memsearch_with_an_unknown_target_is_refused(targets: Any) -> None:
    conv = _history()
    out = conv.run("react.memsearch", {"query": "retention", "targets": targets})
    assert refused(out, "memsearch_bad_target")


# -- react.hide ----------------------------------------------------------------------------------


def test_hide_replaces_a_tail_block_and_reports_tokens_hidden() -> None:
    conv = Conv()
    conv.begin("t1")
    rounds(conv, 6, "y" * 4000)
    out = conv.run("react.hide", {"path": "tc:t1.r6.result", "replacement": "seen it"})
    assert out.ok and out.notices == []
    assert out.result["blocks_hidden"] == 1 and out.result["tokens_hidden"] > 900
    assert conv.tl.blocks_at("tc:t1.r6.result")[0].hidden


def test_hide_before_the_cache_point_is_refused_with_its_code() -> None:
    conv = Conv()
    conv.begin("t1")
    rounds(conv, 6)
    out = conv.run("react.hide", {"path": "tc:t1.r1.result", "replacement": ""})
    assert refused(out, "hide_before_cache")
    assert out.result["hide_status"] == "too_old" and out.result["before_cache"] is True
    assert not any(b.hidden for b in conv.tl)


@pytest.mark.parametrize(
    ("path", "code"), [("tc:t1.nope.result", "hide_failed"), ("/etc/passwd", "bad_path")]
)
def test_hide_of_an_unknown_or_physical_path_is_refused(path: str, code: str) -> None:
    conv = Conv()
    conv.begin("t1")
    rounds(conv, 6)
    assert refused(conv.run("react.hide", {"path": path}), code)


def test_hide_without_a_renderer_is_refused() -> None:
    conv = Conv()
    conv.begin("t1")
    rounds(conv, 6)
    out = conv.run("react.hide", {"path": "tc:t1.r6.result"}, renderer=False)
    assert refused(out, "hide_failed")
