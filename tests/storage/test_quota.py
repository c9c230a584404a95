"""Per-conversation quotas: counters written with what they count, refusals before the write,
and the tools that store files (react.write, react.patch, react.checkout, exec's collect)."""

from __future__ import annotations

import asyncio
import hashlib
import pickle
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actline.actors import NodeSettings
from actline.actors.errors import SettingsError
from actline.actors.turn import events as ev
from actline.actors.turn.mailbox import ToolOutcome
from actline.actors.turn.tool_round import BlockBudget, ToolRound
from actline.storage import (
    NotStored,
    Quota,
    QuotaExceeded,
    Store,
    Usage,
    Workspace,
    artifacts,
    quota,
)
from actline.timeline import Block
from actline.tools.builtin import register_builtins
from actline.tools.react.core import ReactContext, ReactTools
from actline.tools.registry import ToolContext, ToolOutput, ToolRegistry
from actline.tools.workspace.workspace import CustomWorkspace, LocalTree, TurnFiles
from tests.timeline.builders import Build, words

KIB = 1024


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "db", sync=False) as s:
        yield s


def stored_bytes(store: Store, cid: str) -> int:
    """The packed size of every stored block of ``cid``, read the slow way."""
    return sum(len(v) for v in raw_blocks(store, cid).values())


def raw_blocks(store: Store, cid: str) -> dict[int, bytes]:
    def fn(txn: Any) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        cursor = txn.cursor(db=store.db["blocks"])
        prefix = f"{cid}/".encode()
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not bytes(key).startswith(prefix):
                    break
                out[int(bytes(key)[len(prefix) :])] = bytes(value)
        return out

    return store.read(fn)


# -- counting -----------------------------------------------------------------------------------


def test_block_bytes_are_counted_with_each_persisted_round(store: Store) -> None:
    b = Build()
    b.tl.conversation_id = "c1"
    assert store.usage("c1") == Usage()
    b.turn("t1", words(50))
    b.rounds(2, size=200, prefix="a")
    store.persist(b.tl)
    first = store.usage("c1").block_bytes
    assert first == stored_bytes(store, "c1") > 0
    b.turn("t2", words(10))
    store.persist(b.tl)
    assert store.usage("c1").block_bytes == stored_bytes(store, "c1") > first
    assert store.usage("c1") == quota.recount(store, "c1")


def test_hiding_and_unhiding_a_block_counts_its_rewritten_size(store: Store) -> None:
    b = Build()
    b.tl.conversation_id = "c1"
    b.turn("t1")
    big = b.result("x1", words(400))
    store.persist(b.tl)
    before = store.usage("c1").block_bytes
    b.tl.set_hidden([big], "hidden: a long result")
    store.persist(b.tl)
    hidden = store.usage("c1").block_bytes
    assert hidden == stored_bytes(store, "c1") != before
    b.tl.unhide(big.path)
    store.persist(b.tl)
    assert store.usage("c1").block_bytes == stored_bytes(store, "c1")


def test_counters_are_per_conversation(store: Store) -> None:
    for cid, size in (("c1", 10), ("c10", 300)):
        b = Build()
        b.tl.conversation_id = cid
        b.turn("t1", words(size))
        store.persist(b.tl)
        Workspace(store, cid).write("t1", "files", "a/x", b"x" * size)
    assert store.usage("c1").workspace_bytes == 10
    assert store.usage("c10").workspace_bytes == 300
    assert store.usage("c1").block_bytes == stored_bytes(store, "c1")
    assert store.usage("c10").block_bytes == stored_bytes(store, "c10")


def test_workspace_versions_count_by_area_and_a_replaced_version_gives_its_bytes_back(
    store: Store,
) -> None:
    ws = Workspace(store, "c1")
    ws.write("t1", "files", "src/a.py", b"a" * 100)
    ws.write("t1", "outputs", "r/report.md", b"r" * 40)
    ws.write("t1", "user.attachments", "doc.txt", b"d" * 7)
    assert store.usage("c1") == Usage(workspace_bytes=100, artifacts=2, artifact_bytes=47)
    ws.write("t1", "files", "src/a.py", b"a" * 30)  # same turn: replaces the version
    ws.write("t1", "outputs", "r/report.md", b"r" * 50)
    assert store.usage("c1") == Usage(workspace_bytes=30, artifacts=2, artifact_bytes=57)
    ws.write("t2", "files", "src/a.py", b"b" * 20)  # a later turn: history is kept
    ws.delete("t2", "files", "src/a.py")  # the tombstone replaces t2's version
    ws.delete("t1", "outputs", "r/report.md")
    assert store.usage("c1") == Usage(workspace_bytes=30, artifacts=1, artifact_bytes=7)
    assert store.usage("c1") == quota.recount(store, "c1")


