"""The LMDB store: turns persisted whole, loads from the summary boundary, growth, errors."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from actline.storage import (
    DiskFull,
    NotStored,
    Outline,
    RevisionConflict,
    SequenceGap,
    Store,
    StoreFull,
)
from actline.storage.layout import pack
from actline.timeline import Block, Renderer, SourceRow, Timeline, TimelineConfig
from actline.timeline.blocks import STAGE_GATE
from actline.timeline.paths import ar_path
from tests.timeline.builders import Build, words

CFG = TimelineConfig(max_tokens=3000, cache_ttl_seconds=0)
ROOT = Path(__file__).resolve().parents[2]


def conversation(turns: int, cid: str = "c1") -> tuple[Timeline, Renderer, Build]:
    b = Build()
    b.tl.conversation_id = cid
    renderer = Renderer(b.tl, CFG)
    for n in range(1, turns + 1):
        b.turn(f"t{n}", words(20))
        b.rounds(3, size=100, prefix=f"c{n}x")
        b.completion(words(10))
        renderer.render(now=2e9 + n)
    return b.tl, renderer, b


def test_a_persisted_conversation_loads_and_renders_the_same(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        tl, renderer, _ = conversation(7)
        store.persist(tl)
        loaded = store.load("c1")
        assert tl.latest_summary is not None
        assert len(loaded.timeline) < len(tl)  # only the visible view is read
        again = Renderer(loaded.timeline, CFG)
        again.sync()
        renderer.sync()
        assert list(again.stable_parts()) == list(renderer.stable_parts())
        assert loaded.timeline.sources.to_dict() == tl.sources.to_dict()


def test_each_turn_persists_only_its_new_blocks(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        b = Build()
        b.tl.conversation_id = "c1"
        b.turn("t1", "hello")
        assert store.persist(b.tl) == 1
        first = store.header("c1")
        assert first is not None and first["stored_seq"] == len(b.tl)
        b.turn("t2", "again")
        assert store.persist(b.tl) == 2
        assert [d["seq"] for d in store.iter_blocks("c1")] == list(range(len(b.tl)))
        assert store.turn_log("c1", "t2")["blocks_count"] == 2


def test_a_hide_rewrites_the_stored_block_in_the_next_persist(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        tl, renderer, _ = conversation(1)
        store.persist(tl)
        assert renderer.hide("tc:t1.c1x2.result", "done with it").status == "ok"
        store.persist(tl)
        (stored,) = store.read_path("c1", "tc:t1.c1x2.result")
        assert stored.hidden
        assert "done with it" in stored.replacement


def test_read_path_reaches_compacted_blocks(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        tl, _, _ = conversation(7)
        store.persist(tl)
        loaded = store.load("c1").timeline
        assert not loaded.blocks_at("ar:t1.user.prompt")
        (prompt,) = store.read_path("c1", "ar:t1.user.prompt")
        assert prompt.type == "user.prompt"
        assert store.read_path("c1", "ar:t1.nothing") == []


def test_a_gap_in_the_sequence_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        tl, _, _ = conversation(1)
        store.persist(tl)
        before = store.header("c1")
        block = Block.new("react.notice", "t1", 2e9, seq=len(tl) + 5)
        with pytest.raises(SequenceGap) as caught:
            store.append_turn("c1", [block], tl.snapshot())
        assert (caught.value.expected, caught.value.got) == (len(tl), len(tl) + 5)
        assert store.header("c1") == before


def test_a_stale_revision_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        tl, _, _ = conversation(1)
        revision = store.persist(tl)
        with pytest.raises(RevisionConflict):
            store.append_turn("c1", [], tl.snapshot(), expect_revision=revision - 1)
        assert store.append_turn("c1", [], tl.snapshot(), expect_revision=revision) == revision + 1


def test_the_map_grows_from_a_tiny_start(tmp_path: Path) -> None:
    with Store(tmp_path, map_size=64 << 10) as store:
        start = store.map_size
        tl, _, _ = conversation(20)
        store.persist(tl)
        assert store.map_size > start
        assert len(list(store.iter_blocks("c1"))) == len(tl)


def test_a_map_that_may_not_grow_says_so_and_keeps_what_was_committed(tmp_path: Path) -> None:
    with Store(tmp_path, map_size=256 << 10, max_map_size=256 << 10) as store:
        tl, _, b = conversation(1)
        store.persist(tl)
        committed = store.header("c1")
        b.turn("t9", "x" * 2_000_000)
        with pytest.raises(StoreFull) as caught:
            store.persist(tl)
        assert "may not grow" in str(caught.value)
        assert store.header("c1") == committed
        assert len(list(store.iter_blocks("c1"))) == committed["stored_seq"]  # type: ignore[index]


def test_loading_an_unknown_conversation_is_not_stored(tmp_path: Path) -> None:
    with Store(tmp_path) as store, pytest.raises(NotStored):
        store.load("nope")


def test_storage_errors_pickle() -> None:
    for error in (
        StoreFull(1, 2),
        DiskFull("/x", "ENOSPC"),
        SequenceGap("c", 1, 2),
        RevisionConflict("c", 1, 2),
        NotStored("a", "b"),
    ):
        again = pickle.loads(pickle.dumps(error))
        assert str(again) == str(error)


DISK_FULL_CHILD = """
import resource, signal, sys
sys.path.insert(0, sys.argv[2])
from actline.storage import DiskFull, Store
from actline.timeline import Block

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
store = Store(sys.argv[1], map_size=1 << 20)
store.append_turn("c", [Block.new("x", "t", 1.0, text="a" * 100, seq=0)], {"version": 1})
if sys.argv[3] == "rlimit":
    resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))
