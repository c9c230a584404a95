"""Cache points: the original's verified worked example (REFERENCE.md §1.8) and its edges."""

from __future__ import annotations

import pytest

from timeline import Block, Renderer, Timeline, TimelineConfig
from timeline.blocks import COMPLETION, TOOL_CALL, TOOL_RESULT, USER_PROMPT
from timeline.cache import compute_points, group_end
from timeline.paths import ar_path, tc_path

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
    from timeline.cache import CachePoints

    assert CachePoints(1, 5, 9).hide_floor == 5
    assert CachePoints(1, None, 9).hide_floor == 1
    assert CachePoints(None, None, 9).hide_floor == -1