def test_counters_commit_with_the_write_or_not_at_all(store: Store) -> None:
    b = Build()
    b.tl.conversation_id = "c1"
    b.turn("t1", words(30))
    store.persist(b.tl)
    held = store.usage("c1")
    b.turn("t2", words(300))
    prepared = store.prepare_round(b.tl)

    def crash(txn: Any) -> None:  # the blocks and their count are put, then the txn dies
        prepared.write(txn)
        assert quota.usage_txn(store, txn, "c1").block_bytes > held.block_bytes
        raise RuntimeError("killed mid-transaction")

    with pytest.raises(RuntimeError):
        store.write(crash)
    prepared.undo()
    assert store.usage("c1") == held
    assert store.usage("c1").block_bytes == stored_bytes(store, "c1")


def test_replacing_a_conversation_counts_its_blocks_again_and_keeps_its_files(
    store: Store,
) -> None:
    b = Build()
    b.tl.conversation_id = "c1"
    b.turn("t1", words(200))
    store.persist(b.tl)
    Workspace(store, "c1").write("t1", "files", "a/b", b"z" * 9)
    copy = [Block.from_dict(d) for d in store.iter_blocks("c1")][:1]
    store.replace_conversation("c1", b.tl.snapshot(), copy)
    assert store.usage("c1") == Usage(workspace_bytes=9, block_bytes=stored_bytes(store, "c1"))


def test_recount_with_save_counts_a_conversation_stored_before_counting(store: Store) -> None:
    b = Build()
    b.tl.conversation_id = "c1"
    b.turn("t1", words(20))
    store.persist(b.tl)
    Workspace(store, "c1").write("t1", "outputs", "o/x", b"1234")
    store.write(lambda txn: txn.delete(b"c1", db=store.db["usage"]))  # as an older store
    assert store.usage("c1") == Usage()
    counted = quota.recount(store, "c1", save=True)
    assert counted == store.usage("c1") == Usage(0, stored_bytes(store, "c1"), 1, 4)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "delete", "blocks", "hide"]),
        st.sampled_from(["files", "outputs", "user.attachments"]),
        st.sampled_from(["s/a", "s/b", "t/c"]),
        st.integers(0, 3),  # the turn
        st.integers(0, 500),  # a size
    ),
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_counters_always_equal_a_full_recount(tmp_path: Path, ops: list[Any]) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder, Store(folder, sync=False) as store:
        ws = Workspace(store, "c1", quota=Quota.unlimited())
        b = Build()
        b.tl.conversation_id = "c1"
        b.turn("t0")
        for op, area, path, turn, size in ops:
            rel = path.replace("/", "-") if area == "user.attachments" else path
            if op == "write":
                ws.write(f"t{turn}", area, rel, bytes([65 + turn]) * size)
            elif op == "delete":
                try:
                    ws.delete(f"t{turn}", area, rel)
                except NotStored:
                    pass
            elif op == "blocks":
                b.result(f"x{len(b.tl)}", "w " * size)
            elif len(b.tl) > 1:
                b.tl.set_hidden([b.tl.blocks[-1]], f"hid {size}")
            store.persist(b.tl)
        assert store.usage("c1") == quota.recount(store, "c1")


# -- refusing -----------------------------------------------------------------------------------


