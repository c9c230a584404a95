"""The git workspace answers exactly like the custom one, turn by turn; its history is plain git."""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actline.storage import NotStored, Store, Workspace
from actline.timeline import PathError
from actline.timeline.paths import FI_AREAS, FOLLOWUP_AREA
from actline.tools.workspace.git import GitWorkspace
from actline.tools.workspace.gitcmd import GitError

REPO = Path(__file__).resolve().parents[3]
LONG = "deep/" + "/".join(["ü" * 111] * 8)  # 900 characters, 1,787 bytes of UTF-8
BINARY = bytes(range(256)) * 3


def git(*args: str) -> str:
    """Run git the way a person would inspect the repository (no user config)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    done = subprocess.run(["git", *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def gws(tmp_path: Path) -> Iterator[GitWorkspace]:
    with GitWorkspace(tmp_path / "ws", "c1") as ws:
        yield ws


# -- the equivalence harness: every call gives the same answer on both backends -----------------


def _plain(value: Any) -> Any:
    """A result without timestamps (the only field the backends may disagree on)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "ts"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def outcome(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        return ("ok", _plain(call(*args, **kwargs)))
    except NotStored as exc:
        return ("NotStored", exc.kind, exc.key)
    except PathError as exc:
        return ("PathError", exc.rule, exc.path)


class Pair:
    """The custom and the git backend driven together; ``same`` asserts identical outcomes."""

    def __init__(self, custom: Workspace, gitws: GitWorkspace) -> None:
        self.custom = custom
        self.git = gitws
        self.written: set[tuple[str, str]] = set()
        self.calls = 0

    def same(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        mine = outcome(getattr(self.custom, name), *args, **kwargs)
        theirs = outcome(getattr(self.git, name), *args, **kwargs)
        assert mine == theirs, (name, args)
        self.calls += 1
        return mine

    def write(self, turn: str, area: str, rel: str, data: bytes, mime: str = "") -> None:
        assert self.same("write", turn, area, rel, data, mime=mime)[0] == "ok"
        self.written.add((area, rel))

    def followup(self, turn: str, message_id: str, name: str, data: bytes) -> None:
        assert self.same("write_followup_attachment", turn, message_id, name, data)[0] == "ok"
        self.written.add((FOLLOWUP_AREA, f"{message_id}/{name}"))

    def check(self) -> None:
        """Compare everything that can be asked of every turn (and of one never begun)."""
        turns = self.same("turns")[1]
        folders = {"nothing/"}
        for _, rel in self.written:
            parts = rel.split("/")[:-1]
            folders.update("/".join(parts[:i]) + "/" for i in range(1, len(parts) + 1))
            folders.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
        for turn in [*turns, "t99"]:
            for area in FI_AREAS:
                self.same("tree", turn, area)
            # every area in one read: what ``tree`` gives area by area, or its refusal
            whole = self.same("trees", turn, FI_AREAS)
            each = [outcome(self.custom.tree, turn, area) for area in FI_AREAS]
            if whole[0] == "ok":
                assert whole[1] == {area: o[1] for area, o in zip(FI_AREAS, each, strict=True)}
            else:
                assert whole == each[0]
            for area, rel in sorted(self.written):
                self.same("read", f"fi:{turn}.{area}/{rel}")
                self.same("stat", f"fi:{turn}.{area}/{rel}")
            for area in ("files", "outputs"):
                for folder in sorted(folders):
                    self.same("listdir", f"fi:{turn}.{area}/{folder}")
                self.same("read", f"fi:{turn}.{area}/proj/")
        for area, rel in sorted(self.written):
            self.same("versions", area, rel)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    with Store(tmp_path / "db") as store, GitWorkspace(tmp_path / "ws", "c1") as gitws:
        yield Pair(Workspace(store, "c1"), gitws)


def test_a_scripted_session_gives_identical_answers_after_every_turn(pair: Pair) -> None:
    both = pair.same
    both("begin_turn", "t1")
    pair.write("t1", "files", "proj/app.py", b"v1")
    pair.write("t1", "files", "proj/app.py", b"v1 final", mime="text/x-python")
    pair.write("t1", "files", "proj/README.md", b"# readme")
    pair.write("t1", "files", "bin/blob.bin", BINARY, mime="application/octet-stream")
    pair.write("t1", "files", LONG, b"deep one")
    pair.write("t1", "outputs", "report/q1.pdf", b"%PDF-1", mime="application/pdf")
    pair.write("t1", "user.attachments", "photo.png", b"\x89PNG\r\n\x1a\n", mime="image/png")
    turns: list[str] = []

    def finish(turn: str) -> None:
        pair.check()  # the open turn, read from its work tree
        commit = pair.git.end_turn(turn)
        assert len(commit) == 40
        turns.append(turn)
        pair.check()  # the same turn, read from its commit

    finish("t1")
    both("begin_turn", "t2")
    pair.write("t2", "files", "proj/app.py", b"v2")
    pair.write("t2", "files", "proj/src/util.py", b"def util(): ...")
    pair.followup("t2", "m1", "receipt.pdf", b"receipt")
    pair.write("t2", "outputs", "report/q2.pdf", b"%PDF-2")
    assert both("delete", "t2", "files", "bin/blob.bin")[0] == "ok"
    assert both("delete", "t2", "outputs", "report/q1.pdf")[0] == "NotStored"  # t1's output
    finish("t2")
    both("begin_turn", "t3")
    assert both("delete", "t3", "files", "proj/README.md")[0] == "ok"
    pair.write("t3", "files", "proj/README.md", b"# readme again")
    pair.write("t3", "files", "proj/src/util.py", b"def util(): ...")  # same bytes, new version
    pair.write("t3", "outputs", "tmp/x.txt", b"scratch")
    assert both("delete", "t3", "outputs", "tmp/x.txt")[0] == "ok"
    pair.write("t3", "files", "scratch.txt", b"gone soon")
    assert both("delete", "t3", "files", "scratch.txt")[0] == "ok"
    finish("t3")
    both("begin_turn", "t4")  # a turn that writes nothing
    finish("t4")
    pair.write("t5", "files", "bin/blob.bin", b"back again")  # begins t5 implicitly
    assert both("delete", "t5", "files", LONG)[0] == "ok"
    pair.write("t5", "user.attachments", "photo.png", b"another photo")
    finish("t5")
    assert both("delete", "t6", "files", "never.md")[0] == "NotStored"  # t6 is not begun
    assert both("turns")[1] == turns
    assert both("delete", "t6", "files", "proj/app.py")[0] == "ok"  # begins t6
    finish("t6")
    assert both("turns")[1] == ["t1", "t2", "t3", "t4", "t5", "t6"]
    for path in ("fi:t2.files/proj/../../etc/passwd", "/etc/passwd", "~/x", "src/app.py"):
        assert both("read", path)[0] == "PathError"
    for path in ("fi:t1.scratch/a", "ks:docs/a.md", "fi:t 1.files/a", "fi:t1.user.attachments/a"):
        assert both("listdir", path)[0] == "PathError"
    for rel in ("../x", "/etc/x", "~/x", "C:/x", "proj/", "a//b", "a\\b"):
        assert both("write", "t7", "files", rel, b"x")[0] == "PathError"
        assert both("delete", "t7", "files", rel)[0] == "PathError"
    assert both("write", "t7", "user.attachments", "dir/a.png", b"x")[0] == "PathError"
    assert both("write_followup_attachment", "t7", "m.1", "a", b"x")[0] == "PathError"
    assert both("versions", "scratch", "a")[0] == "PathError"
    assert both("tree", "t99")[0] == "NotStored"
    assert both("tree", "t1", "scratch")[0] == "PathError"
    assert both("turns")[1] == turns  # refused calls begin nothing
    assert pair.calls > 1000
    assert pair.git.read("fi:t6.files/bin/blob.bin") == b"back again"
    assert pair.git.read("fi:t1.files/bin/blob.bin") == BINARY
    assert pair.git.read(f"fi:t4.files/{LONG}") == b"deep one"


# -- a property: random sessions give identical answers -------------------------------------------

RELS = ["a", "a/b", "ab", "z/y/x"]
operation = st.one_of(
    st.tuples(
        st.just("write"),
        st.sampled_from(["files", "outputs"]),
        st.sampled_from(RELS),
        st.binary(max_size=3),
    ),
    st.tuples(st.just("delete"), st.sampled_from(["files", "outputs"]), st.sampled_from(RELS)),
    st.tuples(st.just("attach"), st.sampled_from(["p.png", "q.png"]), st.binary(max_size=3)),
    st.tuples(st.just("next")),
)
_examples = itertools.count()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, max_size=12))
def test_random_sessions_give_identical_answers(tmp_path: Path, ops: list[tuple[Any, ...]]) -> None:
    base = tmp_path / f"e{next(_examples)}"
    with Store(base / "db") as store, GitWorkspace(base / "ws", "c1") as gitws:
        pair = Pair(Workspace(store, "c1"), gitws)
        number = 1
        pair.same("begin_turn", "t1")
        for op in ops:
            turn = f"t{number}"
            if op[0] == "next":
                if turn in gitws.turns():  # an even turn that wrote nothing was never begun
                    gitws.end_turn(turn)
                number += 1
                if number % 2:  # odd turns begin explicitly, even ones with their first write
                    pair.same("begin_turn", f"t{number}")
            elif op[0] == "write":
                _, area, rel, data = op
                theirs = outcome(gitws.write, turn, area, rel, data)
                if theirs[:2] == ("PathError", "path_conflict"):
                    pair.custom.begin_turn(turn)  # a file and a folder of one name: git refuses
                    continue
                assert outcome(pair.custom.write, turn, area, rel, data) == theirs
                pair.written.add((area, rel))
            elif op[0] == "delete":
                pair.same("delete", turn, op[1], op[2])
            else:
                pair.followup(turn, "m1", op[1], op[2])
                pair.same("write", turn, "user.attachments", op[1], op[2])
                pair.written.add(("user.attachments", op[1]))
        pair.check()
        if pair.git.turns() and pair.git.turns()[-1] == f"t{number}":
            gitws.end_turn(f"t{number}")
            pair.check()


