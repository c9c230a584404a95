"""Compaction: trigger, cut, summary and digest, carried blocks, plan/apply, restore, summarizer."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.timeline import (
    DEFAULT_COUNTER,
    CompactionError,
    EstimateCounter,
    OfflineSummarizer,
    Renderer,
    SummaryRequest,
    Timeline,
    TimelineConfig,
    resolve,
)
from actline.timeline.blocks import (
    NOTE,
    NOTE_PRESERVED,
    PLAN,
    SUMMARY,
    TOOL_RESULT,
    USER_FOLLOWUP,
    USER_FOLLOWUP_PRESERVED,
    Block,
)
from actline.timeline.editing import compaction
from actline.timeline.editing.compaction import SPLIT_SEPARATOR
from actline.timeline.paths import fi_path, su_path
from tests.timeline.builders import (
    T0,
    Build,
    layout,
    sides_of_calls,
    summaries,
    summary_index,
    texts,
    words,
)

NOW = T0 + 10_000.0
CFG = TimelineConfig(max_tokens=6000, cache_ttl_seconds=0, compaction_keep_turns=2)
"""Six turns of ~1,000 tokens go over the 5,400-token ceiling; TTL pruning is off."""


def history(turns: int = 6, *, rounds: int = 3, size: int = 200, notes: bool = True) -> Build:
    """``turns`` turns: prompt, a note, ``rounds`` tool rounds of ``size`` words, completion."""
    b = Build()
    for n in range(1, turns + 1):
        b.turn(f"t{n}", words(20, f"ask{n}"))
        if notes:
            b.note(f"note {n}: keep this")
        b.rounds(rounds, size=size, prefix=f"c{n}x")
        b.completion(words(20, f"ans{n}"))
    return b


def compact(tl: Timeline, cfg: TimelineConfig = CFG, *, force: bool = False) -> Renderer:
    """Render once (compacting as the pipeline decides) and return the renderer."""
    renderer = Renderer(tl, cfg)
    renderer.render(now=NOW, force_compaction=force)
    return renderer


def after_summary(tl: Timeline) -> list[Block]:
    return tl.blocks[summary_index(tl) + 1 :]


def before_summary(tl: Timeline) -> list[Block]:
    return tl.blocks[: summary_index(tl)]


def assert_rounds_whole(tl: Timeline) -> None:
    """Every call id has all its blocks on one side of the latest summary."""
    for call_id, sides in sides_of_calls(tl).items():
        assert len(sides) == 1, f"call {call_id} is split by the summary"


# --- the trigger -----------------------------------------------------------------------------


def test_no_compaction_under_the_ceiling() -> None:
    b = history(2)
    result = Renderer(b.tl, CFG).render(now=NOW)
    assert result.stable_tokens < CFG.compaction_ratio * CFG.max_tokens
    assert result.events.compaction is None
    assert b.tl.latest_summary is None


def test_no_compaction_when_max_tokens_is_zero_even_when_forced() -> None:
    b = history(12)
    cfg = TimelineConfig(max_tokens=0, cache_ttl_seconds=0)
    renderer = Renderer(b.tl, cfg)
    assert renderer.render(now=NOW).events.compaction is None
    assert renderer.render(now=NOW, force_compaction=True).events.compaction is None
    assert not summaries(b.tl)


def test_a_render_over_the_ceiling_compacts() -> None:
    b = history()
    renderer = Renderer(b.tl, CFG)
    renderer.sync()
    before = renderer.stable_tokens
    assert before > CFG.compaction_ratio * CFG.max_tokens
    result = renderer.render(now=NOW)
    outcome = result.events.compaction
    assert outcome is not None
    assert b.tl.latest_summary is not None
    assert outcome.before_tokens == before
    assert outcome.after_tokens == result.stable_tokens < before


def test_system_tokens_count_towards_the_ceiling() -> None:
    b = history(4)
    assert Renderer(b.tl, CFG).render(now=NOW).events.compaction is None
    result = Renderer(b.tl, CFG).render(now=NOW, system_tokens=3000)
    assert result.events.compaction is not None


def test_force_compaction_compacts_under_the_ceiling() -> None:
    b = history(3)
    renderer = Renderer(b.tl, CFG)
    assert renderer.render(now=NOW).events.compaction is None
    result = renderer.render(now=NOW + 1, force_compaction=True)
    assert result.events.compaction is not None
    assert result.paths[0] == b.tl.latest_summary.path  # type: ignore[union-attr]


def test_a_second_render_does_not_compact_again() -> None:
    b = history()
    renderer = compact(b.tl)
    assert len(summaries(b.tl)) == 1
    assert renderer.render(now=NOW + 1).events.compaction is None
    assert len(summaries(b.tl)) == 1


# --- the summary -------------------------------------------------------------------------------


def test_the_stable_stream_starts_with_the_summary_block() -> None:
    b = history()
    renderer = Renderer(b.tl, CFG)
    result = renderer.render(now=NOW)
    summary = b.tl.latest_summary
    assert summary is not None and summary.type == SUMMARY
    assert summary.path == su_path(summary.turn_id) == f"su:{summary.turn_id}.conv.range.summary"
    assert result.events.compaction is not None
    assert result.events.compaction.summary_path == summary.path
    assert result.paths[0] == summary.path
    assert texts(result)[0].startswith(f"[CONVERSATION SUMMARY] {summary.path}")
    assert renderer.visible_blocks()[0] is summary
    # The summary belongs to the turn of the first block kept raw.
    kept = [x for x in after_summary(b.tl) if x.type not in (NOTE_PRESERVED, PLAN)]
    assert summary.turn_id == kept[0].turn_id


def test_the_summary_meta_lists_covered_turns_and_the_digest() -> None:
    b = history()
    b.add("react.file", turn="t1", path=fi_path("t1", "outputs", "report.md"), text="# Report")
    hidden = b.tl.blocks_at("tc:t1.c1x0.result")
    b.tl.set_hidden(hidden, "[hidden: junk]")
    outcome = Renderer(b.tl, CFG).render(now=NOW).events.compaction
    assert outcome is not None
    summary = b.tl.latest_summary
    assert summary is not None
    compacted = before_summary(b.tl)
    covered = list(dict.fromkeys(x.turn_id for x in compacted))
    assert summary.meta["covered_turn_ids"] == covered
    assert list(outcome.covered_turn_ids) == covered
    digest = summary.meta["compaction_digest"]
    assert set(digest) == {"artifacts", "tool_outputs", "hidden", "carried"}
    assert digest["artifacts"] == ["fi:t1.outputs/report.md"]
    assert digest["tool_outputs"] == [x.path for x in compacted if x.type == TOOL_RESULT]
    assert digest["hidden"] == [{"path": "tc:t1.c1x0.result", "replacement": "[hidden: junk]"}]
    assert digest["carried"] == list(outcome.carried)
    assert outcome.compacted_blocks == len(compacted)


def test_tokens_after_compaction_are_fewer_than_before() -> None:
    b = history(8)
    renderer = Renderer(b.tl, CFG)
    renderer.sync()
    before = renderer.stable_tokens
    result = renderer.render(now=NOW)
    outcome = result.events.compaction
    assert outcome is not None
    assert outcome.after_tokens < outcome.before_tokens
    assert result.stable_tokens < before


def test_the_summary_text_comes_from_the_summarizer() -> None:
    b = history()
    compact(b.tl)
    summary = b.tl.latest_summary
    assert summary is not None
    assert summary.content.startswith("Summary of ")
    assert "blocks from turns t1" in summary.content.splitlines()[0]
    assert "note 1: keep this" in summary.content
    assert "tc:t1.c1x0.result" in summary.content


# --- where the cut falls -----------------------------------------------------------------------


def test_the_cut_is_never_a_tool_result() -> None:
    for turns in range(5, 10):
        b = history(turns)
        compact(b.tl)
        first_raw = next(x for x in after_summary(b.tl) if x.type not in (NOTE_PRESERVED, PLAN))
        assert first_raw.type != TOOL_RESULT
        assert compaction.is_cut_point(first_raw)
        assert_rounds_whole(b.tl)


def late_result_history(*, followup: bool) -> Build:
    """Three padding turns, then a turn whose first call's result lands after later rounds."""
    b = history(3, notes=False)
    b.turn("t4", "go")
    b.call("slow")
    b.rounds(6, size=200, prefix="fast")
    if followup:
        b.followup("and also this", "m1")
    b.rounds(2, size=200, prefix="after")
    b.result("slow", words(200, "late"))
    b.completion("done")
    return b