def test_a_write_past_a_quota_raises_naming_it_and_stores_nothing(store: Store) -> None:
    ws = Workspace(store, "c1", quota=Quota(workspace_bytes=100))
    ws.write("t1", "files", "a/kept.txt", b"k" * 60)
    big = b"B" * 50
    with pytest.raises(QuotaExceeded) as caught:
        ws.write("t1", "files", "a/big.bin", big)
    exc = caught.value
    assert (exc.quota, exc.usage, exc.limit, exc.needed) == ("workspace_bytes", 60, 100, 50)
    assert "quota_workspace_bytes" in str(exc) and "60 of 100 bytes" in str(exc)
    assert store.usage("c1").workspace_bytes == 60
    assert ws.read("fi:t1.files/a/kept.txt") == b"k" * 60
    with pytest.raises(NotStored):
        ws.read("fi:t1.files/a/big.bin")
    assert artifacts.refcount(store, hashlib.sha256(big).hexdigest()) == 0
    with pytest.raises(NotStored):
        artifacts.get(store, hashlib.sha256(big).hexdigest())


def test_each_counter_is_enforced(store: Store) -> None:
    ws = Workspace(store, "c1", quota=Quota(artifacts=2, artifact_bytes=1000))
    ws.write("t1", "outputs", "o/1", b"1")
    ws.write("t1", "outputs", "o/2", b"2")
    with pytest.raises(QuotaExceeded) as count:
        ws.write("t1", "outputs", "o/3", b"3")
    assert count.value.quota == "artifacts"
    ws.write("t1", "outputs", "o/2", b"2" * 900)  # replacing a version adds no artifact
    with pytest.raises(QuotaExceeded) as size:
        ws.write("t1", "outputs", "o/1", b"1" * 200)
    assert (size.value.quota, size.value.usage) == ("artifact_bytes", 901)


def test_over_its_quota_a_conversation_may_still_shrink_and_delete(store: Store) -> None:
    Workspace(store, "c1", quota=Quota.unlimited()).write("t1", "files", "a/x", b"x" * 500)
    ws = Workspace(store, "c1", quota=Quota(workspace_bytes=100))
    ws.write("t1", "files", "a/x", b"x" * 300)  # smaller: allowed though still over
    ws.delete("t1", "files", "a/x")
    assert store.usage("c1").workspace_bytes == 0
    ws.write("t2", "files", "a/y", b"y" * 100)


def test_attachments_are_counted_but_never_refused(store: Store) -> None:
    ws = Workspace(store, "c1", quota=Quota(artifacts=1, artifact_bytes=10))
    ws.write("t1", "user.attachments", "a.pdf", b"p" * 50)
    ws.write_followup_attachment("t1", "m1", "b.png", b"i" * 50)
    assert store.usage("c1") == Usage(artifacts=2, artifact_bytes=100)
    with pytest.raises(QuotaExceeded):
        ws.write("t1", "outputs", "o/x", b"x")


def test_check_room_checks_a_batch_at_once(store: Store) -> None:
    ws = Workspace(store, "c1", quota=Quota(workspace_bytes=100))
    ws.write("t1", "files", "a/x", b"x" * 60)
    assert ws.check_room("t1", [("files", "a/x", 90), ("files", "a/y", 10)]) == Usage(
        workspace_bytes=40
    )
    with pytest.raises(QuotaExceeded):
        ws.check_room("t1", [("files", "a/y", 30), ("files", "a/z", 30)])
    ws.check_room("t1", [("files", "a/x", None), ("files", "a/y", 90)])


def test_quota_exceeded_pickles_with_its_fields() -> None:
    exc = QuotaExceeded("c1", "block_bytes", 10, 20, 30)
    again = pickle.loads(pickle.dumps(exc))
    assert (again.conversation_id, again.quota, again.usage, again.limit, again.needed) == (
        "c1",
        "block_bytes",
        10,
        20,
        30,
    )
    assert str(again) == str(exc)
    assert again.as_dict()["quota"] == "quota_block_bytes"


def test_quotas_come_from_settings_and_refuse_negative_values() -> None:
    assert NodeSettings().quota == Quota() == Quota(256 << 20, 256 << 20, 10_000, 1 << 30)
    env = {"ACTLINE_QUOTA_WORKSPACE_BYTES": "0", "ACTLINE_QUOTA_ARTIFACTS": "5"}
    got = NodeSettings.from_env(env).quota
    assert (got.workspace_bytes, got.artifacts, got.block_bytes) == (0, 5, 256 << 20)
    with pytest.raises(SettingsError) as caught:
        NodeSettings.from_env({"ACTLINE_QUOTA_BLOCK_BYTES": "-1"})
    assert caught.value.name == "ACTLINE_QUOTA_BLOCK_BYTES"
    with pytest.raises(ValueError, match="artifacts"):
        Quota(artifacts=-3)