# -- the git side: work trees, commits, refs -----------------------------------------------------


def test_the_open_turn_root_is_a_git_work_tree_gone_after_end_turn(gws: GitWorkspace) -> None:
    assert gws.begin_turn("t1") == 1
    root = gws.turn_root("t1")
    assert root == gws.root / "t1"
    assert git("-C", str(root), "rev-parse", "--is-inside-work-tree").strip() == "true"
    gws.write("t1", "files", "proj/app.py", b"print(1)\n")
    assert (root / "files" / "proj" / "app.py").read_bytes() == b"print(1)\n"
    gws.end_turn("t1")
    assert not root.exists()
    with pytest.raises(PathError) as caught:
        gws.turn_root("t1")
    assert caught.value.rule == "turn_ended"
    assert gws.read("fi:t1.files/proj/app.py") == b"print(1)\n"


def test_the_history_has_one_commit_per_ended_turn_named_by_its_trailer(
    gws: GitWorkspace,
) -> None:
    shas = []
    for turn in ("t1", "conv:7-a", "t3"):
        gws.write(turn, "files", "notes.md", turn.encode())
        shas.append(gws.end_turn(turn))
    gws.begin_turn("t4")  # open: not in the history yet
    history = str(gws.root / ".history.git")
    log = git("-C", history, "log", "--format=%H %(trailers:key=Turn-Id,valueonly,separator=)")
    assert log.split() == [shas[2], "t3", shas[1], "conv:7-a", shas[0], "t1"]
    assert git("-C", history, "rev-parse", "refs/turns/conv%3A7-a").strip() == shas[1]
    assert git("-C", history, "rev-parse", "main").strip() == shas[2]
    assert git("-C", history, "rev-list", "--parents", "-n1", shas[1]).split() == shas[:2][::-1]
    listed = git("-C", history, "ls-tree", "-r", "--name-only", shas[0]).split()
    assert listed == [".actline/meta.json", "files/notes.md"]
    assert git("-C", history, "show", f"{shas[1]}:files/notes.md") == "conv:7-a"
    assert gws.end_turn("conv:7-a") == shas[1]  # idempotent


