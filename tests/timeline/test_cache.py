"""Cache points: the original's verified worked example and its edges."""

from __future__ import annotations

import pytest

from actline.timeline import Block, Renderer, Timeline, TimelineConfig
from actline.timeline.blocks import COMPLETION, TOOL_CALL, TOOL_RESULT, USER_PROMPT
from actline.timeline.cache import CachePoints, compute_points, group_end, restore_point
from actline.timeline.paths import ar_path, tc_path

T0 = 1_800_000_000.0


def worked_example(calls: int = 6) -> Timeline:
    """t1: hdr(0) prompt(1) call a(2) result a(3) completion(4); t2: hdr(5) prompt(6) c1..c6."""
    tl = Timeline("c")
    clock = iter(range(1000))

    def at() -> float:
        return T0 + next(clock)

    for turn, ids in (("t1", ["a"]), ("t2", [f"c{i}" for i in range(1, calls + 1)])):
        tl.begin_turn(turn, at())
        tl.append(Block.new(USER_PROMPT, turn, at(), path=ar_path(turn, "user.prompt"), text="q"))
        for call in ids:
            for kind, part in ((TOOL_CALL, "call"), (TOOL_RESULT, "result")):
                path = tc_path(turn, call, part)
                tl.append(Block.new(kind, turn, at(), path=path, call_id=call, text=part))
        if turn == "t1":
            path = ar_path(turn, "assistant.completion")
            tl.append(Block.new(COMPLETION, turn, at(), path=path, text="answer"))
    return tl


@pytest.mark.parametrize(("offset", "marks"), [(4, (4, 10, 18)), (2, (4, 14, 18))])
def test_worked_example_gives_the_original_marks(offset: int, marks: tuple[int, ...]) -> None:
    renderer = Renderer(worked_example(), TimelineConfig(cache_point_offset_rounds=offset))
    result = renderer.render(now=T0 + 100)
    assert result.marks == marks
    assert (result.points.cp1, result.points.cp2, result.points.cp3) == marks


def test_a_hide_moves_cp1_up_to_cp2() -> None:
    renderer = Renderer(worked_example())
    assert renderer.hide("tc:t2.c6.result", "junk").status == "ok"
    assert renderer.render(now=T0 + 100).marks == (10, 18)


def test_a_new_turn_header_gives_cp1_back() -> None:
    tl = worked_example()
    renderer = Renderer(tl)
    renderer.hide("tc:t2.c6.result", "junk")
    tl.begin_turn("t3", T0 + 200)
    assert tl.suppress_prev_turn_cache is False
    result = renderer.render(now=T0 + 201)
    assert result.points.cp1 == 18
    assert result.paths[19] == "ar:t3.turn.header"


def test_header_and_prompt_alone_fall_back_to_block_counts() -> None:
    tl = Timeline("c")
    tl.begin_turn("t1", T0)
    tl.append(Block.new(USER_PROMPT, "t1", T0 + 1, path="ar:t1.user.prompt", text="q"))
    assert Renderer(tl).render(now=T0 + 2).marks == (0, 1)


def test_a_single_round_marks_only_the_tail() -> None:
    tl = Timeline("c")
    tl.begin_turn("t1", T0)
    tl.append(Block.new(USER_PROMPT, "t1", T0 + 1, path="ar:t1.user.prompt", text="q"))
    tl.append(Block.new(TOOL_CALL, "t1", T0 + 2, path="tc:t1.a.call", call_id="a"))
    tl.append(Block.new(TOOL_RESULT, "t1", T0 + 3, path="tc:t1.a.result", call_id="a"))
    assert Renderer(tl).render(now=T0 + 4).marks == (3,)


def test_an_empty_timeline_has_no_marks() -> None:
    result = Renderer(Timeline("c")).render(now=T0)
    assert result.marks == ()
    assert len(result.stable) == 0
    assert [p["text"].split("\n")[0] for p in result.tail][1] == "[ANNOUNCE]"


