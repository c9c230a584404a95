"""The ``cost`` context policy: where and when view edits change the rendered prefix.

Mid-turn, results that leave the recency window wait (the cached prefix stays as it was);
at the next turn's first round they go in one batch; in the editable tail, on a cold cache
and at the context's ceiling they go at once; a compaction is done at a boundary when the
next turn would pass the ceiling; a watchdog's ask is weighed there too. Every decision is
a verdict with its arithmetic (the trace's ``context.edit`` events).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from actline.actors.configuration.profiles import resolve as resolve_profile
from actline.actors.errors import InputRefused
from actline.timeline import Renderer, RenderResult, TimelineConfig, TimelineError, resolve
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from actline.timeline.paths import tc_path
from tests.timeline.builders import Build, texts, words

BIG = words(2_400)  # ~3,600 tokens: verbose, archived by summarize_archive
CFG = TimelineConfig(cache_ttl_seconds=300, retention_recent_results=3, cache_point_offset_rounds=1)
"""A window of three results and the pre-tail mark one round back: a result that leaves the
window is in the cached prefix, before the editable tail."""


def fetch(b: Build, call: str, text: str = BIG) -> None:
    turn = b.tl.current_turn_id
    assert turn is not None
    body = {"tool": "web.fetch", "params": {"page": call}}
    b.add(TOOL_CALL, path=tc_path(turn, call, "call"), call_id=call, data=body)
    b.result(call, text)


def render(renderer: Renderer, b: Build, **kw: Any) -> RenderResult:
    return renderer.render(now=b.at(), include_sources=False, include_announce=False, **kw)


def hidden(b: Build) -> list[str]:
    return [x.path for x in b.tl.blocks if x.type == TOOL_RESULT and x.hidden]


def marked_prefix(result: RenderResult) -> list[Any]:
    """The parts through the request's last mark (what the provider has cached)."""
    return list(result.stable[: max(result.marks) + 1])


def one_turn_of_rounds(renderer: Renderer, b: Build, turn: str, n: int) -> list[RenderResult]:
    b.turn(turn)
    out = [render(renderer, b)]
    for i in range(n):
        fetch(b, f"c{i}")
        out.append(render(renderer, b))
    return out


def test_mid_turn_results_wait_and_the_cached_prefix_stays_byte_identical() -> None:
    b = Build()
    renderer = Renderer(b.tl, CFG)
    results = one_turn_of_rounds(renderer, b, "t1", 7)
    assert hidden(b) == []  # c0..c3 left the window of 3, mid-turn: they wait
    for before, after in itertools.pairwise(results[1:]):
        assert marked_prefix(after)[: len(marked_prefix(before))] == marked_prefix(before)
    queued = [e for r in results for e in r.events.edits if e.edit.kind == "retention"]
    assert queued and all(not v.take and v.where == "round" for v in queued)
    assert queued[0].reason == "waits for a boundary"
    assert len(queued) <= 4  # reported when the queue grows, not every round


def test_at_the_next_turns_first_round_they_go_in_one_batch() -> None:
    b = Build()
    renderer = Renderer(b.tl, CFG)
    one_turn_of_rounds(renderer, b, "t1", 7)
    b.completion()
    b.turn("t2")
    result = render(renderer, b)
    assert result.events.moment == "boundary"
    taken = [v for v in result.events.edits if v.take]
    assert len(taken) == 1 and taken[0].edit.kind == "retention"
    assert taken[0].where == "boundary" and taken[0].gain > taken[0].cost
    # the window is the running turn's: every page of t1 is archived, by path
    pages = [tc_path("t1", f"c{i}", "result") for i in range(7)]
    assert hidden(b) == pages == list(result.events.retention.retained)
    assert taken[0].edit.paths == tuple(pages)
    shown = "\n".join(texts(result))
    assert BIG not in shown and f"ARCHIVED tool result {pages[0]}" in shown
    assert resolve(b.tl, pages[0]).text.startswith(BIG)  # reopenable by path, whole


def test_in_the_editable_tail_an_edit_that_pays_goes_mid_turn() -> None:
    """With one result in the window and the pre-tail mark four rounds back, the result
    that just left the window sits after CP2: archiving it rewrites one page."""
    cfg = TimelineConfig(
        cache_ttl_seconds=300, retention_recent_results=1, cache_point_offset_rounds=4
    )
    b = Build()
    renderer = Renderer(b.tl, cfg)
    results = one_turn_of_rounds(renderer, b, "t1", 3)
    fetch(b, "c3")
    result = render(renderer, b)
    taken = [v for v in result.events.edits if v.take]
    assert taken and all(v.where == "tail" for v in taken), result.events.edits
    floor = results[-1].points.hide_floor
    changed = next(
        i for i, (x, y) in enumerate(zip(results[-1].stable, result.stable, strict=False)) if x != y
    )
    assert changed > floor  # nothing at or before the previous request's pre-tail mark


