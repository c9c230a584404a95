"""react.write/pull/patch/checkout/search_files on the versioned workspace, in both modes.

Real parts only: an LMDB store in a temp dir (custom mode), a git repository under the temp
dir (git mode), the real timeline and renderer.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.storage import NotStored, Store
from actline.timeline import Block, Renderer, Timeline
from actline.timeline.blocks import NOTE, TOOL_CALL, USER_PROMPT
from actline.timeline.paths import ar_path, tc_path
from actline.tools.react.core import ReactContext, ReactOutcome, ReactTools
from actline.tools.workspace.patching import PatchError, apply_patch
from actline.tools.workspace.workspace import (
    LocalTree,
    WorkspaceBackend,
    open_workspace,
    workspace_lines,
)

T0 = 1_800_000_000.0
TOOLS = ReactTools()
MODES = ("custom", "git")


class Session:
    """One conversation whose turns run react.* calls against a workspace of one mode."""

    def __init__(self, root: Path, mode: str, cid: str = "c1") -> None:
        self.store = Store(root / "db")
        self.workspace: WorkspaceBackend = open_workspace(
            mode, store=self.store, root=root / "ws" / cid, conversation_id=cid
        )
        self.local = LocalTree(self.workspace, root / "ws" / cid)
        self.tl = Timeline(cid)
        self.renderer = Renderer(self.tl)
        self.now = T0
        self.calls = 0
        self.turn = ""

    def close(self) -> None:
        self.store.close()

    def begin(self, turn: str) -> None:
        self.turn = turn
        self.now += 10
        self.tl.begin_turn(turn, self.now)
        self.workspace.begin_turn(turn)
        path = ar_path(turn, "user.prompt")
        self.tl.append(Block.new(USER_PROMPT, turn, self.now, path=path, text="edit the app"))

    def end(self) -> None:
        self.workspace.end_turn(self.turn)
        self.local.clear()

    def run(self, tool: str, params: dict[str, Any]) -> ReactOutcome:
        self.calls += 1
        self.now += 1
        ctx = ReactContext(
            self.tl,
            self.renderer,
            self.turn,
            f"c{self.calls}",
            self.now,
            store=self.store,
            workspace=self.workspace,
            local=self.local,
        )
        call = Block.new(
            TOOL_CALL,
            self.turn,
            self.now,
            path=tc_path(self.turn, ctx.call_id, "call"),
            data={"tool": tool, "params": params},
        )
        self.tl.append(call)
        outcome = TOOLS.run(tool, params, ctx)
        self.tl.extend(outcome.to_blocks(ctx))
        return outcome

    def files(self, turn: str | None = None) -> dict[str, bytes]:
        tree = self.workspace.tree(turn or self.turn, "files")
        return {rel: self.workspace.read(info["path"]) for rel, info in tree.items()}

    def outputs(self, turn: str | None = None) -> dict[str, bytes]:
        tree = self.workspace.tree(turn or self.turn, "outputs")
        return {rel: self.workspace.read(info["path"]) for rel, info in tree.items()}


@pytest.fixture(params=MODES)
def session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    opened = Session(tmp_path, request.param)
    yield opened
    opened.close()


def write(s: Session, path: str, content: str, channel: str = "timeline_text") -> ReactOutcome:
    return s.run(
        "react.write", {"path": path, "channel": channel, "content": content, "kind": "file"}
    )


def codes(outcome: ReactOutcome) -> list[str]:
    return [n.code for n in outcome.notices]


MAIN_V1 = "def main():\n    print('hello')\n\n\nif __name__ == '__main__':\n    main()\n"
MAIN_DIFF = """--- a/files/app/main.py
+++ b/files/app/main.py
@@ -1,2 +1,3 @@
 def main():