def test_marks_move_to_the_end_of_a_same_path_run() -> None:
    paths = ["a", "b", "b", "b", "c"]
    assert group_end(paths, 1, len(paths)) == 3
    assert group_end(paths, 0, len(paths)) == 0
    assert group_end(["", "", ""], 0, 3) == 0
    points = compute_points(
        count=5,
        paths=paths,
        round_ends=[1, 4],
        header=None,
        offset=1,
        min_rounds=2,
        prefer_pre_tail=False,
    )
    assert points.cp2 == 3
    assert points.cp3 == 4


def test_pre_tail_equal_to_tail_is_dropped() -> None:
    points = compute_points(
        count=3,
        paths=["a", "b", "b"],
        round_ends=[1, 2],
        header=None,
        offset=1,
        min_rounds=2,
        prefer_pre_tail=False,
    )
    assert points.cp3 == 2
    assert points.marks == (2,)


def test_the_hide_floor_is_cp2_then_cp1_then_nothing() -> None:
    from actline.timeline.cache import CachePoints

    assert CachePoints(1, 5, 9).hide_floor == 5
    assert CachePoints(1, None, 9).hide_floor == 1
    assert CachePoints(None, None, 9).hide_floor == -1


# -- the restore point ------------------------------------------------------------------------


def test_restore_point_is_the_newest_marked_entry_before_the_change() -> None:
    points = CachePoints(4, 10, 18)
    assert restore_point(points, [4, 10, 12, 14, 16], 15) == CachePoints(14, 10, 18)
    assert restore_point(points, [4, 10], 12) == points  # already CP2
    assert restore_point(points, [14], 3) == points  # nothing marked before the change


def grow(tl: Timeline, renderer: Renderer, calls: range, now: float) -> tuple[set[int], float]:
    """One round per call, each rendered; returns every entry marked and the time."""
    marked: set[int] = set()
    for i in calls:
        for kind, part in ((TOOL_CALL, "call"), (TOOL_RESULT, "result")):
            path = tc_path("t2", f"c{i}", part)
            tl.append(Block.new(kind, "t2", now, path=path, call_id=f"c{i}", text=part))
        now += 3
        marked |= set(renderer.render(now=now).marks)
    return marked, now


def test_after_a_change_deep_in_the_prefix_cp1_marks_the_last_cached_entry_before_it() -> None:
    """Retention or an un-hide changes a block behind CP2: CP1 then marks the newest entry
    an earlier request marked before that block, an exact hit, instead of the previous turn."""
    tl = worked_example()
    renderer = Renderer(tl, TimelineConfig(cache_ttl_seconds=0))
    marked, now = grow(tl, renderer, range(7, 13), T0 + 100)
    changed = tl.blocks_at("tc:t2.c5.result")[0]
    tl.set_hidden([changed], "short view")
    result = renderer.render(now=now + 3)
    entry = renderer.entry_of(changed)
    assert entry is not None
    expected = max(m for m in marked if m < entry)
    assert result.points.cp1 == expected and expected > 4  # beyond the previous turn's end
    assert result.points.cp2 is not None and result.points.cp2 > entry
    # the next round changes nothing: CP1 is the previous turn's end again
    assert renderer.render(now=now + 6).points.cp1 == 4


def test_a_restore_point_older_than_the_cache_lifetime_is_not_used() -> None:
    tl = worked_example()
    renderer = Renderer(tl, TimelineConfig(cache_ttl_seconds=0))
    _, now = grow(tl, renderer, range(7, 13), T0 + 100)
    tl.set_hidden(tl.blocks_at("tc:t2.c5.result"), "short view")
    assert renderer.render(now=now + 301).points.cp1 == 4


def test_a_renders_parts_are_its_own_list_that_later_rounds_leave_as_they_were() -> None:
    tl = worked_example()
    renderer = Renderer(tl, TimelineConfig(max_tokens=0))
    now = T0 + 100
    first = renderer.render(now=now)
    parts = first.parts()
    assert parts == [*first.stable, *first.tail]
    assert parts is not first.parts()
    path = ar_path("t2", "assistant.completion")
    tl.append(Block.new(COMPLETION, "t2", now, path=path, text="done"))
    later = renderer.render(now=now + 1)
    assert len(later.parts()) == len(parts) + 1  # the renderer appended to its own list
    assert first.parts() == parts  # what an earlier round sent stays what it was
    parts.append({"type": "text", "text": "mine"})
    assert len(first.parts()) == len(parts) - 1
