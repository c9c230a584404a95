"""Forking, deleting and renaming stored conversations (``storage.forks``, ``storage.manage``):
the original untouched byte for byte, the fork's state at its turn, artifacts shared by
reference, a delete of a parent whose forks keep what they use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.storage import NotStored, Store, Workspace, artifacts
from actline.storage.forks import ForkRefused, fork_conversation
from actline.storage.layout import DATABASES, unpack
from actline.storage.manage import (
    conversation_ids,
    delete_conversation,
    management_row,
    set_title,
    turn_order,
)
from actline.timeline import Block, Renderer, SourceRow, TimelineConfig
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from actline.timeline.facts import Fact
from actline.timeline.paths import tc_path
from tests.timeline.builders import Build, words

CID, FORK = "c-parent", "c-fork"
SHARED = b"shared file bytes " * 100
LATER = b"written in turn two " * 50


def rows_of(store: Store, cid: str) -> dict[tuple[str, bytes], bytes]:
    """Every row of ``cid`` in every database, keyed by (database, key)."""
    heads = (f"{cid}/".encode(), cid.encode() + b"\x00")
    out: dict[tuple[str, bytes], bytes] = {}

    def fn(txn: Any) -> None:
        for name in DATABASES:
            for key, value in txn.cursor(db=store.db[name]):
                k = bytes(key)
                if k == cid.encode() or k.startswith(heads):
                    out[(name, k)] = bytes(value)

    store.read(fn)
    return out


def two_turns(store: Store) -> Build:
    """t1: a sourced tool result, a plan, a fact, a file; t2: hides t1's result, acks the
    plan, supersedes the fact, cites a new source, writes a file."""
    b = Build()
    b.tl.conversation_id = CID
    ws = Workspace(store, CID)
    b.turn("t1", "how do the pricing tiers differ")
    b.call("k1", turn="t1")
    [pooled] = [r for r in b.tl.sources.add_rows([SourceRow(0, url="https://a.example/tiers",
                                                              title="Tiers")]) if r]  # fmt: skip
    b.result("k1", words(300), data={"sources": [{"sid": pooled.sid}]})
    b.plan(["gather", "answer"], plan_id="p1")
    fact = Fact("budget", "100", turn_id="t1", ts=b.at())
    b.tl.facts.upsert(fact, now=b.clock, conversation_id=CID)
    ws.write("t1", "files", "notes.md", SHARED)
    b.completion("four tiers")
    store.persist(b.tl, turn_records={"t1": {"status": "completed", "result": {"answer": "x"}}})
    b.turn("t2", "and the quotas")
    b.add(
        TOOL_CALL,
        path=tc_path("t2", "k2", "call"),
        call_id="k2",
        data={"tool": "react.hide", "params": {"path": tc_path("t1", "k1", "result")}},
    )
    hidden = b.tl.blocks_at(tc_path("t1", "k1", "result"))
    b.tl.set_hidden(hidden, "[hidden]")
    b.tl.acknowledge("✓ 1. gather", turn_id="t2", ts=b.at(), iteration=1)
    b.tl.facts.upsert(Fact("budget", "200", turn_id="t2", ts=b.at()), now=b.clock)
    [second] = [r for r in b.tl.sources.add_rows([SourceRow(0, url="https://b.example/q")]) if r]
    b.add(TOOL_RESULT, path=tc_path("t2", "k3", "result"), data={"sources": [{"sid": second.sid}]})
    ws.write("t2", "files", "later.md", LATER)
    ws.write("t2", "outputs", "copy.md", SHARED)
    b.completion("the quotas")
    store.persist(b.tl, turn_records={"t2": {"status": "completed", "result": {"answer": "y"}}})
    return b


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path, sync=False) as s:
        yield s


def test_a_fork_leaves_every_row_of_the_original_as_it_was(store: Store) -> None:
    two_turns(store)
    before = rows_of(store, CID)
    fork_conversation(store, CID, FORK, "1")
    assert rows_of(store, CID) == before


def test_the_fork_holds_the_timeline_and_state_at_the_end_of_its_turn(store: Store) -> None:
    b = two_turns(store)
    point = fork_conversation(store, CID, FORK, "t1", title="other way")
    assert (point.turn_id, point.turns, point.exact) == ("t1", 1, False)
    tl = store.load(FORK).timeline
    assert tl.conversation_id == FORK
    assert tl.turn_ids() == ["t1"]
    assert [blk.id for blk in tl] == [blk.id for blk in b.tl if blk.turn_id == "t1"]
    [result] = tl.blocks_at(tc_path("t1", "k1", "result"))
    assert not result.hidden  # hidden by t2's react.hide, which the fork never ran
    assert [r.sid for r in tl.sources.rows()] == [1] and tl.sources.next_sid == 2
    [plan] = tl.plans.plans()
    assert [s.status for s in plan.steps] == ["pending", "pending"]
    current = tl.facts.current("budget")
    assert current is not None and current.value == "100"
    assert store.outline(FORK).title == "other way"
    assert [tid for tid, _ in turn_order(store, FORK)] == ["t1"]
    assert store.turn_record(FORK, "t1") == {
        "status": "completed",
        "result": {"answer": "x", "conversation_id": FORK},
        "inherited_from": CID,
    }
    assert management_row(store, FORK)["forked_from"] == [CID, "t1"]


def test_the_fork_shares_its_files_bytes_by_reference(store: Store) -> None:
    two_turns(store)
    sha = artifacts.put(store, SHARED, refs=0)  # already stored: its count is not changed
    assert artifacts.refcount(store, sha) == 2  # t1's file and t2's output
    point = fork_conversation(store, CID, FORK, "1")
    assert point.files == 1 and artifacts.refcount(store, sha) == 3
    forked = Workspace(store, FORK)
    assert forked.read("fi:t1.files/notes.md") == SHARED
    assert forked.turns() == ["t1"]
    with pytest.raises(NotStored):
        forked.read("fi:t2.files/later.md")


def test_a_turn_on_the_fork_persists_and_may_hide_an_inherited_block(store: Store) -> None:
    two_turns(store)
    before = rows_of(store, CID)
    fork_conversation(store, CID, FORK, "1")
    tl = store.load(FORK).timeline
    b = Build(tl, t0=2_000_000_000.0)
    b.turn("t3", "what about backups")
    tl.set_hidden(tl.blocks_at(tc_path("t1", "k1", "result")), "[gone]")
    b.completion("backups")
    store.persist(tl, turn_records={"t3": {"status": "completed", "result": {}}})
    again = store.load(FORK).timeline
    assert again.turn_ids() == ["t1", "t3"]
    assert all(blk.hidden for blk in again.blocks_at(tc_path("t1", "k1", "result")))
    assert rows_of(store, CID) == before


def test_a_fork_at_the_last_turn_copies_the_state_exactly(store: Store) -> None:
    two_turns(store)
    point = fork_conversation(store, CID, FORK, "2")
    assert point.exact and point.turns == 2
    assert store.header_rows(FORK) == store.header_rows(CID)
    parent, fork = store.load(CID).timeline, store.load(FORK).timeline
    assert fork.sources.to_dict() == parent.sources.to_dict()
    assert fork.plans.to_dict() == parent.plans.to_dict()
    assert [(blk.id, blk.hidden) for blk in fork] == [(blk.id, blk.hidden) for blk in parent]


def test_a_fork_point_that_is_not_a_turn_is_refused_naming_the_range(store: Store) -> None:
    two_turns(store)
    with pytest.raises(ForkRefused, match=r"turn 3 is out of range.*1\.\.2"):
        fork_conversation(store, CID, FORK, "3")
    with pytest.raises(ForkRefused, match="no turn 'nope'"):
        fork_conversation(store, CID, FORK, "nope")
    with pytest.raises(NotStored):
        fork_conversation(store, "c-none", FORK, "1")
    assert conversation_ids(store) == [CID]


def test_a_running_turn_cannot_be_forked_at_but_an_earlier_one_can(store: Store) -> None:
    b = two_turns(store)
    b.turn("t3", "still thinking")
    store.persist(b.tl, turn_records={"t3": {"status": "running", "round": 1}})
    with pytest.raises(ForkRefused, match="still running") as refused:
        fork_conversation(store, CID, FORK, "t3")
    assert refused.value.reason == "turn_running"
    point = fork_conversation(store, CID, FORK, "2")
    assert not point.exact  # a turn runs after it: the state is rebuilt
    assert store.load(FORK).timeline.turn_ids() == ["t1", "t2"]


def test_deleting_a_parent_keeps_its_forks_and_the_bytes_they_share(store: Store) -> None:
    two_turns(store)
    fork_conversation(store, CID, FORK, "1")
    sha = artifacts.put(store, SHARED, refs=0)
    later = artifacts.put(store, LATER, refs=0)
    blocks = len(list(store.iter_blocks(CID)))
    removed = delete_conversation(store, CID)
    assert (removed.blocks, removed.turns, removed.files) == (blocks, 2, 3)
    assert removed.artifacts == 1  # LATER: no one else holds it; SHARED: the fork does
    assert rows_of(store, CID) == {}
    assert artifacts.refcount(store, sha) == 1 and artifacts.refcount(store, later) == 0
    with pytest.raises(NotStored):
        artifacts.get(store, later)
    assert Workspace(store, FORK).read("fi:t1.files/notes.md") == SHARED
    assert store.load(FORK).timeline.turn_ids() == ["t1"]
    assert conversation_ids(store) == [FORK]
    gone = delete_conversation(store, FORK)
    assert gone.artifacts == 1 and rows_of(store, FORK) == {}
    with pytest.raises(NotStored):
        delete_conversation(store, FORK)


def test_rename_writes_one_row_and_outlines_prefer_it(store: Store) -> None:
    two_turns(store)
    blocks = {k: v for k, v in rows_of(store, CID).items() if k[0] != "convmeta"}
    set_title(store, CID, "Pricing, my way", ts=5.0)
    assert store.outline(CID).title == "Pricing, my way"
    assert {k: v for k, v in rows_of(store, CID).items() if k[0] != "convmeta"} == blocks
    assert unpack(rows_of(store, CID)[("convmeta", CID.encode())]) == {
        "title": "Pricing, my way",
        "renamed": 5.0,
    }
    with pytest.raises(NotStored):
        set_title(store, "c-none", "x")


def test_a_stored_block_holds_no_conversation_id(store: Store) -> None:
    """What the fork design rests on (a copied block is the same bytes under a new key)."""
    two_turns(store)
    for raw in store.iter_blocks(CID):
        assert CID not in repr(raw)
    assert all(isinstance(Block.from_dict(raw), Block) for raw in store.iter_blocks(CID))


def test_a_fork_of_a_compacted_conversation_loads_and_renders_at_every_turn(
    store: Store,
) -> None:
    b = Build()
    b.tl.conversation_id = CID
    renderer = Renderer(b.tl, TimelineConfig(max_tokens=3000, cache_ttl_seconds=0))
    for n in range(1, 8):
        b.turn(f"t{n}", words(20))
        b.rounds(3, size=100, prefix=f"c{n}x")
        b.completion(words(10))
        renderer.render(now=2e9 + n)
        store.persist(b.tl, turn_records={f"t{n}": {"status": "completed", "result": {}}})
    assert b.tl.latest_summary is not None
    for n in range(1, 8):
        fork = f"c-fork{n}"
        fork_conversation(store, CID, fork, str(n))
        tl = store.load(fork).timeline
        kept = {f"t{i}" for i in range(1, n + 1)}
        assert {blk.turn_id for blk in tl} <= kept and tl.turn_ids()[-1] == f"t{n}"
        assert Renderer(tl, TimelineConfig(max_tokens=3000)).render(now=3e9).text()
        everything = [raw["turn_id"] for raw in store.iter_blocks(fork)]
        assert set(everything) == kept