try:
    store.append_turn("c", [Block.new("x", "t", 2.0, text="b" * 3_000_000, seq=1)], {"v": 1})
except DiskFull as exc:
    print("DiskFull", exc)
"""


def _tmpfs(path: Path) -> bool:
    """Mount a 1 MiB tmpfs at ``path`` when this machine allows it (root in a container)."""
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def test_a_full_disk_is_reported_and_nothing_committed_is_lost(tmp_path: Path) -> None:
    """A 1 MiB tmpfs when mountable, otherwise a process file-size limit of 300 KB."""
    where = tmp_path / "small"
    mode = "tmpfs" if _tmpfs(where) else "rlimit"
    try:
        done = subprocess.run(
            [sys.executable, "-c", DISK_FULL_CHILD, str(where / "db"), str(ROOT), mode],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.stdout.startswith("DiskFull disk full at"), (mode, done.stdout, done.stderr)
        assert "nothing committed was lost" in done.stdout
        with Store(where / "db") as store:
            header = store.header("c")
            assert header is not None and header["stored_seq"] == 1
            assert [d["text"] for d in store.iter_blocks("c")] == ["a" * 100]
    finally:
        if mode == "tmpfs":
            subprocess.run(["umount", str(where)], check=False)


def test_index_rows_are_written_with_the_turn_and_read_back_in_order(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        rows = [
            {
                "turn_id": "t1",
                "role": "user",
                "ts": 1.0,
                "text": "how?",
                "path": "ar:t1.user.prompt",
            },
            {"turn_id": "t1", "role": "assistant", "ts": 2, "text": "so.", "vector": [0.1, 0.2]},
        ]
        store.append_turn("c1", [], {"version": 1}, index_rows=rows[:1])
        store.append_turn("c1", [], {"version": 1}, index_rows=rows[1:])
        assert store.index_rows("c1") == rows
        with pytest.raises(ValueError, match="'text'"):
            store.append_turn(
                "c1", [], {"version": 1}, index_rows=[{"turn_id": "t", "role": "u", "ts": 1}]
            )
        assert len(store.index_rows("c1")) == 2


def test_a_block_with_a_very_long_path_is_indexed_and_found(tmp_path: Path) -> None:
    path = "ks:" + "/".join(["segment" * 10] * 20)
    with Store(tmp_path) as store:
        block = Block.new("react.read.content", "t1", 1.0, path=path, text="long", seq=0)
        store.append_turn("c1", [block], {"version": 1})
        assert [b.text for b in store.read_path("c1", path)] == ["long"]


def test_read_path_returns_only_blocks_and_leaves_workspace_files_to_the_workspace(
    tmp_path: Path,
) -> None:
    from actline.storage import Workspace

    with Store(tmp_path) as store:
        workspace = Workspace(store, "c1")
        path = workspace.write("t1", "files", "app/main.py", b"print('hi')\n", mime="text/x-python")
        assert store.read_path("c1", path) == []
        assert workspace.read(path) == b"print('hi')\n"
        assert store.read_path("c1", "fi:t1.files/missing.txt") == []
        block = Block.new("react.tool.result", "t1", 1.0, path="fi:t1.files/note.md", seq=0)
        store.append_turn("c1", [block], {"version": 2})
        assert [b.id for b in store.read_path("c1", "fi:t1.files/note.md")] == [block.id]


@pytest.mark.parametrize("cid", ["a/b", "", "has space", "nul\x00"])
def test_a_conversation_id_that_could_collide_in_keys_is_refused(tmp_path: Path, cid: str) -> None:
    with Store(tmp_path) as store:
        with pytest.raises(ValueError, match="not a valid conversation id"):
            store.append_turn(cid, [], {"version": 1})
        with pytest.raises(ValueError, match="not a valid conversation id"):
            store.load(cid)


def test_turn_records_commit_with_the_blocks_they_describe(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        tl = Timeline("c1")
        tl.begin_turn("t1", 1.0)
        assert store.turn_record("c1", "t1") is None
        store.persist(tl, turn_records={"t1": {"status": "running", "round": 2}})
        assert store.turn_record("c1", "t1") == {"status": "running", "round": 2}
        with pytest.raises(RevisionConflict):
            store.append_turn(
                "c1", [], tl.snapshot(), expect_revision=0, turn_records={"t1": {"status": "x"}}
            )
        assert store.turn_record("c1", "t1") == {"status": "running", "round": 2}
        store.persist(tl, turn_records={"t1": {"status": "completed"}})
        assert store.turn_record("c1", "t1") == {"status": "completed"}
        with pytest.raises(ValueError, match="not a valid"):
            store.turn_record("c1", "bad/turn")


def test_replace_conversation_drops_the_old_copy_and_writes_the_given_one(tmp_path: Path) -> None:
    from actline.timeline import Block, Timeline
    from actline.timeline.blocks import USER_PROMPT
    from actline.timeline.paths import ar_path

    with Store(tmp_path / "db") as store:
        tl = Timeline("c1")
        tl.begin_turn("t1", 1.0)
        tl.append(Block.new(USER_PROMPT, "t1", 1.0, path=ar_path("t1", "user.prompt"), text="a"))
        store.persist(tl)
        followup = ar_path("t1", "user.followup.1")
        tl.append(Block.new(USER_PROMPT, "t1", 2.0, path=followup, text="b"))
        store.persist(tl)
        other = Timeline("c2")
        other.begin_turn("t9", 1.0)
        store.persist(other)
        kept = [Block.from_dict(b) for b in store.iter_blocks("c1")][:2]
        row = {"turn_id": "t1", "role": "user", "ts": 1.0, "text": "a"}
        revision = store.replace_conversation("c1", tl.snapshot(), kept, index_rows=[row])
        assert revision == 1 and store.cursor("c1") == (1, 2)
        assert [b["seq"] for b in store.iter_blocks("c1")] == [0, 1]
        assert store.read_path("c1", ar_path("t1", "user.followup.1")) == []
        assert store.index_rows("c1") == [row]
        assert len(list(store.iter_blocks("c2"))) == 1  # other conversations untouched


def test_replace_conversation_drops_running_records_the_copy_does_not_hold(tmp_path: Path) -> None:
    from actline.timeline import Timeline

    with Store(tmp_path / "db") as store:
        tl = Timeline("c1")
        tl.begin_turn("t1", 1.0)
        records = {
            "t1": {"status": "completed", "turn_id": "t1"},
            "t2": {"status": "running", "turn_id": "t2", "round": 3},
            "t3": {"status": "running", "turn_id": "t3", "round": 1},
        }
        store.persist(tl, turn_records=records)
        store.persist(Timeline("c2"), turn_records={"t2": {"status": "running"}})
        copy = {"t3": {"status": "running", "turn_id": "t3", "round": 0}}
        store.replace_conversation("c1", tl.snapshot(), [], turn_records=copy)
        assert store.turn_record("c1", "t1") == records["t1"]  # final: answered again
        assert store.turn_record("c1", "t2") is None  # ahead of the copy: starts again
        assert store.turn_record("c1", "t3") == copy["t3"]
        assert store.turn_record("c2", "t2") == {"status": "running"}
        assert [cid for cid, _ in store.unfinished_turns()] == ["c1", "c2"]


# --- header rows --------------------------------------------------------------------------------


def web(n: int, title: str = "") -> SourceRow:
    return SourceRow(0, url=f"https://example.com/{n:05d}", title=title or f"page {n:05d}")


def a_round(tl: Timeline, n: int, *, sources: int = 5) -> None:
    """Round ``n``: a notice block, ``sources`` new sources, one longer title, a new plan."""
    tl.append(Block.new("react.notice", "t1", 2e9 + n, text=f"round {n}"))
    tl.sources.add_rows(web(n * sources + i) for i in range(sources))
    if n:
        tl.sources.add_rows([web(n * sources - 1, f"page {n * sources - 1:05d} seen again")])
    plan = tl.plans.apply("new", turn_id="t1", plan_id=f"p{n:04d}", steps=["look", "write"])
    tl.record_plan(plan, turn_id="t1", ts=2e9 + n)


def raw_header(store: Store, cid: str) -> bytes:
    raw = store.read(lambda txn: txn.get(cid.encode(), db=store.db["snapshots"]))
    assert raw is not None
    return bytes(raw)


def test_bytes_written_per_round_do_not_grow_with_the_pool_or_the_plans(tmp_path: Path) -> None:
    tl = Timeline("c1")
    tl.begin_turn("t1", 2e9)
    sizes: list[tuple[int, int, int]] = []
    with Store(tmp_path) as store:
        for n in range(400):
            a_round(tl, n)
            done = store.persist_round(tl)
            rows = sum(len(pack(value)) for value in done.rows.values())
            sizes.append((len(raw_header(store, "c1")), len(done.rows), rows))
        assert len(tl.sources) == 2_000 and len(tl.plans.plans()) == 400
        assert {n for _, n, _ in sizes[1:]} == {5 + 1 + 2}  # new, lengthened, new and demoted plan
        assert sizes[-1][0] - sizes[10][0] <= 8  # the header: wider integers only
        assert max(h for h, _, _ in sizes) < 512
        # Texts have one width; integers (SIDs, plan positions) take 1 to 3 bytes.
        assert sizes[399][2] - sizes[10][2] <= 2 * 8
        assert sizes[300][2] == sizes[399][2] < 1024  # pools of 1,500 and 2,000 rows
        loaded = store.load("c1").timeline
        assert loaded.full_snapshot() == tl.full_snapshot()
        assert len(store.header_rows("c1")) == 2_000 + 400


def test_a_round_reports_the_rows_it_wrote(tmp_path: Path) -> None:
    tl = Timeline("c1")
    tl.begin_turn("t1", 2e9)
    with Store(tmp_path) as store:
        a_round(tl, 0, sources=2)
        first = store.persist_round(tl)
        assert set(first.rows) == {"src/000001", "src/000002", "plan/p0000"}
        assert store.persist_round(tl).rows == {}
        assert store.header_rows("c1") == first.rows
        assert "sources" not in first.snapshot and "plans" not in first.snapshot


def test_a_header_stored_in_the_old_format_loads_and_moves_to_rows(tmp_path: Path) -> None:
    tl = Timeline("c1")
    tl.begin_turn("t1", 2e9)
    a_round(tl, 0)
    with Store(tmp_path) as store:
        store.persist(tl)
        old = {**tl.full_snapshot(), "revision": 1, "stored_seq": len(tl), "boundary_seq": 0}
        store.write(lambda txn: txn.put(b"c1", pack(old), db=store.db["snapshots"]))
        store.write(lambda txn: txn.drop(store.db["hrows"], delete=False))
        assert store.header_rows("c1") == {}
        loaded = store.load("c1").timeline
        assert loaded.full_snapshot() == tl.full_snapshot()
        store.persist(loaded)  # stores the inline pool and plans as rows
        assert "sources" not in (store.header("c1") or {})
        assert len(store.header_rows("c1")) == len(tl.sources) + 1
        assert store.load("c1").timeline.full_snapshot() == tl.full_snapshot()


def test_append_turn_stores_a_full_snapshot_as_a_small_header_and_rows(tmp_path: Path) -> None:
    tl = Timeline("c1")
    tl.begin_turn("t1", 2e9)
    a_round(tl, 0, sources=3)
    with Store(tmp_path) as store:
        store.append_turn("c1", tl.blocks_since(0), tl.full_snapshot())
        header = store.header("c1") or {}
        assert "sources" not in header and "plans" not in header
        assert set(store.header_rows("c1")) == {
            "src/000001",
            "src/000002",
            "src/000003",
            "plan/p0000",
        }
        assert store.load("c1").timeline.full_snapshot() == tl.full_snapshot()


def test_rows_of_a_failed_write_are_written_by_the_next_persist(tmp_path: Path) -> None:
    tl, _, b = conversation(1)
    with Store(tmp_path, map_size=256 << 10, max_map_size=256 << 10) as store:
        store.persist(tl)
        a_round(tl, 0, sources=2)
        b.turn("t9", "x" * 2_000_000)
        with pytest.raises(StoreFull):
            store.persist(tl)
        assert store.header_rows("c1") == {}
    with Store(tmp_path) as store:
        store.persist(tl)
        assert set(store.header_rows("c1")) == {"src/000001", "src/000002", "plan/p0000"}
        assert store.load("c1").timeline.full_snapshot() == tl.full_snapshot()


def test_replace_conversation_replaces_the_header_rows_too(tmp_path: Path) -> None:
    tl = Timeline("c1")
    tl.begin_turn("t1", 2e9)
    with Store(tmp_path) as store:
        a_round(tl, 0, sources=3)
        store.persist(tl)
        other = Timeline("c1")
        other.begin_turn("t1", 2e9)
        a_round(other, 7, sources=1)
        rows = other.take_row_changes()
        store.replace_conversation("c1", other.snapshot(), other.blocks_since(0), rows=rows)
        assert store.header_rows("c1") == rows
        assert store.load("c1").timeline.full_snapshot() == other.full_snapshot()


def test_a_header_row_key_must_fit_in_a_key(tmp_path: Path) -> None:
    with Store(tmp_path) as store, pytest.raises(ValueError, match="header row key"):
        store.append_turn("c1", [], {"version": 2}, rows={"x" * 600: 1})


def test_an_outline_reads_the_title_turns_and_last_turn_whatever_the_conversations_length(
    tmp_path: Path,
) -> None:
    """``Store.outline`` (the console's list): the first prompt, the turns with a record and
    the last turn's status, with neighbours whose ids share a prefix kept apart."""
    with Store(tmp_path / "db", sync=False) as store:
        long, _, b = conversation(40, "c1")  # 40 turns, about 400 blocks
        records = {f"t{n}": {"status": "completed"} for n in range(1, 41)}
        store.persist(long, turn_records=records)
        b.turn("t41", "Another question\nwith a second line")
        store.persist(long, turn_records={"t41": {"status": "running", "round": 1}})
        for cid in ("c10", "c1-x"):  # sort right after and right before "c1/..."
            other, _, _ = conversation(1, cid)
            store.persist(other, turn_records={"t1": {"status": "failed"}})
        outline = store.outline("c1")
        neighbour = store.outline("c10")
        before = store.outline("c1-x")
        unknown = store.outline("c2")
    assert outline.title == long.blocks[1].text.split("\n")[0]  # the first prompt's first line
    assert outline.turns == 41
    assert (outline.last_turn, outline.last_status) == ("t41", "running")
    assert outline.last_ts == long.blocks[-1].ts
    for other in (neighbour, before):
        assert (other.turns, other.last_turn, other.last_status) == (1, "t1", "failed")
    assert unknown == Outline("", 0, "", "", 0.0)


def test_an_outline_titles_a_conversation_by_its_gates_latest_title(tmp_path: Path) -> None:
    """The first turn's gate block holds the title; a model's title, stored later at the
    same path (after the turn's other blocks), replaces the heuristic one."""

    def gate(title: str, ts: float) -> Block:
        data = {"title": title, "new_conversation": True}
        return Block.new(STAGE_GATE, "t1", ts, path=ar_path("t1", "stage.gate"), data=data)

    with Store(tmp_path / "db", sync=False) as store:
        tl, _, b = conversation(0, "c1")
        b.turn("t1", "hi, what are the retention limits?")  # the prompt, then its gate
        tl.append(gate("Retention Limits", 2e9))
        b.rounds(30, size=50, prefix="r")  # the model's title lands past the outline's head
        store.persist(tl)
        heuristic = store.outline("c1").title
        tl.append(gate("Message retention limits by tier", 2e9 + 1))
        store.persist(tl)
        written = store.outline("c1").title
    assert (heuristic, written) == ("Retention Limits", "Message retention limits by tier")