@pytest.mark.parametrize("followup", [False, True])
@pytest.mark.parametrize("max_tokens", [3000, 4000, 5000, 6000, 8000])
def test_a_late_result_stays_on_the_side_of_its_call(followup: bool, max_tokens: int) -> None:
    b = late_result_history(followup=followup)
    cfg = TimelineConfig(max_tokens=max_tokens, cache_ttl_seconds=0, compaction_keep_turns=1)
    compact(b.tl, cfg, force=True)
    assert b.tl.latest_summary is not None
    assert_rounds_whole(b.tl)


def long_round_turn(*, slow: bool) -> Build:
    """Two tiny turns, then a turn whose rounds run while a slow call (optional) is open."""
    b = history(2, rounds=1, size=20, notes=False)
    b.turn("t3", "go")
    b.tool("first", words(200))
    if slow:
        b.call("slow")
    b.rounds(6, size=200, prefix="fast")
    b.followup("and also this", "m1")
    b.rounds(2, size=200, prefix="after")
    if slow:
        b.result("slow", words(200, "late"))
    b.completion("done")
    return b


def test_a_late_result_moves_the_cut_past_its_round() -> None:
    cfg = TimelineConfig(max_tokens=100_000, cache_ttl_seconds=0, compaction_keep_turns=1)
    plain = long_round_turn(slow=False)
    compact(plain.tl, cfg, force=True)
    # Without the slow call the cut falls among the fast rounds ...
    assert sides_of_calls(plain.tl)["fast0"] == {False}
    assert sides_of_calls(plain.tl)["after1"] == {True}
    late = long_round_turn(slow=True)
    compact(late.tl, cfg, force=True)
    # ... with it, every cut there would separate the slow call from its result.
    assert_rounds_whole(late.tl)
    assert sides_of_calls(late.tl)["slow"] == {False}
    assert after_summary(late.tl)[-1].content == "done"
    followups = [x for x in after_summary(late.tl) if x.type == USER_FOLLOWUP_PRESERVED]
    assert [x.meta["message_id"] for x in followups] == ["m1"]