def test_only_the_newest_turn_is_open_and_begin_is_idempotent(gws: GitWorkspace) -> None:
    assert gws.begin_turn("t1") == 1
    gws.write("t1", "outputs", "a.txt", b"a")
    assert gws.begin_turn("t1") == 1
    assert (gws.root / "t1" / "outputs" / "a.txt").is_file()  # begin again keeps the files
    assert gws.begin_turn("t2") == 2  # ends t1
    assert not (gws.root / "t1").exists()
    assert gws.read("fi:t1.outputs/a.txt") == b"a"
    assert not (gws.root / "t2" / "outputs" / "a.txt").exists()  # outputs belong to one turn
    assert gws.begin_turn("t1") == 1  # an ended turn is not reopened
    assert gws.turns() == ["t1", "t2"]
    sha = gws.end_turn("t2")
    assert gws.end_turn("t2") == sha
    with pytest.raises(NotStored) as caught:
        gws.end_turn("t9")
    assert (caught.value.kind, caught.value.key) == ("workspace turn", "c1/t9")


def test_writing_an_ended_turn_is_refused(gws: GitWorkspace) -> None:
    gws.write("t1", "files", "a.txt", b"one")
    gws.write("t2", "files", "b.txt", b"two")  # ends t1
    for attempt in (
        lambda: gws.write("t1", "files", "a.txt", b"late"),
        lambda: gws.delete("t1", "files", "a.txt"),
        lambda: gws.write_followup_attachment("t1", "m1", "x.pdf", b"x"),
    ):
        with pytest.raises(PathError) as caught:
            attempt()
        assert caught.value.rule == "turn_ended"
        assert "turn t1 is committed and read-only; the open turn is t2" in str(caught.value)
    assert gws.read("fi:t1.files/a.txt") == b"one"
    assert [v["turn_id"] for v in gws.versions("files", "a.txt")] == ["t1"]


