"""The persisted form: a small header, rows for what grows, and the version 1 format."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actline.timeline import PlanError, SourceRow, Timeline
from actline.timeline.snapshot import FULL_VERSION, SNAPSHOT_VERSION, plan_key, source_key, split

T0 = 1_800_000_000.0


def web(n: int, title: str = "") -> SourceRow:
    return SourceRow(0, url=f"https://example.com/{n}", title=title or f"page {n}")


def grown(sources: int, plans: int) -> Timeline:
    tl = Timeline("c1")
    tl.begin_turn("t1", T0)
    tl.sources.add_rows(web(n) for n in range(sources))
    for n in range(plans):
        plan = tl.plans.apply("new", turn_id="t1", plan_id=f"p{n}", steps=["look", "write"])
        tl.record_plan(plan, turn_id="t1", ts=T0 + n)
    return tl


def size(value: Any) -> int:
    return len(msgpack.packb(value, use_bin_type=True))


def test_the_header_has_no_pool_or_plans_and_does_not_grow_with_them() -> None:
    small, large = grown(3, 2), grown(3_000, 300)
    for tl in (small, large):
        header = tl.snapshot()
        assert header["version"] == SNAPSHOT_VERSION
        assert "sources" not in header and "plans" not in header
    assert abs(size(large.snapshot()) - size(small.snapshot())) <= 8  # wider ints only
    assert size(large.full_snapshot()) > 100 * size(large.snapshot())


def test_rows_are_reported_once_when_added_and_again_when_changed() -> None:
    tl = grown(2, 0)
    assert set(tl.take_row_changes()) == {source_key(1), source_key(2)}
    assert tl.take_row_changes() == {}
    tl.sources.add_rows([web(0, "page 0, with a longer title"), web(7)])
    rows = tl.take_row_changes()
    assert set(rows) == {"src/000001", "src/000003"}
    assert rows["src/000001"]["title"] == "page 0, with a longer title"
    tl.sources.add_rows([web(0, "short")])  # merges nothing new
    assert tl.take_row_changes() == {}


def test_a_new_current_plan_also_reports_the_one_it_demoted() -> None:
    tl = grown(0, 1)
    assert set(tl.take_row_changes()) == {plan_key("p0")}
    tl.plans.apply("new", turn_id="t1", plan_id="p1", steps=["again"])
    rows = tl.take_row_changes()
    assert set(rows) == {plan_key("p0"), plan_key("p1")}
    assert (rows[plan_key("p0")]["state"], rows[plan_key("p1")]["state"]) == ("open", "current")
    assert (rows[plan_key("p0")]["order"], rows[plan_key("p1")]["order"]) == (0, 1)


def test_restore_from_the_header_and_rows_equals_the_full_restore() -> None:
    tl = grown(40, 5)
    tl.acknowledge("✓ 1. look", turn_id="t1", ts=T0 + 50, iteration=1)
    rows = tl.take_row_changes()
    blocks = [b.to_dict() for b in tl.blocks]
    from_rows = Timeline.restore(tl.snapshot(), blocks, rows=rows)
    full = Timeline.restore(tl.full_snapshot(), blocks)
    assert from_rows.full_snapshot() == full.full_snapshot() == tl.full_snapshot()
    assert from_rows.take_row_changes() == {}  # restored rows are stored already


def test_a_version_1_header_still_restores_and_its_rows_count_as_new() -> None:
    tl = grown(4, 2)
    old = tl.full_snapshot()
    assert old["version"] == FULL_VERSION and len(old["sources"]["rows"]) == 4
    back = Timeline.restore(old, [b.to_dict() for b in tl.blocks])
    assert back.full_snapshot() == old
    rows = back.take_row_changes()  # the next persist stores them as rows
    assert set(rows) == {*(source_key(s) for s in range(1, 5)), plan_key("p0"), plan_key("p1")}
    again = Timeline.restore(back.snapshot(), [b.to_dict() for b in tl.blocks], rows=rows)
    assert again.full_snapshot() == old


def test_split_turns_a_version_1_header_into_a_small_header_and_rows() -> None:
    tl = grown(6, 3)
    header, rows = split(tl.full_snapshot())
    assert header == tl.snapshot()
    assert rows == tl.take_row_changes()
    assert split(header) == (header, {})


def test_a_snapshot_without_rows_restores_an_empty_pool_with_its_next_sid() -> None:
    tl = grown(5, 0)
    back = Timeline.restore(tl.snapshot(), [])
    assert len(back.sources) == 0 and back.sources.next_sid == 6
    assert back.sources.add_rows([web(99)])[0].sid == 6  # type: ignore[union-attr]


def test_rows_given_back_after_a_failed_write_are_reported_again() -> None:
    tl = grown(3, 2)
    rows = tl.take_row_changes()
    tl.sources.add_rows([web(50)])
    tl.requeue_row_changes(rows)
    again = tl.take_row_changes()
    assert set(again) == {*rows, source_key(4)}


def test_a_pool_assigned_in_place_reports_all_its_rows() -> None:
    tl = grown(3, 1)
    tl.take_row_changes()
    tl.sources = grown(2, 0).sources
    assert set(tl.take_row_changes()) == {source_key(1), source_key(2)}


def test_rows_of_a_different_book_that_disagree_fail_like_a_bad_plan_book() -> None:
    tl = grown(0, 1)
    rows = tl.take_row_changes()
    rows[plan_key("p0")]["steps"] = []
    with pytest.raises(PlanError):
        Timeline.restore(tl.snapshot(), [], rows=rows)


# --- random sequences ---------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("source"), st.integers(0, 30), st.text("abc", max_size=12)),
        st.tuples(
            st.just("plan"),
            st.sampled_from(["new", "replace", "activate", "close"]),
            st.integers(0, 6),
        ),
        st.tuples(st.just("ack"), st.integers(1, 3), st.sampled_from(["✓", "✗", "…"])),
        st.tuples(st.just("take"), st.none(), st.none()),
    ),
    max_size=60,
)


def apply(tl: Timeline, op: tuple[str, Any, Any], stored: dict[str, Any]) -> None:
    kind, a, b = op
    if kind == "source":
        tl.sources.add_rows([SourceRow(0, url=f"https://s.example/{a}", title=f"t{a}{b}")])
    elif kind == "plan":
        try:
            plan = tl.plans.apply(a, turn_id="t1", plan_id=f"p{b}", steps=["one", "two", "three"])
        except PlanError:
            return
        tl.record_plan(plan, turn_id="t1", ts=T0)
    elif kind == "ack":
        tl.acknowledge(f"{b} {a}. step", turn_id="t1", ts=T0, iteration=len(tl))
    else:
        stored.update(tl.take_row_changes())


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_any_sequence_of_changes_restores_from_its_rows_as_from_the_full_header(
    ops: list[tuple[str, Any, Any]],
) -> None:
    tl = Timeline("c1")
    tl.begin_turn("t1", T0)
    stored: dict[str, Any] = {}
    for op in ops:
        apply(tl, op, stored)
    stored.update(tl.take_row_changes())
    blocks = [b.to_dict() for b in tl.blocks]
    from_rows = Timeline.restore(tl.snapshot(), blocks, rows=stored)
    assert from_rows.full_snapshot() == tl.full_snapshot()
    assert from_rows.full_snapshot() == Timeline.restore(tl.full_snapshot(), blocks).full_snapshot()