def test_the_summary_names_each_counter_and_its_limit() -> None:
    line = quota.summary(Usage(1, 2048, 3, 4), Quota(workspace_bytes=0))
    assert "blocks 2,048 B of 268,435,456 B" in line
    assert "workspace 1 B of no limit" in line
    assert "artifacts 3 of 10,000" in line


# -- the tools ----------------------------------------------------------------------------------


def react_ctx(store: Store, ws: CustomWorkspace, local: LocalTree, turn: str) -> ReactContext:
    return ReactContext(
        timeline=Build().tl,
        renderer=None,
        turn_id=turn,
        call_id="k1",
        now=1.0,
        store=store,
        knowledge=None,
        workspace=ws,
        local=local,
    )


def write(path: str, content: str) -> dict[str, str]:
    return {"path": path, "channel": "canvas", "content": content, "kind": "file"}


def test_react_write_patch_and_checkout_past_a_quota_are_errors_naming_it(
    store: Store, tmp_path: Path
) -> None:
    ws = CustomWorkspace(store, "c1", quota=Quota(workspace_bytes=1000))
    local = LocalTree(ws, tmp_path / "ws")
    tools = ReactTools()
    ctx = react_ctx(store, ws, local, "t1")
    ok = tools.run("react.write", write("files/a/x.md", "x" * 600), ctx)
    assert ok.ok
    for tool, params in (
        ("react.write", write("files/a/y.md", "y" * 600)),
        ("react.patch", {"path": "files/a/y.md", "patch": "z" * 600}),
    ):
        out = tools.run(tool, params, ctx)
        assert out.result["code"] == "quota_exceeded", out.result
        assert out.result["quota"] == "quota_workspace_bytes"
        assert (out.result["usage"], out.result["limit"]) == (600, 1000)
        assert out.notices and out.notices[0].code == "quota_exceeded"
    ctx2 = react_ctx(store, ws, local, "t2")
    assert tools.run("react.write", write("files/a/x.md", "w" * 100), ctx2).ok
    assert tools.run("react.write", write("files/b/z.md", "z" * 50), ctx2).ok
    out = tools.run("react.checkout", {"paths": ["fi:t1.files/a/"], "mode": "replace"}, ctx2)
    assert out.result["code"] == "quota_exceeded"  # t1's x.md again in t2 does not fit
    assert out.result["usage"] == 750
    assert ws.read("fi:t2.files/a/x.md") == b"w" * 100  # nothing was changed, nor removed
    assert ws.read("fi:t2.files/b/z.md") == b"z" * 50
    assert store.usage("c1").workspace_bytes == 750
    assert ws.read("fi:t1.files/a/x.md") == b"x" * 600