def test_a_killed_process_leaves_an_open_turn_that_a_new_workspace_resumes(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    script = textwrap.dedent(
        f"""
        import os
        from actline.tools.workspace.git import GitWorkspace
        ws = GitWorkspace({str(root)!r}, "c1")
        ws.write("t1", "files", "kept.txt", b"committed")
        ws.end_turn("t1")
        ws.write("t2", "files", "draft.md", b"half done", mime="text/markdown")
        ws.write("t2", "outputs", "chart.png", b"png")
        ws.delete("t2", "files", "kept.txt")
        os._exit(3)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, check=False)
    assert done.returncode == 3
    with GitWorkspace(root, "c1") as ws:
        assert ws.turns() == ["t1", "t2"]
        assert ws.begin_turn("t2") == 2
        assert ws.read("fi:t2.files/draft.md") == b"half done"
        assert ws.stat("fi:t2.files/draft.md")["mime"] == "text/markdown"
        with pytest.raises(NotStored):
            ws.read("fi:t2.files/kept.txt")
        ws.write("t2", "files", "more.md", b"after the crash")
        sha = ws.end_turn("t2")
    with GitWorkspace(root, "c1") as ws:
        assert ws.end_turn("t2") == sha
        assert list(ws.tree("t2")) == ["draft.md", "more.md"]
        assert list(ws.tree("t2", "outputs")) == ["chart.png"]
        assert ws.stat("fi:t2.files/draft.md")["mime"] == "text/markdown"
        assert [v["deleted"] for v in ws.versions("files", "kept.txt")] == [False, True]


def test_dropping_the_object_mid_turn_loses_nothing(tmp_path: Path) -> None:
    ws = GitWorkspace(tmp_path / "ws", "c1")
    ws.begin_turn("t1")
    ws.write("t1", "files", "a.txt", b"written before the drop", mime="text/plain")
    del ws
    again = GitWorkspace(tmp_path / "ws", "c1")
    assert again.begin_turn("t1") == 1
    assert again.read("fi:t1.files/a.txt") == b"written before the drop"
    again.end_turn("t1")
    assert again.stat("fi:t1.files/a.txt")["mime"] == "text/plain"
    again.close()


def test_files_changed_in_the_turn_root_count_as_written_in_that_turn(gws: GitWorkspace) -> None:
    gws.write("t1", "files", "keep.txt", b"keep", mime="text/plain")
    gws.write("t1", "files", "edit.txt", b"before")
    gws.write("t1", "files", "drop.txt", b"drop")
    gws.end_turn("t1")
    gws.begin_turn("t2")
    files = gws.turn_root("t2") / "files"
    (files / "edit.txt").write_bytes(b"after a tool ran")
    (files / "drop.txt").unlink()
    (files / "new" / "made.csv").parent.mkdir()
    (files / "new" / "made.csv").write_bytes(b"a,b\n")
    (files / "link").symlink_to(files / "keep.txt")
    for ended in (False, True):
        if ended:
            gws.end_turn("t2")
        tree = gws.tree("t2")
        assert list(tree) == ["edit.txt", "keep.txt", "new/made.csv"]
        assert (tree["keep.txt"]["turn_id"], tree["keep.txt"]["mime"]) == ("t1", "text/plain")
        assert tree["edit.txt"]["version"] == "fi:t2.files/edit.txt"
        assert tree["new/made.csv"]["size"] == 4
        assert gws.read("fi:t2.files/edit.txt") == b"after a tool ran"
        assert [v["deleted"] for v in gws.versions("files", "drop.txt")] == [False, True]
        with pytest.raises(NotStored):
            gws.read("fi:t2.files/link")


def test_git_attributes_and_ignore_files_from_the_agent_change_no_bytes(gws: GitWorkspace) -> None:
    gws.write("t1", "files", ".gitattributes", b"* text eol=crlf\n")
    gws.write("t1", "files", "p/.gitignore", b"*.log\n")
    gws.write("t1", "files", "p/run.log", b"kept\n")
    gws.write("t1", "files", "p/crlf.txt", b"a\r\nb\r\n")
    gws.write("t1", "files", "p/lf.txt", b"a\nb\n")
    gws.end_turn("t1")
    gws.begin_turn("t2")  # checked out again from t1's commit
    for turn in ("t1", "t2"):
        assert gws.read(f"fi:{turn}.files/p/crlf.txt") == b"a\r\nb\r\n"
        assert gws.read(f"fi:{turn}.files/p/lf.txt") == b"a\nb\n"
        assert gws.read(f"fi:{turn}.files/p/run.log") == b"kept\n"
    assert (gws.turn_root("t2") / "files" / "p" / "lf.txt").read_bytes() == b"a\nb\n"
    assert gws.tree("t2")["p/lf.txt"]["version"] == "fi:t1.files/p/lf.txt"


def test_the_user_git_config_and_environment_do_not_interfere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("post-checkout", "pre-commit", "reference-transaction"):
        (hooks / hook).write_text("#!/bin/sh\nexit 1\n")
        (hooks / hook).chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(
        f"[core]\n\thooksPath = {hooks}\n\tautocrlf = true\n[commit]\n\tgpgSign = true\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere.git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "index"))
    with GitWorkspace(tmp_path / "ws", "c1") as ws:
        ws.write("t1", "files", "a.txt", b"x\r\n")
        ws.end_turn("t1")
        ws.begin_turn("t2")
        assert ws.read("fi:t1.files/a.txt") == b"x\r\n"
        assert (ws.turn_root("t2") / "files" / "a.txt").read_bytes() == b"x\r\n"
    assert not (tmp_path / "elsewhere.git").exists()


def test_names_the_disk_cannot_hold_are_refused(gws: GitWorkspace) -> None:
    gws.write("t1", "files", "a", b"a file")
    cases = [
        ("a/b", "path_conflict"),
        (".git/config", "bad_segment"),
        ("x/.GIT", "bad_segment"),
        ("é" * 200, "too_long"),  # 200 characters, 400 bytes
    ]
    for rel, rule in cases:
        with pytest.raises(PathError) as caught:
            gws.write("t1", "files", rel, b"x")
        assert caught.value.rule == rule, rel
    gws.write("t1", "files", "d/e/f", b"f")
    with pytest.raises(PathError) as caught:
        gws.write("t1", "files", "d", b"x")
    assert caught.value.rule == "path_conflict"
    gws.delete("t1", "files", "a")
    gws.write("t1", "files", "a/b", b"a folder now")
    gws.delete("t1", "files", "d/e/f")
    gws.write("t1", "files", "d", b"a file now")  # the emptied folders were removed
    assert list(gws.tree("t1")) == ["a/b", "d"]


def test_git_errors_keep_their_fields_through_pickling() -> None:
    error = GitError("commit-tree", 128, "fatal: not a tree")
    back = pickle.loads(pickle.dumps(error))
    assert (back.command, back.returncode, back.stderr) == ("commit-tree", 128, "fatal: not a tree")
    assert "git commit-tree failed (128): fatal: not a tree" == str(back)
    ended = pickle.loads(pickle.dumps(PathError("turn_ended", "fi:t1.files/a", "read it")))
    assert (ended.rule, ended.path) == ("turn_ended", "fi:t1.files/a")


class Crash(Exception):
    """Stands for the process dying at a chosen step."""


def test_a_begin_that_died_half_way_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with GitWorkspace(tmp_path / "ws", "c1") as ws:
        ws.write("t1", "files", "a.txt", b"a")
        ws.write("t1", "outputs", "o.txt", b"o")
        ws.end_turn("t1")
        with monkeypatch.context() as patched:
            patched.setattr(
                "actline.tools.workspace.git.shutil.rmtree", lambda *a, **k: _raise(Crash())
            )
            with pytest.raises(Crash):
                ws.begin_turn("t2")  # dies after the work tree is added, before it is ready
        assert (tmp_path / "ws" / "t2" / "outputs" / "o.txt").exists()
    with GitWorkspace(tmp_path / "ws", "c1") as again:
        assert again.turns() == ["t1", "t2"]
        assert not (again.turn_root("t2") / "outputs" / "o.txt").exists()
        assert list(again.tree("t2")) == ["a.txt"]
        assert list(again.tree("t2", "outputs")) == []


def test_an_end_that_died_after_the_commit_is_finished_on_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with GitWorkspace(tmp_path / "ws", "c1") as ws:
        ws.write("t1", "files", "a.txt", b"a")
        with monkeypatch.context() as patched:
            patched.setattr(GitWorkspace, "_discard_tree", lambda *a: _raise(Crash()))
            with pytest.raises(Crash):
                ws.end_turn("t1")  # the refs moved, the work tree is still there
        assert (tmp_path / "ws" / "t1" / ".git").is_file()
    with GitWorkspace(tmp_path / "ws", "c1") as again:
        assert not (tmp_path / "ws" / "t1").exists()
        assert again.turns() == ["t1"]
        assert again.read("fi:t1.files/a.txt") == b"a"
        assert again.begin_turn("t2") == 2
        assert again.read("fi:t2.files/a.txt") == b"a"


def _raise(exc: Exception) -> None:
    raise exc
