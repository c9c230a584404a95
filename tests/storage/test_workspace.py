"""The versioned workspace: fi: paths resolve by turn, history is kept, layout never leaks."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actline.storage import NotStored, Store
from actline.storage import artifacts as art
from actline.storage.workspace import Workspace
from actline.timeline import PathError


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path) as s:
        yield s


@pytest.fixture
def ws(store: Store) -> Workspace:
    return Workspace(store, "c1")


def artifact_count(store: Store) -> int:
    return store.read(lambda txn: int(txn.stat(store.db["artifacts"])["entries"]))


def test_each_turn_reads_the_version_it_saw(ws: Workspace) -> None:
    assert ws.write("t1", "files", "proj/app.py", b"v1") == "fi:t1.files/proj/app.py"
    ws.write("t2", "files", "proj/app.py", b"v2")
    ws.begin_turn("t3")
    assert ws.read("fi:t1.files/proj/app.py") == b"v1"
    assert ws.read("fi:t2.files/proj/app.py") == b"v2"
    assert ws.read("fi:t3.files/proj/app.py") == b"v2"
    stat = ws.stat("fi:t3.files/proj/app.py")
    assert stat["path"] == "fi:t3.files/proj/app.py"
    assert stat["version"] == "fi:t2.files/proj/app.py"
    assert (stat["turn_id"], stat["size"], stat["deleted"]) == ("t2", 2, False)
    assert ws.turns() == ["t1", "t2", "t3"]


def test_a_file_first_written_later_is_absent_in_earlier_turns(ws: Workspace) -> None:
    ws.write("t1", "files", "a/one.txt", b"1")
    ws.write("t2", "files", "a/two.txt", b"2")
    with pytest.raises(NotStored) as caught:
        ws.read("fi:t1.files/a/two.txt")
    assert (caught.value.kind, caught.value.key) == ("file", "fi:t1.files/a/two.txt")


def test_a_turn_the_workspace_does_not_know_is_not_stored(ws: Workspace) -> None:
    ws.write("t1", "files", "a.txt", b"1")
    with pytest.raises(NotStored) as caught:
        ws.read("fi:t9.files/a.txt")
    assert (caught.value.kind, caught.value.key) == ("workspace turn", "c1/t9")
    with pytest.raises(NotStored):
        ws.tree("t9")


def test_begin_turn_is_idempotent_and_keeps_first_write_order(ws: Workspace) -> None:
    assert ws.begin_turn("t1") == 1
    ws.write("t2", "files", "x", b"x")
    assert ws.begin_turn("t1") == 1
    ws.write("t1", "files", "y", b"y")  # a late write keeps t1 before t2
    assert ws.begin_turn("t2") == 2
    assert ws.turns() == ["t1", "t2"]
    assert list(ws.tree("t1")) == ["y"]
    assert list(ws.tree("t2")) == ["x", "y"]
    with pytest.raises(PathError) as caught:
        ws.begin_turn("t.1")
    assert (caught.value.rule, caught.value.path) == ("bad_turn_id", "t.1")


def test_writing_again_in_the_same_turn_replaces_that_version(store: Store, ws: Workspace) -> None:
    ws.write("t1", "files", "notes.md", b"draft")
    ws.write("t1", "files", "notes.md", b"final", mime="text/markdown")
    assert ws.read("fi:t1.files/notes.md") == b"final"
    (only,) = ws.versions("files", "notes.md")
    assert only["mime"] == "text/markdown"
    draft = hashlib.sha256(b"draft").hexdigest()
    assert art.refcount(store, draft) == 0
    assert art.gc(store) == (1, len(b"draft"))
    assert ws.read("fi:t1.files/notes.md") == b"final"


def test_rewriting_the_same_bytes_in_a_turn_keeps_one_reference(
    store: Store, ws: Workspace
) -> None:
    ws.write("t1", "files", "a", b"same")
    ws.write("t1", "files", "a", b"same")
    assert art.refcount(store, ws.stat("fi:t1.files/a")["sha"]) == 1


def test_a_tombstone_hides_the_file_from_later_turns_only(ws: Workspace) -> None:
    ws.write("t1", "files", "doc/a.md", b"a1")
    ws.write("t2", "files", "doc/a.md", b"a2")
    ws.write("t2", "files", "doc/b.md", b"b2")
    assert ws.delete("t4", "files", "doc/a.md") == "fi:t4.files/doc/a.md"
    ws.begin_turn("t5")
    for turn in ("t4", "t5"):
        with pytest.raises(NotStored):
            ws.read(f"fi:{turn}.files/doc/a.md")
    assert ws.read("fi:t2.files/doc/a.md") == b"a2"
    assert ws.read("fi:t1.files/doc/a.md") == b"a1"
    assert ws.listdir("fi:t5.files/doc/") == ["fi:t5.files/doc/b.md"]
    assert ws.listdir("fi:t2.files/doc/") == ["fi:t2.files/doc/a.md", "fi:t2.files/doc/b.md"]
    history = ws.versions("files", "doc/a.md")
    assert [(v["turn_id"], v["deleted"]) for v in history] == [
        ("t1", False),
        ("t2", False),
        ("t4", True),
    ]
    assert history[-1]["sha"] == "" and history[0]["path"] == "fi:t1.files/doc/a.md"
    with pytest.raises(NotStored):
        ws.delete("t5", "files", "doc/a.md")  # already gone as of t5
    with pytest.raises(NotStored):
        ws.delete("t5", "files", "doc/never.md")


def test_a_tombstone_then_a_new_write_brings_the_file_back(ws: Workspace) -> None:
    ws.write("t1", "files", "a", b"1")
    ws.delete("t2", "files", "a")
    ws.write("t3", "files", "a", b"3")
    assert ws.read("fi:t3.files/a") == b"3"
    assert list(ws.tree("t2")) == []
    assert list(ws.tree("t3")) == ["a"]


def test_listdir_and_tree_answer_as_of_a_turn(ws: Workspace) -> None:
    ws.write("t1", "files", "bundle/src/app.py", b"app1")
    ws.write("t1", "files", "bundle/README.md", b"readme")
    ws.write("t1", "files", "bundleother/x", b"x")
    ws.write("t2", "files", "bundle/src/app.py", b"app2")
    ws.write("t2", "files", "bundle/src/util.py", b"util")
    ws.write("t2", "outputs", "bundle/report.pdf", b"%PDF")
    assert ws.listdir("fi:t1.files/bundle/") == [
        "fi:t1.files/bundle/README.md",
        "fi:t1.files/bundle/src/app.py",
    ]
    assert ws.listdir("fi:t2.files/bundle") == [
        "fi:t2.files/bundle/README.md",
        "fi:t2.files/bundle/src/app.py",
        "fi:t2.files/bundle/src/util.py",
    ]
    assert ws.listdir("fi:t2.files/bundle/src/") == [
        "fi:t2.files/bundle/src/app.py",
        "fi:t2.files/bundle/src/util.py",
    ]
    assert ws.listdir("fi:t2.files/nothing/") == []
    assert ws.listdir("fi:t2.outputs/bundle/") == ["fi:t2.outputs/bundle/report.pdf"]
    t1 = ws.tree("t1")
    assert list(t1) == ["bundle/README.md", "bundle/src/app.py", "bundleother/x"]
    assert t1["bundle/src/app.py"]["version"] == "fi:t1.files/bundle/src/app.py"
    t2 = ws.tree("t2")
    assert t2["bundle/README.md"]["path"] == "fi:t2.files/bundle/README.md"
    assert t2["bundle/README.md"]["version"] == "fi:t1.files/bundle/README.md"
    assert t2["bundle/src/app.py"]["size"] == 4
    assert list(ws.tree("t2", "outputs")) == ["bundle/report.pdf"]


def test_a_folder_path_is_not_a_file(ws: Workspace) -> None:
    ws.write("t1", "files", "bundle/a", b"a")
    for call in (ws.read, ws.stat):
        with pytest.raises(NotStored) as caught:
            call("fi:t1.files/bundle/")
        assert caught.value.kind == "file"
    with pytest.raises(PathError) as refused:
        ws.write("t1", "files", "bundle/", b"x")
    assert refused.value.rule == "bad_segment"


def test_outputs_and_attachments_belong_to_the_turn_that_produced_them(ws: Workspace) -> None:
    out = ws.write("t1", "outputs", "reports/q1.pdf", b"%PDF-1", mime="application/pdf")
    att = ws.write("t1", "user.attachments", "photo.png", b"\x89PNG", mime="image/png")
    follow = ws.write_followup_attachment("t2", "mabc123", "receipt.pdf", b"receipt")
    assert out == "fi:t1.outputs/reports/q1.pdf"
    assert att == "fi:t1.user.attachments/photo.png"
    assert follow == "fi:t2.external.followup.attachments/mabc123/receipt.pdf"
    assert ws.read(out) == b"%PDF-1"
    assert ws.read(att) == b"\x89PNG"
    assert ws.read(follow) == b"receipt"
    assert ws.stat(att)["mime"] == "image/png"
    assert ws.stat(follow)["rel"] == "mabc123/receipt.pdf"
    for later in (
        "fi:t2.outputs/reports/q1.pdf",
        "fi:t2.user.attachments/photo.png",
    ):
        with pytest.raises(NotStored):
            ws.read(later)
    assert list(ws.tree("t2", "external.followup.attachments")) == ["mabc123/receipt.pdf"]
    assert list(ws.tree("t1", "user.attachments")) == ["photo.png"]
    assert ws.delete("t2", "external.followup.attachments", "mabc123/receipt.pdf") == follow
    with pytest.raises(NotStored):
        ws.read(follow)


def test_the_same_content_in_two_files_is_stored_once(store: Store, ws: Workspace) -> None:
    ws.write("t1", "files", "a/copy1.bin", b"shared payload")
    ws.write("t1", "outputs", "b/copy2.bin", b"shared payload")
    Workspace(store, "c2").write("x1", "user.attachments", "copy3.bin", b"shared payload")
    assert artifact_count(store) == 1
    sha = ws.stat("fi:t1.files/a/copy1.bin")["sha"]
    assert sha == ws.stat("fi:t1.outputs/b/copy2.bin")["sha"]
    assert art.refcount(store, sha) == 3


def test_conversations_do_not_see_each_other(store: Store) -> None:
    one, two = Workspace(store, "c1"), Workspace(store, "c10")
    one.write("t1", "files", "a", b"one")
    two.write("t1", "files", "a", b"two")
    two.write("t2", "files", "b", b"two")
    assert one.read("fi:t1.files/a") == b"one"
    assert two.read("fi:t1.files/a") == b"two"
    assert one.turns() == ["t1"]
    assert list(one.tree("t1")) == ["a"]
    with pytest.raises(ValueError):
        Workspace(store, "bad\x00id")


@pytest.mark.parametrize(
    ("rel", "rule"),
    [
        ("../etc/passwd", "dot_segment"),
        ("a/../../b", "dot_segment"),
        ("a/./b", "dot_segment"),
        ("/etc/passwd", "absolute_path"),
        ("~/secret", "absolute_path"),
        ("C:/Windows/x", "absolute_path"),
        ("a\\b", "physical_path"),
        ("a//b", "bad_segment"),
        ("a/ b", "bad_segment"),
    ],
)
def test_writes_outside_the_grammar_are_refused(ws: Workspace, rel: str, rule: str) -> None:
    with pytest.raises(PathError) as caught:
        ws.write("t1", "files", rel, b"x")
    assert caught.value.rule == rule
    assert ws.turns() == []


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("fi:t1.files/../../etc/passwd", "dot_segment"),
        ("/etc/passwd", "absolute_path"),
        ("~/notes.txt", "absolute_path"),
        ("C:\\Users\\x", "absolute_path"),
        ("../outside.txt", "physical_path"),
        ("bundle/app.py", "physical_path"),
        ("file:///etc/passwd", "physical_path"),
        ("fi:t1.attachments/a.png", "bad_area"),
        ("fi:t1.scratch/a", "bad_area"),
        ("fi:t 1.files/a", "bad_turn_id"),
        ("ar:t1.user.prompt", "unknown_prefix"),
        ("ks:docs/a.md", "unknown_prefix"),
        ("tc:t1.c1.result", "unknown_prefix"),
    ],
)
def test_reads_outside_the_workspace_are_refused(ws: Workspace, path: str, rule: str) -> None:
    ws.write("t1", "files", "a", b"x")
    for call in (ws.read, ws.stat, ws.listdir):
        with pytest.raises(PathError) as caught:
            call(path)
        assert caught.value.rule == rule, (call, path)


def test_bad_areas_are_refused_by_every_entry_point(ws: Workspace) -> None:
    for write in (
        lambda: ws.write("t1", "scratch", "a", b"x"),
        lambda: ws.write("t1", "external.followup.attachments", "m/a", b"x"),
        lambda: ws.delete("t1", "scratch", "a"),
        lambda: ws.tree("t1", "scratch"),
        lambda: ws.versions("scratch", "a"),
    ):
        with pytest.raises(PathError) as caught:
            write()
        assert caught.value.rule == "bad_area"
    with pytest.raises(PathError) as user_folder:
        ws.listdir("fi:t1.user.attachments/a.png")
    assert user_folder.value.rule == "bad_area"
    with pytest.raises(PathError) as nested:
        ws.write("t1", "user.attachments", "dir/a.png", b"x")
    assert nested.value.rule == "bad_segment"
    with pytest.raises(PathError) as follow:
        ws.write_followup_attachment("t1", "m.1", "a", b"x")
    assert follow.value.rule == "bad_id"
    with pytest.raises(PathError) as follow_abs:
        ws.write_followup_attachment("t1", "m1", "/etc/passwd", b"x")
    assert follow_abs.value.rule == "absolute_path"


def test_no_result_reveals_where_the_store_lives(store: Store, ws: Workspace) -> None:
    ws.write("t1", "files", "a/b.txt", b"x", mime="text/plain")
    ws.delete("t2", "files", "a/b.txt")
    seen = [
        ws.stat("fi:t1.files/a/b.txt"),
        *ws.tree("t1").values(),
        *ws.versions("files", "a/b.txt"),
        *ws.listdir("fi:t1.files/a/"),
    ]
    assert str(store.path) not in repr(seen)
    for stat in ws.versions("files", "a/b.txt"):
        assert stat["path"].startswith("fi:") and stat["version"].startswith("fi:")


def test_a_rel_too_long_for_an_lmdb_key_still_works(ws: Workspace) -> None:
    rel = "deep/" + "/".join(["ü" * 120] * 8)  # ~1900 bytes of UTF-8, under 1024 characters
    ws.write("t1", "files", rel, b"deep1")
    ws.write("t2", "files", rel, b"deep2")
    ws.write("t2", "files", "deep/short", b"s")
    ws.begin_turn("t3")
    assert ws.read(f"fi:t1.files/{rel}") == b"deep1"
    assert ws.read(f"fi:t3.files/{rel}") == b"deep2"
    assert ws.listdir("fi:t3.files/deep/") == ["fi:t3.files/deep/short", f"fi:t3.files/{rel}"]
    assert ws.listdir("fi:t3.files/other/") == []
    assert [v["turn_id"] for v in ws.versions("files", rel)] == ["t1", "t2"]
    ws.delete("t3", "files", rel)
    assert list(ws.tree("t3")) == ["deep/short"]


def test_the_workspace_survives_reopening_the_store(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        Workspace(store, "c1").write("t1", "files", "a", b"kept")
    with Store(tmp_path / "db") as store:
        ws = Workspace(store, "c1")
        assert ws.read("fi:t1.files/a") == b"kept"
        assert ws.write("t2", "files", "b", b"new") == "fi:t2.files/b"
        assert ws.turns() == ["t1", "t2"]


# -- a model: any sequence of writes and deletes resolves like a plain dict per turn -------------

TURNS = ["t1", "t2", "t3", "t4"]
RELS = ["a", "a/b", "a/b/c", "ab", "z"]
ops = st.lists(
    st.tuples(
        st.sampled_from(TURNS),
        st.sampled_from(["files", "outputs"]),
        st.sampled_from(RELS),
        st.one_of(st.none(), st.binary(max_size=4)),
    ),
    max_size=25,
)
_stores = itertools.count()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_resolution_matches_a_model_of_per_turn_snapshots(
    tmp_path: Path, ops: list[tuple[str, str, str, bytes | None]]
) -> None:
    with Store(tmp_path / f"m{next(_stores)}") as store:  # a fresh store per example
        ws = Workspace(store, "c1")
        for turn in TURNS:
            ws.begin_turn(turn)
        written: dict[tuple[str, str, str], bytes | None] = {}  # (area, rel, turn) -> data
        for turn, area, rel, data in ops:
            if data is None:
                try:
                    ws.delete(turn, area, rel)
                except NotStored:
                    continue
            else:
                ws.write(turn, area, rel, data)
            written[(area, rel, turn)] = data
        for i, turn in enumerate(TURNS):
            for area in ("files", "outputs"):
                seen = TURNS[: i + 1] if area == "files" else [turn]
                expected: dict[str, bytes] = {}
                for rel in RELS:
                    latest = [written[(area, rel, t)] for t in seen if (area, rel, t) in written]
                    if latest and latest[-1] is not None:
                        expected[rel] = latest[-1]
                tree = ws.tree(turn, area)
                assert list(tree) == sorted(expected)
                for rel, data in expected.items():
                    assert ws.read(f"fi:{turn}.{area}/{rel}") == data
                under = [p for p in expected if p.startswith("a/")]
                assert ws.listdir(f"fi:{turn}.{area}/a/") == [
                    f"fi:{turn}.{area}/{p}" for p in sorted(under)
                ]
        live = sum(1 for data in written.values() if data is not None)
        referenced = store.read(
            lambda txn: sum(int.from_bytes(v, "big") for _, v in txn.cursor(db=store.db["artrefs"]))
        )
        assert referenced == live


def test_trees_refuses_what_tree_refuses_and_reads_every_area_as_of_the_turn(
    ws: Workspace,
) -> None:
    ws.write("t1", "files", "a.md", b"a")
    ws.write("t2", "outputs", "r.txt", b"r")
    assert ws.trees("t2", ("files", "outputs")) == {
        "files": ws.tree("t2", "files"),
        "outputs": ws.tree("t2", "outputs"),
    }
    with pytest.raises(PathError) as bad_area:
        ws.trees("t2", ("files", "nowhere"))
    assert bad_area.value.rule == "bad_area"
    with pytest.raises(PathError) as bad_turn:
        ws.trees("t2/..", ("files",))
    assert bad_turn.value.rule == "bad_turn_id"
    with pytest.raises(NotStored):
        ws.trees("t9", ("files",))  # a turn that never began
