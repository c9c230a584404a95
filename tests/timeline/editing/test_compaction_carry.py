"""Compaction: the notes, followups and plans carried past the summary, and the timeline
read back and restored after compaction."""

from __future__ import annotations

from actline.timeline import Renderer, Timeline, resolve
from actline.timeline.blocks import (
    NOTE,
    NOTE_PRESERVED,
    PLAN,
    USER_FOLLOWUP,
    USER_FOLLOWUP_PRESERVED,
)
from tests.timeline.builders import Build, layout, summaries, words
from tests.timeline.editing.compacting import (
    CFG,
    NOW,
    after_summary,
    before_summary,
    carried_history,
    compact,
)

# --- carried notes, followups and plans ---------------------------------------------------------


def test_notes_of_the_compacted_range_are_carried_as_preserved_copies() -> None:
    b = carried_history()
    compact(b.tl)
    compacted_notes = [x for x in before_summary(b.tl) if x.type == NOTE]
    assert compacted_notes
    raw = after_summary(b.tl)
    preserved = [x for x in raw if x.type == NOTE_PRESERVED]
    assert [p.content for p in preserved] == [n.content for n in compacted_notes]
    for note, copy in zip(compacted_notes, preserved, strict=True):
        assert copy.path == f"ar:{note.turn_id}.react.note.preserved.{note.seq}"
        assert copy.meta["source_path"] == note.path
        assert copy.meta["origin_turn_id"] == note.turn_id
    # They come right after the summary, before the first raw block.
    carried = b.tl.latest_summary.meta["compaction_digest"]["carried"]  # type: ignore[union-attr]
    assert [x.path for x in raw[: len(carried)]] == carried


def test_followups_of_the_compacted_range_are_carried_as_preserved_copies() -> None:
    b = carried_history()
    compact(b.tl)
    (followup,) = [x for x in before_summary(b.tl) if x.type == USER_FOLLOWUP]
    (copy,) = [x for x in after_summary(b.tl) if x.type == USER_FOLLOWUP_PRESERVED]
    assert copy.content == "please include 2023 too"
    assert copy.author == "user"
    assert copy.meta["message_id"] == "m1"
    assert copy.meta["source_path"] == followup.path
    assert copy.path == f"ar:t1.user.followup.preserved.{followup.seq}"


def test_the_active_plan_is_carried_when_its_latest_snapshot_is_left_behind() -> None:
    b = carried_history()
    snapshot = b.tl.latest_plan_block("p1")
    assert snapshot is not None
    compact(b.tl)
    assert snapshot in before_summary(b.tl)
    summary = b.tl.latest_summary
    assert summary is not None
    (carry,) = [x for x in after_summary(b.tl) if x.type == PLAN]
    assert carry.path == f"ar:{summary.turn_id}.react.plan.p1.carry"
    assert carry.data == snapshot.data
    assert carry.meta["source_path"] == snapshot.path
    assert b.tl.latest_plan_block("p1") is carry
    assert resolve(b.tl, "ar:plan.latest:p1").blocks == (carry,)


def test_a_plan_snapshot_after_the_cut_is_not_carried() -> None:
    b = carried_history()
    b.plan(["Late plan"], plan_id="p2")
    compact(b.tl)
    assert not [x for x in after_summary(b.tl) if x.path.endswith(".carry")]


def test_a_closed_plan_is_not_carried() -> None:
    b = carried_history()
    closed = b.tl.plans.apply("close", turn_id="t1", plan_id="p1")
    b.tl.record_plan(closed, turn_id="t1", ts=b.at())
    assert b.tl.plans.current is None
    compact(b.tl)
    assert not [x for x in after_summary(b.tl) if x.type == PLAN]


def test_carried_blocks_survive_a_second_compaction_without_duplicates() -> None:
    b = carried_history()
    renderer = compact(b.tl)
    first = b.tl.latest_summary
    for n in range(7, 12):
        b.turn(f"t{n}", words(20))
        b.rounds(3, size=200, prefix=f"c{n}x")
        b.completion(words(20))
    result = renderer.render(now=NOW + 1)
    assert result.events.compaction is not None
    assert b.tl.latest_summary is not first
    visible = renderer.visible_blocks()
    notes = [x for x in visible if x.type in (NOTE, NOTE_PRESERVED)]
    sources = [x.meta.get("source_path", x.path) for x in notes]
    assert len(sources) == len(set(sources))
    assert "ar:t1.react.note.1" in sources  # carried twice, still there once
    followups = [x for x in visible if x.type == USER_FOLLOWUP_PRESERVED]
    assert [x.meta["message_id"] for x in followups] == ["m1"]
    plans = [x for x in visible if x.type == PLAN]
    assert len(plans) == 1 and plans[0].path.endswith(".react.plan.p1.carry")
    # The first summary is folded into the second one.
    summary = b.tl.latest_summary
    assert summary is not None and summary.content.count("Earlier:") == 1


def test_repeated_compactions_keep_every_note() -> None:
    b = Build()
    renderer = Renderer(b.tl, CFG)
    for n in range(1, 25):
        b.turn(f"t{n}", words(20))
        b.note(f"note {n}")
        b.rounds(3, size=200, prefix=f"c{n}x")
        renderer.render(now=NOW + n)
    assert len(summaries(b.tl)) >= 3
    visible = renderer.visible_blocks()
    seen = [x.content for x in visible if x.type in (NOTE, NOTE_PRESERVED)]
    assert seen == [f"note {n}" for n in range(1, 25)]


# --- read-back and restore ----------------------------------------------------------------------


def test_compacted_blocks_stay_reachable_by_path() -> None:
    b = carried_history()
    compact(b.tl)
    compacted = before_summary(b.tl)
    assert len(compacted) > 20
    for block in compacted:
        assert block in b.tl.blocks_at(block.path)
        found = resolve(b.tl, block.path)
        assert found.found and block in found.blocks


def test_a_restore_reproduces_the_order_and_the_rendered_parts() -> None:
    b = carried_history()
    renderer = compact(b.tl)
    for n in range(7, 12):
        b.turn(f"t{n}", words(20))
        b.note(f"note {n}")
        b.rounds(3, size=200, prefix=f"c{n}x")
    assert renderer.render(now=NOW + 1).events.compaction is not None
    assert len(summaries(b.tl)) == 2
    back = Timeline.restore(b.tl.full_snapshot(), [x.to_dict() for x in b.tl.blocks])
    assert [x.id for x in back.blocks] == [x.id for x in b.tl.blocks]
    assert layout(back.blocks) == layout(b.tl.blocks)
    assert back.latest_summary is not None
    assert back.latest_summary.id == b.tl.latest_summary.id  # type: ignore[union-attr]
    assert back.latest_plan_block("p1").id == b.tl.latest_plan_block("p1").id  # type: ignore[union-attr]
    original = renderer.render(now=NOW + 2)
    again = Renderer(back, CFG).render(now=NOW + 2)
    assert again.events.compaction is None
    assert again.parts() == original.parts()
    assert again.marks == original.marks


def test_a_restore_from_shuffled_blocks_gives_the_same_order() -> None:
    b = carried_history()
    compact(b.tl)
    stored = [x.to_dict() for x in b.tl.blocks]
    back = Timeline.restore(b.tl.full_snapshot(), list(reversed(stored)))
    assert [x.id for x in back.blocks] == [x.id for x in b.tl.blocks]
