"""react.plan and react.write: plan snapshots, notes, and files written for the turn."""

from __future__ import annotations

from typing import Any

import pytest

from actline.storage import Store, Workspace
from actline.timeline.blocks import NOTE

from .conversation import Conv, refused

# -- react.plan ----------------------------------------------------------------------------------


def test_plan_create_update_close_records_snapshots() -> None:
    conv = Conv()
    conv.begin("t1")
    created = conv.run("react.plan", {"mode": "create", "steps": ["Search", "Answer"]})
    assert created.ok and created.result["plan_id"] == "plan_1"
    assert created.result["steps"] == ["□ 1. Search", "□ 2. Answer"]
    assert conv.tl.plans.current is not None
    snapshot = conv.tl.latest_plan_block("plan_1")
    assert snapshot is not None and snapshot.path == "ar:t1.react.plan.plan_1"
    assert snapshot.seq < conv.tl.blocks_at("tc:t1.c1.result")[0].seq
    updated = conv.run("react.plan", {"mode": "update", "steps": ["Search", "Read", "Answer"]})
    assert updated.ok and updated.result["revision"] == 2
    closed = conv.run("react.plan", {"mode": "close", "plan_id": "plan_1"})
    assert closed.ok and closed.result["state"] == "closed"
    assert conv.tl.plans.current is None
    assert len(conv.tl.blocks_at("ar:t1.react.plan.plan_1")) == 3


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"mode": "destroy", "steps": ["a"]}, "plan_mode"),
        ({"mode": 1}, "plan_mode"),
        ({"mode": "create", "steps": "one step"}, "plan_steps"),
        ({"mode": "create", "steps": []}, "plan_steps"),
        ({"mode": "create"}, "plan_steps"),
        ({"mode": "update", "steps": ["a"]}, "plan_target_missing"),
        ({"mode": "close", "plan_id": "nope"}, "plan_target_missing"),
        ({"mode": "close", "plan_id": ["p"]}, "plan_target_required"),
    ],
)
def test_bad_plan_calls_are_refused_with_their_codes(params: dict[str, Any], code: str) -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.plan", params)
    assert refused(out, code)
    assert conv.tl.latest_plan_block("plan_1") is None


# -- react.write ---------------------------------------------------------------------------------


def _note(content: str) -> dict[str, Any]:
    return {"path": "files/notes/n.md", "channel": "internal", "content": content}


def test_an_internal_write_returns_a_note_block_with_its_tag() -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.write", {**_note("[K] retention is 72h"), "scratchpad": True})
    assert out.ok and out.result["path"] == "ar:t1.react.note.c1"
    [note] = out.blocks
    assert (note.type, note.path, note.text) == (
        NOTE,
        "ar:t1.react.note.c1",
        "[K] retention is 72h",
    )
    assert conv.tl.blocks_at("ar:t1.react.note.c1") == [note]


def test_k_notes_are_memory_facts_that_memsearch_finds() -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.write", _note("[K] retention: 72h\n[D] keep it"))
    assert out.result["facts"] == ["retention: 72h"]
    conv.begin("t2")
    conv.run("react.write", _note("[K] Retention = 48h"))
    assert [f.line() for f in conv.tl.facts.active()] == ["retention: 48h (turn t2)"]
    assert conv.tl.facts.history("retention")[0].superseded_by == "t2"
    found = conv.run("react.memsearch", {"query": "retention period", "targets": ["facts"]})
    assert found.result["hits"] == []  # only the facts were searched
    [fact] = found.result["facts"]
    assert (fact["key"], fact["value"], fact["turn_id"]) == ("retention", "48h", "t2")
    assert fact["path"] == "ar:t2.react.note.c2"


@pytest.mark.parametrize("channel", ["canvas", "timeline_text"])
def test_a_canvas_or_timeline_write_stores_a_file_of_the_turn(store: Store, channel: str) -> None:
    conv = Conv(store=store)
    conv.begin("t1")
    params = {"path": "outputs/report/summary.md", "channel": channel, "content": "# Sum"}
    out = conv.run("react.write", params)
    assert out.ok and out.result["path"] == "fi:t1.outputs/report/summary.md"
    assert Workspace(store, "c1").read("fi:t1.outputs/report/summary.md") == b"# Sum"
    shown = [b.path for b in out.blocks]
    assert shown == (["fi:t1.outputs/report/summary.md"] if channel == "timeline_text" else [])


def test_a_write_to_another_turns_file_is_rewritten_to_this_turn(store: Store) -> None:
    conv = Conv(store=store)
    conv.begin("t2")
    params = {"path": "fi:t1.files/app/main.txt", "channel": "canvas", "content": "x"}
    out = conv.run("react.write", params)
    assert out.ok and out.result["path"] == "fi:t2.files/app/main.txt"
    assert [n.full_code for n in out.notices] == ["protocol_violation.path_rewritten"]


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "notes/a.md",
        "files/../x.md",
        "files/a.md",
        "files/scope/",
        "C:\\x\\a.md",
        "fi:t1.user.attachments/a.md",
        "files/report/page.exe",
    ],
)
def test_a_write_outside_files_and_outputs_is_refused(store: Store, path: str) -> None:
    conv = Conv(store=store)
    conv.begin("t1")
    out = conv.run("react.write", {"path": path, "channel": "canvas", "content": "x"})
    assert refused(out, "bad_path")
    assert Workspace(store, "c1").turns() == []


def test_a_file_write_without_a_store_is_refused_as_workspace_unavailable() -> None:
    conv = Conv()
    conv.begin("t1")
    params = {"path": "files/a/b.md", "channel": "canvas", "content": "x"}
    assert refused(conv.run("react.write", params), "workspace_unavailable")


@pytest.mark.parametrize(
    "params",
    [
        {"path": "files/a/b.md", "channel": "email", "content": "x"},
        {"path": "files/a/b.md", "channel": "internal", "content": None},
        {"path": "files/a/b.md", "channel": "internal", "content": "x", "kind": "poster"},
    ],
)
def test_write_params_of_the_wrong_kind_are_refused(params: dict[str, Any]) -> None:
    conv = Conv()
    conv.begin("t1")
    assert refused(conv.run("react.write", params), "bad_params")