def test_an_exec_run_past_a_quota_stores_none_of_its_files_and_reads_none(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = CustomWorkspace(store, "c1", quota=Quota(workspace_bytes=64 * KIB))
    ws.write("t1", "files", "a/kept.txt", b"kept")
    local = LocalTree(ws, tmp_path / "ws")
    snapshot = local.materialize("t1")
    root = local.turn_root("t1")
    (root / "files" / "a" / "small.txt").write_text("small")
    (root / "files" / "a" / "kept.txt").write_text("changed")
    with (root / "files" / "huge.bin").open("wb") as handle:
        handle.truncate(2 << 30)  # 2 GB, sparse: it costs no disk, only its size counts
    read: list[Path] = []
    original = Path.read_bytes

    def spy(self: Path) -> bytes:
        read.append(self)
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", spy)
    with pytest.raises(QuotaExceeded) as caught:
        local.collect(snapshot)
    assert caught.value.quota == "workspace_bytes"
    assert caught.value.needed > 2 << 30
    assert read == []  # nothing was read, so nothing could be copied
    assert store.usage("c1").workspace_bytes == 4
    assert ws.read("fi:t1.files/a/kept.txt") == b"kept"  # the run's edit was not kept either
    assert set(ws.tree("t1", "files")) == {"a/kept.txt"}
    (root / "files" / "huge.bin").unlink()
    assert set(local.collect(snapshot)) == {"fi:t1.files/a/small.txt", "fi:t1.files/a/kept.txt"}


# -- the block quota on a round's tool results --------------------------------------------------


def outcome(call_id: str, size: int) -> ToolOutcome:
    return ToolOutcome(call_id, "test.big", True, {"status": "ok", "content": "x" * size})


def calls(*ids: str) -> tuple[ev.ToolSpec, ...]:
    return tuple(ev.ToolSpec(i, "test.big", {}) for i in ids)


def test_results_past_the_block_quota_are_replaced_and_the_rest_kept() -> None:
    tools = ToolRound(1, calls("a", "b", "c"))
    tools.external_ran((outcome("a", 3000), outcome("b", 50_000), outcome("c", 2000)))
    budget = BlockBudget("c1", Usage(block_bytes=40_000), Quota(block_bytes=50_000))
    done = tools.complete(budget)
    assert done is not None
    (a, b, c), detail = done
    assert a.ok and c.ok and a.data["content"] == "x" * 3000
    assert not b.ok and b.data["code"] == "quota_exceeded"
    assert (b.data["quota"], b.data["usage"], b.data["limit"]) == (
        "quota_block_bytes",
        40_000,
        50_000,
    )
    assert "test.big" in b.data["error"] and "was not kept" in b.data["error"]
    assert detail == "3 result(s), 1 failed"


def test_without_a_block_quota_results_are_untouched() -> None:
    tools = ToolRound(1, calls("a"))
    tools.external_ran((outcome("a", 90_000),))
    budget = BlockBudget("c1", Usage(block_bytes=10**12), Quota(block_bytes=0))
    done = tools.complete(budget)
    assert done is not None and done[0][0].ok


@pytest.mark.parametrize(
    ("quota_", "files", "name"),
    [
        (Quota(artifacts=3), {f"o/{i}.txt": 10 for i in range(5)}, "artifacts"),
        (Quota(artifact_bytes=1000), {"o/a.bin": 600, "o/b.bin": 600}, "artifact_bytes"),
    ],
)
def test_an_exec_run_past_an_artifact_quota_stores_none_of_its_outputs(
    store: Store, tmp_path: Path, quota_: Quota, files: dict[str, int], name: str
) -> None:
    ws = CustomWorkspace(store, "c1", quota=quota_)
    local = LocalTree(ws, tmp_path / "ws")
    snapshot = local.materialize("t1")
    for rel, size in files.items():
        path = local.turn_root("t1") / "outputs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"o" * size)
    with pytest.raises(QuotaExceeded) as caught:
        local.collect(snapshot)
    assert caught.value.quota == name
    assert store.usage("c1") == Usage() and ws.tree("t1", "outputs") == {}


async def test_files_write_past_a_quota_is_an_error_result_naming_it(
    store: Store, tmp_path: Path
) -> None:
    registry = ToolRegistry()
    register_builtins(registry)
    tool = registry.get("files.write")
    assert tool is not None
    ws = CustomWorkspace(store, "c1", quota=Quota(artifact_bytes=100))
    files = TurnFiles(ws, LocalTree(ws, tmp_path / "ws"), "t1", asyncio.Lock())
    ctx = ToolContext("c1", "t1", "k1", "files.write", deadline=1e12, files=files)
    ok = await tool.fn({"path": "outputs/r/a.md", "content": "a" * 80}, ctx)
    refused = await tool.fn({"path": "outputs/r/b.md", "content": "b" * 80}, ctx)
    assert isinstance(ok, ToolOutput) and ok.error is None
    assert isinstance(refused, ToolOutput) and refused.error is not None
    assert "quota_artifact_bytes" in refused.error and "80 of 100 bytes" in refused.error
    assert refused.data["code"] == "quota_exceeded"
    assert (refused.data["usage"], refused.data["limit"], refused.data["needed"]) == (80, 100, 80)
    assert store.usage("c1") == Usage(artifacts=1, artifact_bytes=80)