def test_no_cut_falls_after_a_call_whose_result_has_not_arrived() -> None:
    b = history(3, notes=False)
    b.turn("t4", "go")
    b.call("pending")
    b.rounds(8, size=200, prefix="more")
    renderer = compact(b.tl, TimelineConfig(max_tokens=4000, cache_ttl_seconds=0), force=True)
    assert b.tl.latest_summary is not None
    assert sides_of_calls(b.tl)["pending"] == {True}
    b.result("pending", "finally")
    assert_rounds_whole(b.tl)
    paths = list(renderer.render(now=NOW + 1).paths)
    assert paths.index("tc:t4.pending.call") < paths.index("tc:t4.pending.result")


EVENTS = st.sampled_from(["round", "open", "close", "followup", "note", "completion"])


@given(
    turns=st.lists(st.lists(EVENTS, min_size=1, max_size=8), min_size=1, max_size=5),
    max_tokens=st.integers(300, 4000),
    force=st.booleans(),
    twice=st.booleans(),
)
def test_no_call_is_ever_separated_from_its_result(
    turns: list[list[str]], max_tokens: int, force: bool, twice: bool
) -> None:
    b = Build()
    for n, events in enumerate(turns, start=1):
        b.turn(f"t{n}", words(20))
        open_calls: list[str] = []
        for k, event in enumerate(events):
            if event == "round":
                b.tool(f"r{n}x{k}", words(80))
            elif event == "open":
                open_calls.append(f"o{n}x{k}")
                b.call(open_calls[-1])
            elif event == "close" and open_calls:
                b.result(open_calls.pop(0), words(80))
            elif event == "followup":
                b.followup(words(10), f"m{n}x{k}")
            elif event == "note":
                b.note(words(10))
            else:
                b.completion(words(30))
        for call in open_calls:  # late results, after everything else in the turn
            b.result(call, words(80, "late"))
    cfg = TimelineConfig(max_tokens=max_tokens, cache_ttl_seconds=0, compaction_keep_turns=1)
    renderer = Renderer(b.tl, cfg)
    renderer.render(now=NOW, force_compaction=force)
    if twice:
        b.turn("extra", words(200))
        renderer.render(now=NOW + 1, force_compaction=True)
    if b.tl.latest_summary is None:
        return
    for summary in summaries(b.tl):
        cut = b.tl.index_of(summary)
        for call_id in {x.call_id for x in b.tl.blocks if x.call_id}:
            sides = {b.tl.index_of(x) > cut for x in b.tl.blocks if x.call_id == call_id}
            assert len(sides) == 1
    visible = renderer.visible_blocks()
    assert visible[0] is b.tl.latest_summary
    first_raw = next(x for x in visible[1:] if x.type not in (NOTE_PRESERVED, PLAN))
    assert first_raw.type != TOOL_RESULT