-    print('hello')
+    name = 'world'
+    print(f'hello {name}')
"""
HIST_DIFF = """@@ -2 +2 @@
-    print('hello')
+    print('hello again')
"""


def scripted_session(s: Session) -> list[tuple[dict[str, bytes], dict[str, bytes]]]:
    """Five turns of edits; the files and outputs after each turn."""
    seen: list[tuple[dict[str, bytes], dict[str, bytes]]] = []

    def checkpoint() -> None:
        seen.append((s.files(), s.outputs()))
        s.end()

    s.begin("t1")
    assert write(s, "files/app/main.py", MAIN_V1).ok
    assert write(s, "files/app/README.md", "# App\n", channel="canvas").ok
    assert write(s, "outputs/report/summary.md", "turn one\n", channel="canvas").ok
    checkpoint()

    s.begin("t2")
    assert s.run("react.patch", {"path": "files/app/main.py", "patch": MAIN_DIFF}).ok
    assert write(s, "files/app/util.py", "X = 1\n").ok
    checkpoint()

    s.begin("t3")
    before = s.files()
    pulled = s.run("react.pull", {"paths": ["fi:t1.files/app/main.py"]})
    assert pulled.ok, pulled.result
    assert s.files() == before  # pull never changes the active workspace
    patched = s.run("react.patch", {"path": "fi:t1.files/app/main.py", "patch": HIST_DIFF})
    assert patched.ok, patched.result
    assert patched.result["based_on"] == "fi:t1.files/app/main.py"
    assert s.run("react.patch", {"path": "files/app/util.py", "patch": "X = 2\n"}).ok
    checkpoint()

    s.begin("t4")
    out = s.run("react.checkout", {"paths": ["fi:t1.files/app/README.md"], "mode": "replace"})
    assert out.ok, out.result
    assert sorted(out.result["removed"]) == ["app/main.py", "app/util.py"]
    checkpoint()

    s.begin("t5")
    out = s.run("react.checkout", {"paths": ["fi:t2.files/app/"], "mode": "overlay"})
    assert out.ok, out.result
    assert write(s, "outputs/report/final.md", "done\n", channel="canvas").ok
    checkpoint()
    return seen


def test_the_same_edit_session_gives_the_same_files_in_custom_and_git_mode(
    tmp_path: Path,
) -> None:
    results = {}
    for mode in MODES:
        s = Session(tmp_path / mode, mode)
        try:
            results[mode] = scripted_session(s)
        finally:
            s.close()
    assert results["custom"] == results["git"]
    turns = results["custom"]
    assert turns[0][0] == {"app/README.md": b"# App\n", "app/main.py": MAIN_V1.encode()}
    assert turns[0][1] == {"report/summary.md": b"turn one\n"}
    assert b"hello {name}" in turns[1][0]["app/main.py"] and turns[1][1] == {}
    assert b"hello again" in turns[2][0]["app/main.py"]  # t1's version, patched after pull
    assert turns[2][0]["app/util.py"] == b"X = 2\n"
    assert turns[3][0] == {"app/README.md": b"# App\n"}
    assert set(turns[4][0]) == {"app/README.md", "app/main.py", "app/util.py"}
    assert b"hello {name}" in turns[4][0]["app/main.py"]
    assert turns[4][1] == {"report/final.md": b"done\n"}


def test_history_stays_readable_after_later_turns(session: Session) -> None:
    scripted_session(session)
    ws = session.workspace
    assert ws.read("fi:t1.files/app/main.py") == MAIN_V1.encode()
    assert ws.read("fi:t1.outputs/report/summary.md") == b"turn one\n"
    with pytest.raises(NotStored):
        ws.read("fi:t4.files/app/main.py")  # removed by the replace checkout
    assert [v["turn_id"] for v in ws.versions("files", "app/main.py")][:3] == ["t1", "t2", "t3"]


# -- react.write ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "files/../etc/passwd",
        "files/app/../../x.py",
        "/etc/passwd",
        "../files/app/x.py",
        "./files/app/x.py",
        "C:\\files\\x.py",
        "~/x.py",
        "src/app.py",
        "https://example.com/x.py",
        "files/x.py",
    ],
)
def test_write_refuses_traversal_and_physical_paths(session: Session, path: str) -> None:
    session.begin("t1")
    out = write(session, path, "x")
    assert out.result["status"] == "error" and codes(out) == ["bad_path"]
    assert session.files() == {} and session.outputs() == {}
    assert not any(p.name == "x.py" or p.name == "passwd" for p in session.local.root.rglob("*"))


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"channel": "canvas", "path": "files/a/b.md", "content": "x"}, "path_not_first"),
        ({"path": "files/a/b.md", "content": "x", "channel": "canvas"}, "channel_not_second"),
        ({"path": "files/a/b.md", "channel": "canvas", "kind": "file", "content": "x"},
         "content_not_third"),
    ],
)  # fmt: skip
def test_write_with_the_wrong_parameter_order_is_refused(
    session: Session, params: dict[str, Any], code: str
) -> None:
    session.begin("t1")
    out = session.run("react.write", params)
    assert codes(out) == [code]
    assert out.notices[0].full_code == f"protocol_violation.{code}"
    assert session.files() == {}


def test_an_internal_write_is_a_folded_anchor_and_a_scratchpad_one_an_inline_note(
    session: Session,
) -> None:
    session.begin("t1")
    anchor = session.run(
        "react.write",
        {"path": "notes", "channel": "internal", "content": "[K] the API key lives in vault"},
    )
    assert anchor.ok and anchor.result["tags"] == ["[K]"] and anchor.result["inline"] is False
    note = anchor.blocks[0]
    assert note.type == NOTE and note.hidden and note.path in note.replacement
    assert note.meta["anchor"] is True
    inline = session.run(
        "react.write",
        {
            "path": "notes",
            "channel": "internal",
            "content": "[D] ship on Friday\n[P] write tests first",
            "scratchpad": True,
        },
    )
    assert inline.result["tags"] == ["[D]", "[P]"] and not inline.blocks[0].hidden
    untagged = session.run(
        "react.write",
        {"path": "notes", "channel": "internal", "content": "plain", "scratchpad": True},
    )
    assert codes(untagged) == ["note_untagged"] and untagged.ok
    assert session.files() == {}


# -- react.pull ----------------------------------------------------------------------------------


def test_pull_materialises_read_only_copies_under_their_own_turn_roots(session: Session) -> None:
    session.begin("t1")
    write(session, "files/app/a.py", "A = 1\n")
    write(session, "files/app/sub/b.py", "B = 2\n")
    write(session, "outputs/r/out.txt", "o\n")
    session.end()
    session.begin("t2")
    write(session, "files/app/a.py", "A = 100\n")
    active = session.files()
    out = session.run("react.pull", {"paths": ["fi:t1.files/app/", "fi:t1.outputs/r/out.txt"]})
    assert out.ok, out.result
    pulled = {p["logical_path"]: p["local_path"] for p in out.result["pulled"]}
    assert pulled == {
        "fi:t1.files/app/a.py": "../t1/files/app/a.py",
        "fi:t1.files/app/sub/b.py": "../t1/files/app/sub/b.py",
        "fi:t1.outputs/r/out.txt": "../t1/outputs/r/out.txt",
    }
    local = session.local.root / "t1" / "files" / "app" / "a.py"
    assert local.read_bytes() == b"A = 1\n"
    assert not local.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert session.files() == active  # the active workspace is unchanged
    assert session.workspace.read("fi:t2.files/app/a.py") == b"A = 100\n"
    lines = workspace_lines(session.workspace, "t2", session.local)
    assert any("pulled read-only: 3" in line for line in lines)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("ar:t1.user.prompt", "bad_path"),
        ("files/app/a.py", "bad_path"),
        ("/tmp/x", "bad_path"),
        ("fi:t1.files/../x", "bad_path"),
        ("fi:t2.files/app/a.py", "pull_current_turn"),
    ],
)
def test_pull_refuses_what_is_not_a_historical_fi_ref(
    session: Session, path: str, code: str
) -> None:
    session.begin("t1")
    write(session, "files/app/a.py", "A\n")
    session.end()
    session.begin("t2")
    out = session.run("react.pull", {"paths": [path]})
    assert out.result["status"] == "error" and code in codes(out)
    assert out.result["pulled"] == [] and len(out.result["invalid"]) == 1


def test_pull_of_a_whole_files_tree(session: Session) -> None:
    session.begin("t1")
    write(session, "files/app/a.py", "A\n")
    write(session, "files/docs/b.md", "B\n")
    session.end()
    session.begin("t2")
    out = session.run("react.pull", {"paths": ["fi:t1.files/"]})
    assert out.ok, out.result
    assert [p["logical_path"] for p in out.result["pulled"]] == [
        "fi:t1.files/app/a.py",
        "fi:t1.files/docs/b.md",
    ]
    assert (session.local.root / "t1" / "files" / "docs" / "b.md").read_bytes() == b"B\n"


def test_pull_of_a_missing_ref_reports_it_and_pulls_the_rest(session: Session) -> None:
    session.begin("t1")
    write(session, "files/app/a.py", "A\n")
    session.end()
    session.begin("t2")
    out = session.run("react.pull", {"paths": ["fi:t1.files/app/a.py", "fi:t1.files/app/no.py"]})
    assert out.result["status"] == "partial" and out.result["missing"] == ["fi:t1.files/app/no.py"]
    assert codes(out) == ["pull_paths_missing"]


# -- react.patch ---------------------------------------------------------------------------------


def test_patch_of_a_historical_file_without_pull_is_refused(session: Session) -> None:
    session.begin("t1")
    write(session, "files/app/main.py", MAIN_V1)
    session.end()
    session.begin("t2")
    write(session, "files/app/main.py", "print('v2')\n")
    out = session.run("react.patch", {"path": "fi:t1.files/app/main.py", "patch": HIST_DIFF})
    assert codes(out) == ["patch_requires_pull"]
    assert "react.pull" in out.notices[0].message
    assert out.notices[0].full_code == "protocol_violation.patch_requires_pull"
    assert session.files() == {"app/main.py": b"print('v2')\n"}


def test_a_failed_hunk_is_a_notice_with_the_hunk_and_nothing_is_written(session: Session) -> None:
    session.begin("t1")
    write(session, "files/app/main.py", MAIN_V1)
    bad = "@@ -1,2 +1,2 @@\n def main():\n-    print('goodbye')\n+    print('x')\n"
    out = session.run("react.patch", {"path": "files/app/main.py", "patch": bad})
    assert codes(out) == ["hunk_mismatch"]
    assert "print('goodbye')" in out.notices[0].message and out.result["hunk"].startswith("@@")
    assert session.files() == {"app/main.py": MAIN_V1.encode()}


def test_a_patch_with_two_hunks_where_the_second_fails_writes_nothing(session: Session) -> None:
    session.begin("t1")
    text = "".join(f"line {i}\n" for i in range(1, 21))
    write(session, "files/app/lines.txt", text)
    diff = (
        "@@ -2 +2 @@\n-line 2\n+LINE 2\n"  # applies
        "@@ -15 +15 @@\n-line fifteen\n+LINE 15\n"  # does not
    )
    out = session.run("react.patch", {"path": "files/app/lines.txt", "patch": diff})
    assert codes(out) == ["hunk_mismatch"]
    assert session.files()["app/lines.txt"] == text.encode()


def test_patch_of_a_missing_file_and_a_full_replacement(session: Session) -> None:
    session.begin("t1")
    out = session.run("react.patch", {"path": "files/app/new.py", "patch": MAIN_DIFF})
    assert codes(out) == ["patch_target_missing"]
    replaced = session.run("react.patch", {"path": "files/app/new.py", "patch": "N = 1\n"})
    assert replaced.ok and replaced.result["mode"] == "replace"
    assert session.files() == {"app/new.py": b"N = 1\n"}


# -- react.checkout ------------------------------------------------------------------------------


def test_checkout_of_a_missing_ref_is_refused_and_changes_nothing(session: Session) -> None:
    session.begin("t1")
    write(session, "files/app/a.py", "A\n")
    session.end()
    session.begin("t2")
    before = session.files()
    out = session.run(
        "react.checkout",
        {"paths": ["fi:t1.files/app/a.py", "fi:t1.files/app/missing.py"], "mode": "replace"},
    )
    assert codes(out) == ["checkout_missing_paths"]
    assert out.notices[0].full_code == "protocol_violation.checkout_missing_paths"
    assert session.files() == before


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"paths": ["fi:t1.outputs/r/x.md"]}, "checkout_invalid_paths"),
        ({"paths": ["ar:t1.user.prompt"]}, "checkout_invalid_paths"),
        ({"paths": ["files/app/a.py"]}, "checkout_invalid_paths"),
        ({"paths": ["fi:t1.files/app/a.py"], "mode": "merge"}, "checkout_invalid_mode"),
        ({"paths": []}, "checkout_missing_paths"),
    ],
)
def test_checkout_refusals(session: Session, params: dict[str, Any], code: str) -> None:
    session.begin("t1")
    write(session, "files/app/a.py", "A\n")
    session.end()
    session.begin("t2")
    out = session.run("react.checkout", params)
    assert codes(out) == [code] and out.result["status"] == "error"


def test_checkout_later_refs_win_and_replace_starts_clean(session: Session) -> None:
    session.begin("t1")
    write(session, "files/app/a.py", "A1\n")
    write(session, "files/app/b.py", "B1\n")
    session.end()
    session.begin("t2")
    write(session, "files/app/a.py", "A2\n")
    write(session, "files/other/c.py", "C2\n")
    session.end()
    session.begin("t3")
    out = session.run(
        "react.checkout",
        {"paths": ["fi:t2.files/app/", "fi:t1.files/app/a.py"], "mode": "replace"},
    )
    assert out.ok
    assert session.files() == {"app/a.py": b"A1\n", "app/b.py": b"B1\n"}
    lines = workspace_lines(session.workspace, "t3", session.local)
    assert any(line.startswith("active files: 2") for line in lines)


# -- react.search_files --------------------------------------------------------------------------


def test_search_files_lists_paths_sizes_and_logical_paths_without_content(
    session: Session,
) -> None:
    session.begin("t1")
    write(session, "files/app/main.py", MAIN_V1)
    write(session, "files/app/util.py", "X = 1\n")
    write(session, "files/docs/guide.md", "# Guide\nhello\n", channel="canvas")
    write(session, "outputs/r/out.txt", "o\n")
    out = session.run("react.search_files", {"root": "files/app", "name_regex": r"\.py$"})
    assert out.ok
    assert [h["path"] for h in out.result["hits"]] == ["main.py", "util.py"]
    assert out.result["hits"][0]["logical_path"] == "fi:t1.files/app/main.py"
    assert out.result["hits"][0]["size_bytes"] == len(MAIN_V1)
    assert "content" not in out.result["hits"][0]
    grep = session.run("react.search_files", {"root": "files", "content_regex": "hello"})
    assert [h["path"] for h in grep.result["hits"]] == ["app/main.py", "docs/guide.md"]
    outdir = session.run("react.search_files", {"root": "outdir"})
    assert [h["logical_path"] for h in outdir.result["hits"]] == ["fi:t1.outputs/r/out.txt"]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"root": "fi:t1.files/app"}, "search_files_invalid_root"),
        ({"root": "/etc"}, "search_files_invalid_root"),
        ({"root": "files/../.."}, "search_files_invalid_root"),
        ({"root": "files", "name_regex": "("}, "bad_params"),
        ({"root": "files", "max_hits": 0}, "bad_params"),
    ],
)
def test_search_files_refusals(session: Session, params: dict[str, Any], code: str) -> None:
    session.begin("t1")
    out = session.run("react.search_files", params)
    assert codes(out) == [code]


# -- react.read of fi: paths ---------------------------------------------------------------------


def test_read_of_fi_files_and_folders_goes_through_the_workspace(session: Session) -> None:
    session.begin("t1")
    refused = write(session, "files/app/main.py", MAIN_V1, channel="canvas")
    assert codes(refused) == ["bad_path"] and session.files() == {}  # .py is no canvas type
    write(session, "files/app/guide.md", "# Guide\n", channel="canvas")  # no timeline block
    write(session, "files/app/main.py", MAIN_V1)  # timeline_text: shown on the timeline
    session.end()
    session.begin("t2")
    paths = ["fi:t1.files/app/guide.md", "fi:t1.files/app/", "fi:t1.files/app/main.py"]
    out = session.run("react.read", {"paths": paths})
    assert out.ok, out.result
    assert out.blocks[0].text == "# Guide\n" and out.blocks[0].meta["read_from"] == "workspace"
    assert out.blocks[1].text == "fi:t1.files/app/guide.md\nfi:t1.files/app/main.py"
    assert out.result["exists_in_visible_context"] == ["fi:t1.files/app/main.py"]
    missing = session.run("react.read", {"paths": ["fi:t1.files/app/nope.py"]})
    assert missing.result["status"] == "error" and missing.result["missing"]


# -- the diff applier ----------------------------------------------------------------------------


def test_apply_patch_handles_offsets_insertions_and_the_missing_newline_marker() -> None:
    base = "a\nb\nc\nd\ne\n"
    diff = "@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n"
    assert apply_patch(base, diff) == "a\nb\nC\nd\ne\n"
    assert apply_patch("z\n" + base, diff) == "z\na\nb\nC\nd\ne\n"  # moved by one line
    assert apply_patch(base, "@@ -0,0 +1 @@\n+first\n") == "first\n" + base
    no_eol = "@@ -5 +5 @@\n-e\n\\ No newline at end of file\n+E\n\\ No newline at end of file\n"
    assert apply_patch("a\nb\nc\nd\ne", no_eol) == "a\nb\nc\nd\nE"


@pytest.mark.parametrize(
    ("diff", "code"),
    [
        ("@@ -1 +1 @@\n-x\n+y\n", "hunk_mismatch"),
        ("@@ nonsense @@\n-a\n", "invalid_hunk_header"),
        ("--- a\n+++ b\n", "invalid_hunk_header"),
        ("@@ -3 +3 @@\n-c\n+C\n@@ -1 +1 @@\n-a\n+A\n", "hunk_out_of_order"),
        ("@@ -1,3 +1,3 @@\n a\n-b\n+B\n", "hunk_length"),
        ("--- a\n+++ b\n@@ -1 +1 @@\n-a\n+A\n--- c\n+++ d\n@@ -1 +1 @@\n-a\n+A\n",
         "multi_file_patch"),
    ],
)  # fmt: skip
def test_apply_patch_failures_name_their_code(diff: str, code: str) -> None:
    with pytest.raises(PatchError) as caught:
        apply_patch("a\nb\nc\n", diff)
    assert caught.value.code == code


def test_a_git_mode_turn_root_is_a_repository_while_the_turn_is_open(tmp_path: Path) -> None:
    s = Session(tmp_path, "git")
    try:
        s.begin("t1")
        write(s, "files/app/a.py", "A\n")
        root = s.local.turn_root("t1")
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull},
        )
        assert inside.stdout.strip() == "true"
        assert (root / "files" / "app" / "a.py").read_bytes() == b"A\n"
        s.end()
        assert not root.exists()
        s.begin("t2")
        assert s.files() == {"app/a.py": b"A\n"}
    finally:
        s.close()


def test_materialize_and_collect_keep_attachments_in_their_area(session: Session) -> None:
    session.begin("t1")
    ws = session.workspace
    ws.write("t1", "user.attachments", "brief.txt", b"the brief", mime="text/plain")
    write(session, "files/app/a.py", "A\n")
    snapshot = session.local.materialize("t1")
    root = session.local.turn_root("t1")
    (root / "files" / "app" / "b.py").write_text("B\n")
    (root / "files" / "app" / "a.py").unlink()
    (root / "loose.txt").write_text("loose")
    written = session.local.collect(snapshot)
    assert sorted(written) == ["fi:t1.files/app/b.py", "fi:t1.outputs/exec/loose.txt"]
    assert session.files() == {"app/b.py": b"B\n"}
    assert session.outputs() == {"exec/loose.txt": b"loose"}
    assert ws.read("fi:t1.user.attachments/brief.txt") == b"the brief"
    session.end()
    assert ws.read("fi:t1.user.attachments/brief.txt") == b"the brief"
