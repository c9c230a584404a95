"""Compaction: where the cut falls (never between a call and its result), split turns, and a
plan chosen first and applied later."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.timeline import DEFAULT_COUNTER, CompactionError, Renderer, Timeline, TimelineConfig
from actline.timeline.blocks import NOTE_PRESERVED, PLAN, TOOL_RESULT, USER_FOLLOWUP_PRESERVED
from actline.timeline.editing import compaction
from actline.timeline.editing.compaction import SPLIT_SEPARATOR
from tests.timeline.builders import Build, sides_of_calls, summaries, words
from tests.timeline.editing.compacting import (
    CFG,
    NOW,
    after_summary,
    assert_rounds_whole,
    before_summary,
    compact,
    history,
    long_turn,
)

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