# --- split turns -------------------------------------------------------------------------------


def long_turn() -> Build:
    """Two short turns and one very long turn: any cut must fall inside the long one."""
    b = history(2, rounds=1, size=20)
    b.turn("t3", words(20, "big"))
    b.rounds(20, size=200, prefix="r")
    return b


def test_a_cut_inside_a_turn_summarises_its_prefix_apart() -> None:
    b = long_turn()
    outcome = Renderer(b.tl, CFG).render(now=NOW, force_compaction=True).events.compaction
    assert outcome is not None
    assert outcome.split_turn_id == "t3"
    summary = b.tl.latest_summary
    assert summary is not None
    assert summary.meta["split_turn_id"] == "t3"
    assert summary.turn_id == "t3"
    assert SPLIT_SEPARATOR in summary.content
    history_part, prefix_part = summary.content.split(SPLIT_SEPARATOR)
    assert "**Turn Context (split turn):**" in summary.content
    assert history_part.startswith("Summary of")
    assert "from turns t1, t2." in history_part
    assert prefix_part.startswith("Turn prefix of")
    assert "from turns t3." in prefix_part
    assert "t3" in summary.meta["covered_turn_ids"]
    # The split turn's header is compacted; its later rounds are raw.
    assert b.tl.header("t3") in before_summary(b.tl)
    assert any(x.turn_id == "t3" and x.type == TOOL_RESULT for x in after_summary(b.tl))


def test_a_cut_at_a_turn_start_is_not_a_split() -> None:
    b = Build()
    for n in range(1, 9):
        b.turn(f"t{n}", "go")
        b.tool(f"c{n}", words(600))  # each turn ends on a big result: the cut is a header
    result = Renderer(b.tl, CFG).render(now=NOW)
    outcome = result.events.compaction
    assert outcome is not None
    assert outcome.split_turn_id is None
    summary = b.tl.latest_summary
    assert summary is not None
    assert "split_turn_id" not in summary.meta
    assert SPLIT_SEPARATOR not in summary.content
    assert list(result.paths[:2]) == [summary.path, f"ar:{summary.turn_id}.turn.header"]
    assert outcome.covered_turn_ids == tuple(f"t{n}" for n in range(1, int(summary.turn_id[1:])))


