"""react.hide: the cache rules, every refusal code, and restoring with unhide."""

from __future__ import annotations

import pickle

from actline.timeline import Block, HideResult, Renderer, Timeline, TimelineConfig
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT, USER_PROMPT

T0 = 1_800_000_000.0


def rounds(count: int, *, result_text: str = "result", turn: str = "t1") -> Timeline:
    """One turn: header, prompt, then ``count`` call/result rounds c1..cN."""
    tl = Timeline("c")
    tl.begin_turn(turn, T0)
    tl.append(Block.new(USER_PROMPT, turn, T0 + 1, path=f"ar:{turn}.user.prompt", text="q"))
    for i in range(1, count + 1):
        ts = T0 + 10 * i
        call = f"c{i}"
        tl.append(Block.new(TOOL_CALL, turn, ts, path=f"tc:{turn}.{call}.call", call_id=call))
        tl.append(
            Block.new(
                TOOL_RESULT,
                turn,
                ts + 1,
                path=f"tc:{turn}.{call}.result",
                call_id=call,
                text=result_text,
            )
        )
    return tl


def test_hiding_a_tail_result_succeeds_and_says_how_to_restore() -> None:
    tl = rounds(6, result_text="x" * 4000)
    renderer = Renderer(tl)
    result = renderer.hide("tc:t1.c6.result", "raw dump, already summarised")
    assert result.status == "ok"
    assert result.blocks_hidden == 1
    assert result.tokens_hidden > 900
    assert "tool result at tc:t1.c6.result" in result.replacement
    assert "raw dump, already summarised" in result.replacement
    assert 'react.read(["tc:t1.c6.result"])' in result.replacement
    text = renderer.render(now=T0 + 100).text()
    tail = text.split("[TOOL CALL] tc:t1.c6.call", 1)[1]
    assert "x" * 100 not in tail
    assert result.replacement in tail


def test_a_path_before_cp2_is_refused_as_before_cache() -> None:
    renderer = Renderer(rounds(6))
    result = renderer.hide("tc:t1.c1.result", "")
    assert (result.status, result.code) == ("too_old", "hide_before_cache")
    assert result.before_cache is True
    assert result.blocks_hidden == 0
    assert not any(b.hidden for b in renderer.timeline)


def test_the_block_at_cp2_itself_is_refused() -> None:
    tl = rounds(6)
    renderer = Renderer(tl)
    cp2 = renderer.render(now=T0 + 100).points.cp2
    assert cp2 is not None
    path = renderer.visible_blocks()[cp2].path
    assert renderer.hide(path, "").code == "hide_before_cache"


def test_a_path_with_an_older_copy_inside_the_cached_prefix_is_refused() -> None:
    tl = rounds(6)
    tl.append(Block.new("react.read.content", "t1", T0 + 15, path="ks:docs/a.md", text="old"))
    tl.append(Block.new("react.read.content", "t1", T0 + 200, path="ks:docs/a.md", text="new"))
    renderer = Renderer(tl)
    result = renderer.hide("ks:docs/a.md", "")
    assert result.code == "hide_before_cache"


def test_a_path_too_far_from_the_tail_is_refused_as_too_old() -> None:
    tl = rounds(8, result_text="y" * 400)
    renderer = Renderer(tl, TimelineConfig(hide_max_tail_tokens=150, cache_point_offset_rounds=6))
    result = renderer.hide("tc:t1.c4.result", "")
    assert (result.status, result.code) == ("too_old", "hide_too_old")
    assert result.tail_tokens > 150
    assert result.tail_limit == 150
    assert "tail_tokens=" in result.message


def test_the_newest_block_size_does_not_count_toward_its_distance() -> None:
    tl = rounds(6, result_text="z" * 40_000)
    assert Renderer(tl).hide("tc:t1.c6.result", "").status == "ok"


def test_an_unknown_path_is_not_found() -> None:
    result = Renderer(rounds(6)).hide("tc:t1.nope.result", "")
    assert (result.status, result.code) == ("not_found", "hide_failed")
    assert result.message == "no such path"


def test_an_already_hidden_path_is_not_found() -> None:
    renderer = Renderer(rounds(6))
    assert renderer.hide("tc:t1.c6.result", "").status == "ok"
    again = renderer.hide("tc:t1.c6.result", "")
    assert again.status == "not_found"
    assert "already hidden" in again.message


def test_a_physical_path_is_invalid() -> None:
    result = Renderer(rounds(6)).hide("/etc/passwd", "")
    assert (result.status, result.code) == ("invalid", "invalid_path")
    assert "absolute_path" in result.message


def test_every_block_at_the_path_is_hidden_and_only_the_first_shows_the_replacement() -> None:
    tl = rounds(6)
    for i in range(3):
        tl.append(Block.new("react.read.content", "t1", T0 + 300 + i, path="ks:big.md", text="b"))
    renderer = Renderer(tl)
    result = renderer.hide("ks:big.md", "")
    assert result.blocks_hidden == 3
    blocks = tl.blocks_at("ks:big.md")
    assert all(b.hidden for b in blocks)
    assert [bool(b.replacement) for b in blocks] == [True, False, False]
    rendered = renderer.render(now=T0 + 400)
    assert list(rendered.paths).count("ks:big.md") == 1
    assert "Why: no longer needed" in blocks[0].replacement


def test_unhide_restores_the_original_content() -> None:
    tl = rounds(6, result_text="precious")
    renderer = Renderer(tl)
    renderer.hide("tc:t1.c6.result", "")
    assert tl.unhide("tc:t1.c6.result") == 1
    text = renderer.render(now=T0 + 100).text()
    assert "precious" in text.rsplit("tc:t1.c6.result", 1)[1]


def test_hide_result_serialises_and_pickles() -> None:
    result = Renderer(rounds(6)).hide("tc:t1.c1.result", "")
    payload = result.to_dict()
    assert payload["before_cache"] is True
    assert payload["code"] == "hide_before_cache"
    assert pickle.loads(pickle.dumps(result)) == result
    assert isinstance(result, HideResult)


def test_a_turn_header_cannot_be_hidden() -> None:
    tl = rounds(1)
    result = Renderer(tl).hide("ar:t1.turn.header", "")
    assert (result.status, result.code) == ("invalid", "hide_failed")
    assert not tl.header("t1").hidden  # type: ignore[union-attr]


def test_the_active_plan_cannot_be_hidden_but_a_closed_one_can() -> None:
    tl = rounds(1)
    plan = tl.plans.apply("new", turn_id="t1", plan_id="p1", steps=["a"])
    tl.record_plan(plan, turn_id="t1", ts=T0 + 50)
    renderer = Renderer(tl)
    result = renderer.hide("ar:t1.react.plan.p1", "")
    assert (result.status, result.code) == ("invalid", "hide_failed")
    assert "active plan" in result.message
    tl.record_plan(tl.plans.apply("close", turn_id="t1", plan_id="p1"), turn_id="t1", ts=T0 + 51)
    assert renderer.hide("ar:t1.react.plan.p1", "").status == "ok"