def test_a_cold_cache_takes_what_waits_at_once() -> None:
    b = Build()
    renderer = Renderer(b.tl, CFG)
    one_turn_of_rounds(renderer, b, "t1", 6)
    assert hidden(b) == []
    b.clock += 600  # the provider cache expired: the prefix is written again anyway
    fetch(b, "c6")
    result = render(renderer, b)
    assert result.events.moment == "cold"
    assert hidden(b) == [tc_path("t1", f"c{i}", "result") for i in range(4)]  # c4..c6 stay
    assert any(v.take and v.reason == "cache cold" for v in result.events.edits)


def test_at_the_ceiling_retention_and_compaction_go_mid_turn_for_the_budget() -> None:
    cfg = TimelineConfig(cache_ttl_seconds=300, retention_recent_results=3, max_tokens=30_000)
    b = Build()
    renderer = Renderer(b.tl, cfg)
    results = one_turn_of_rounds(renderer, b, "t1", 8)
    forced = [v for r in results for v in r.events.edits if v.take and v.where == "budget"]
    assert forced and forced[0].reason == "context budget"
    assert all(r.stable_tokens <= 0.9 * 30_000 for r in results)


def test_a_boundary_compacts_when_the_next_turn_would_pass_the_ceiling() -> None:
    """Each turn adds ~25,000 tokens; the ceiling is 45,000. At the third turn's boundary
    the context (two archived turns) plus a turn's growth would pass it: the compaction
    goes there, keeping at most the turn that just ended, not in the middle of the turn."""
    cfg = TimelineConfig(
        cache_ttl_seconds=300, retention_recent_results=3, max_tokens=50_000, retention=False
    )
    b = Build()
    renderer = Renderer(b.tl, cfg)
    compactions: list[tuple[str, str]] = []
    for t in range(1, 5):
        for result in one_turn_of_rounds(renderer, b, f"t{t}", 7):
            for verdict in result.events.edits:
                if verdict.edit.kind == "compaction" and verdict.take:
                    compactions.append((result.events.moment, verdict.reason))
        b.completion()
    assert compactions
    assert all(moment == "boundary" for moment, _ in compactions), compactions
    assert compactions[0][1] == "context budget within the next turn"
    summary = b.tl.latest_summary
    assert summary is not None and summary.turn_id != "t1"


def test_a_watchdog_ask_is_weighed_at_the_next_boundary_not_mid_turn() -> None:
    cfg = TimelineConfig(
        cache_ttl_seconds=300, max_tokens=200_000, retention=False, compaction_floor_tokens=1
    )
    b = Build()
    renderer = Renderer(b.tl, cfg)
    one_turn_of_rounds(renderer, b, "t1", 4)
    renderer.ask_compaction("watchdog: context_rot")
    fetch(b, "c4")
    mid = render(renderer, b)
    assert not [v for v in mid.events.edits if v.edit.kind == "compaction"]
    assert b.tl.latest_summary is None
    b.turn("t2")
    at = render(renderer, b)
    weighed = [v for v in at.events.edits if v.edit.kind == "compaction"]
    assert len(weighed) == 1 and "asked: watchdog: context_rot" in weighed[0].reason
    assert weighed[0].take == (weighed[0].gain > weighed[0].cost)


def test_react_hide_is_recorded_with_what_it_cost() -> None:
    b = Build()
    renderer = Renderer(b.tl, CFG)
    one_turn_of_rounds(renderer, b, "t1", 2)
    outcome = renderer.hide(tc_path("t1", "c1", "result"), "not needed")
    assert outcome.status == "ok"
    fetch(b, "c2")
    verdicts = [v for v in render(renderer, b).events.edits if v.edit.kind == "hide"]
    assert len(verdicts) == 1 and verdicts[0].take and verdicts[0].where == "tail"
    assert verdicts[0].reason in ("pays", "asked by the model")


def test_without_a_floor_a_boundary_never_compacts_for_cost_alone() -> None:
    """The default ``compaction_floor_tokens`` (0): below the ceiling nothing compacts."""
    cfg = TimelineConfig(cache_ttl_seconds=300, max_tokens=200_000, retention=False)
    b = Build()
    renderer = Renderer(b.tl, cfg)
    for t in range(1, 4):
        one_turn_of_rounds(renderer, b, f"t{t}", 4)
        b.completion()
    renderer.ask_compaction("watchdog: context_rot")
    b.turn("t4")
    result = render(renderer, b)
    assert b.tl.latest_summary is None and result.stable_tokens > 40_000
    assert not [v for v in result.events.edits if v.edit.kind == "compaction"]


def test_the_append_policy_archives_mid_turn_as_results_leave_the_window() -> None:
    """The smart layer off: each result archived in place when it leaves the window."""
    cfg = TimelineConfig(cache_ttl_seconds=300, retention_recent_results=3, context_policy="append")
    b = Build()
    renderer = Renderer(b.tl, cfg)
    results = one_turn_of_rounds(renderer, b, "t1", 6)
    assert hidden(b) == [tc_path("t1", f"c{i}", "result") for i in range(3)]
    assert not [v for r in results for v in r.events.edits]


def test_an_unknown_context_policy_is_refused_by_name() -> None:
    with pytest.raises(TimelineError, match="context_policy must be one of cost, append"):
        TimelineConfig(context_policy="eager")
    with pytest.raises(InputRefused, match="context_policy"):
        resolve_profile({"extends": "fast", "context_policy": "eager"})