# --- carried notes, followups and plans ---------------------------------------------------------


def carried_history() -> Build:
    """Notes and followups in the early turns, an active plan made in t1."""
    b = Build()
    b.turn("t1", words(20))
    b.plan(["Gather sources", "Write report"], plan_id="p1")
    b.note("remember: the user wants CSV")
    b.rounds(3, size=200, prefix="a")
    b.followup("please include 2023 too", "m1")
    b.rounds(1, size=200, prefix="b")
    b.completion(words(20))
    for n in range(2, 7):
        b.turn(f"t{n}", words(20))
        b.note(f"note {n}")
        b.rounds(3, size=200, prefix=f"c{n}x")
        b.completion(words(20))
    return b


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


# --- plan, then apply ---------------------------------------------------------------------------


def test_plan_then_apply_uses_external_summary_texts() -> None:
    b = long_turn()
    chosen = compaction.plan(b.tl, CFG, system_tokens=0, counter=DEFAULT_COUNTER, force=True)
    assert chosen is not None and chosen.split_turn_id == "t3"
    requests = chosen.requests(CFG, CFG.max_tokens)
    assert [r.kind for r in requests] == ["history", "turn_prefix"]
    # At most a tenth (history) and a twentieth (prefix) of the budget, within the config's.
    assert 0 < requests[0].max_tokens <= min(CFG.summary_max_tokens, CFG.max_tokens // 10)
    assert (
        0 < requests[1].max_tokens <= min(CFG.split_turn_summary_max_tokens, CFG.max_tokens // 20)
    )
    assert (
        list(requests[0].blocks) + list(requests[1].blocks)
        == b.tl.blocks[: b.tl.index_of(chosen.cut)]
    )
    outcome = compaction.apply(
        b.tl, chosen, summary="MODEL SUMMARY", prefix_summary="MODEL PREFIX", now=NOW
    )
    summary = b.tl.latest_summary
    assert summary is not None
    assert summary.content == f"MODEL SUMMARY{SPLIT_SEPARATOR}MODEL PREFIX"
    assert outcome.summary_path == summary.path
    assert outcome.split_turn_id == "t3"
    assert b.tl.blocks[b.tl.index_of(chosen.cut) - 1 - len(outcome.carried)] is summary


def test_plan_then_apply_without_a_split() -> None:
    b = history(8)
    chosen = compaction.plan(b.tl, CFG, system_tokens=0, counter=DEFAULT_COUNTER)
    assert chosen is not None
    if chosen.split_turn_id is None:
        assert len(chosen.requests(CFG, CFG.max_tokens)) == 1
        assert chosen.prefix == ()
    compaction.apply(b.tl, chosen, summary="S", prefix_summary="P", now=NOW)
    summary = b.tl.latest_summary
    assert summary is not None
    expected = "S" if chosen.split_turn_id is None else f"S{SPLIT_SEPARATOR}P"
    assert summary.content == expected


def test_apply_after_the_timeline_changed_raises() -> None:
    b = history(8)
    chosen = compaction.plan(b.tl, CFG, system_tokens=0, counter=DEFAULT_COUNTER)
    assert chosen is not None
    b.completion("one more")
    with pytest.raises(CompactionError, match="changed since the compaction was planned"):
        compaction.apply(b.tl, chosen, summary="S", now=NOW)
    assert b.tl.latest_summary is None


def test_a_plan_cannot_be_applied_twice() -> None:
    b = history(8)
    chosen = compaction.plan(b.tl, CFG, system_tokens=0, counter=DEFAULT_COUNTER)
    assert chosen is not None
    compaction.apply(b.tl, chosen, summary="S", now=NOW)
    with pytest.raises(CompactionError):
        compaction.apply(b.tl, chosen, summary="S", now=NOW)
    assert len(summaries(b.tl)) == 1


def test_a_plan_on_another_timeline_is_refused() -> None:
    b = history(8)
    chosen = compaction.plan(b.tl, CFG, system_tokens=0, counter=DEFAULT_COUNTER)
    assert chosen is not None
    other = Timeline.restore(b.tl.full_snapshot(), [x.to_dict() for x in b.tl.blocks])
    with pytest.raises(CompactionError):
        compaction.apply(other, chosen, summary="S", now=NOW)


def test_nothing_to_plan_on_an_empty_timeline() -> None:
    tl = Timeline()
    assert compaction.plan(tl, CFG, system_tokens=0, counter=DEFAULT_COUNTER, force=True) is None
    assert Renderer(tl, CFG).render(now=NOW, force_compaction=True).events.compaction is None


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


# --- the offline summarizer ---------------------------------------------------------------------


def summary_of(blocks: list[Block], budget: int = 800, previous: str = "") -> str:
    return OfflineSummarizer(EstimateCounter()).summarize(
        SummaryRequest(tuple(blocks), previous, budget)
    )


def test_the_offline_summarizer_is_deterministic() -> None:
    one = history(4)
    two = history(4)
    assert summary_of(one.tl.blocks) == summary_of(one.tl.blocks)
    # Same content, different block ids and objects: same text.
    assert summary_of(one.tl.blocks) == summary_of(two.tl.blocks)


def test_the_offline_summarizer_keeps_notes_and_paths() -> None:
    b = history(3)
    b.add("react.file", turn="t2", path=fi_path("t2", "outputs", "data.csv"), text="a,b")
    b.note("decision:   use   the 2023 figures\nnot the 2022 ones")
    text = summary_of(b.tl.blocks)
    for n in (1, 2, 3):
        assert f"- note {n}: keep this" in text
    assert "- decision: use the 2023 figures not the 2022 ones" in text
    assert "- fi:t2.outputs/data.csv" in text
    assert "- tc:t1.c1x0.result" in text
    assert "Paths to reopen with react.read:" in text
    assert text.startswith("Summary of")


def test_the_offline_summarizer_notes_hidden_paths() -> None:
    b = history(2)
    b.tl.set_hidden(b.tl.blocks_at("tc:t1.c1x0.result"), "[hidden]")
    assert "- tc:t1.c1x0.result (hidden)" in summary_of(b.tl.blocks)


def test_the_offline_summarizer_folds_in_the_previous_summary() -> None:
    b = history(2)
    text = summary_of(b.tl.blocks, previous="Earlier the user asked about tides.")
    assert "Earlier:\nEarlier the user asked about tides." in text


def test_a_turn_prefix_request_is_titled_as_such() -> None:
    b = history(1)
    request = SummaryRequest(tuple(b.tl.blocks), "", 400, "turn_prefix")
    assert OfflineSummarizer().summarize(request).startswith("Turn prefix of")


@pytest.mark.parametrize("budget", [200, 400, 800])
def test_the_offline_summarizer_respects_its_budget(budget: int) -> None:
    b = history(10)
    text = summary_of(b.tl.blocks, budget)
    assert EstimateCounter().count(text) <= budget


def test_the_offline_summarizer_mentions_dropped_lines() -> None:
    b = history(10)
    full = summary_of(b.tl.blocks, 100_000)
    short = summary_of(b.tl.blocks, 200)
    assert "more lines" not in full
    last = short.splitlines()[-1]
    dropped = int(last.split()[1])
    assert last == f"… {dropped} more lines; reopen older content with react.memsearch."
    kept = len(short.splitlines()) - 1
    assert kept + dropped == len(full.splitlines())


def test_the_offline_summarizer_keeps_notes_first_when_the_budget_is_tight() -> None:
    b = history(10)
    text = summary_of(b.tl.blocks, 200)
    assert "- note 10: keep this" in text
    assert "Messages:" not in text or text.index("Notes and plans:") < text.index("Messages:")


# --- regressions --------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [60, 100])
def test_the_offline_summarizer_respects_a_small_budget(budget: int) -> None:
    """The head line and the dropped-lines trailer used to go over small budgets."""
    b = history(10)
    assert EstimateCounter().count(summary_of(b.tl.blocks, budget)) <= budget


def test_a_rendered_stream_over_max_tokens_is_compacted() -> None:
    """The trigger counts rendered tokens; the plan once budgeted raw content and cut nothing."""
    b = Build()
    for n in range(1, 4):
        b.turn(f"t{n}", "go")
        for k in range(60):
            b.tool(f"c{n}x{k}", "ok")  # small results: the framing is most of each part
    cfg = TimelineConfig(max_tokens=4000, cache_ttl_seconds=0)
    result = Renderer(b.tl, cfg).render(now=NOW)
    assert result.events.compaction is not None
    assert result.stable_tokens <= cfg.compaction_ratio * cfg.max_tokens


def test_after_a_compaction_the_rendered_stream_is_under_the_ceiling() -> None:
    """Otherwise every following render triggers again (same root cause as above)."""
    b = history()
    result = Renderer(b.tl, CFG).render(now=NOW)
    assert result.events.compaction is not None
    assert result.stable_tokens <= CFG.compaction_ratio * CFG.max_tokens


def test_whole_recent_turns_are_kept_with_their_headers() -> None:
    """An empty header costs nothing, so the cut used to land on the prompt after it."""
    b = Build()
    for n in range(1, 4):
        b.turn(f"t{n}", words(20))
        b.rounds(2, size=130, prefix=f"c{n}x")
        b.completion(words(20))
    for n in (4, 5):
        b.turn(f"t{n}", words(20))
        b.rounds(5, size=135, prefix=f"c{n}x")
        b.completion(words(20))
    cfg = TimelineConfig(max_tokens=4000, cache_ttl_seconds=0, compaction_keep_turns=2)
    renderer = Renderer(b.tl, cfg)
    renderer.sync()
    # Precondition: t4 + t5 cost more than the keep share but fit clearly under the trigger.
    header = renderer.entry_of(b.tl.header("t4"))  # type: ignore[arg-type]
    assert header is not None
    last_two = renderer.tail_tokens_after(header - 1)
    keep = cfg.compaction_keep_ratio * cfg.max_tokens
    roomy = (cfg.compaction_ratio + cfg.compaction_keep_ratio) / 2 * cfg.max_tokens
    assert keep < last_two <= roomy
    result = renderer.render(now=NOW)
    outcome = result.events.compaction
    assert outcome is not None
    assert outcome.split_turn_id is None
    assert list(result.paths[:3]) == [
        "su:t4.conv.range.summary",
        "ar:t4.turn.header",
        "ar:t4.user.prompt",
    ]
    assert outcome.covered_turn_ids == ("t1", "t2", "t3")


def test_a_forced_compaction_never_makes_the_context_larger() -> None:
    """Forcing used to summarise a lone turn header into a larger summary."""
    b = Build()
    b.turn("t1", "hi")
    outcome = Renderer(b.tl, CFG).render(now=NOW, force_compaction=True).events.compaction
    assert outcome is None or outcome.after_tokens < outcome.before_tokens


def test_a_forced_split_turn_compaction_never_makes_the_context_larger() -> None:
    cfg = TimelineConfig(max_tokens=2000, cache_ttl_seconds=0, compaction_keep_turns=1)
    grew = []
    for prompt_words in (1, 5, 10, 15):
        b = Build()
        b.turn("t1", words(prompt_words))
        b.tool("r1", words(80))
        renderer = Renderer(b.tl, cfg)
        renderer.sync()
        before = renderer.stable_tokens
        result = renderer.render(now=NOW, force_compaction=True)
        if result.events.compaction is not None and result.stable_tokens >= before:
            grew.append((prompt_words, before, result.stable_tokens))
    assert grew == []
