"""A completed plan leaves ANNOUNCE: the render after the acknowledgement that completes it
says so once, and no later render announces the plan or repeats the notice."""

from __future__ import annotations

from actline.timeline import AnnounceContext, Renderer, RenderResult, Timeline
from actline.timeline.blocks import PLAN

from .builders import Build

CTX = AnnounceContext(iteration=1, max_iterations=8)


def announce(result: RenderResult) -> str:
    (text,) = [
        p["text"]
        for p, label in zip(result.tail, result.labels, strict=True)
        if label == "announce"
    ]
    return str(text)


def planned(steps: list[str]) -> tuple[Build, Renderer]:
    b = Build(Timeline("conv"))
    b.turn("t1", "what changed in pricing?")
    plan = b.tl.plans.apply("new", turn_id="t1", plan_id="p1", steps=steps)
    b.tl.record_plan(plan, turn_id="t1", ts=b.at())
    return b, Renderer(b.tl)


def test_a_plan_acked_done_leaves_announce_and_the_next_render_says_so_once() -> None:
    b, renderer = planned(["search", "read", "answer"])
    first = announce(renderer.render(now=b.at(), announce=CTX))
    assert "active plan p1" in first and "□ 3. answer" in first

    b.tool("k1")
    b.tl.acknowledge("✓ 1. searched\n✓ 2. read", turn_id="t1", ts=b.at(), iteration=1)
    b.tl.acknowledge("✓ 3. answered", turn_id="t1", ts=b.at(), iteration=2)
    after = announce(renderer.render(now=b.at(), announce=CTX))
    assert "active plan" not in after
    assert after.count("plan p1 completed: all 3 steps done") == 1

    again = announce(renderer.render(now=b.at(), announce=CTX))  # the same turn, next round
    assert "active plan" not in again and "completed" not in again

    b.completion("done")
    b.turn("t2", "and the limits?")
    next_turn = announce(renderer.render(now=b.at(), announce=CTX))
    assert "active plan" not in next_turn and "completed" not in next_turn
    # the plan is still on the timeline, complete, and still readable by its path
    latest = b.tl.latest_plan_block("p1")
    assert latest is not None and latest.type == PLAN
    assert [s["status"] for s in latest.data["steps"]] == ["done", "done", "done"]


def test_a_plan_completed_in_a_turns_last_reply_is_announced_completed_in_the_next_turn() -> None:
    b, renderer = planned(["search", "answer"])
    renderer.render(now=b.at(), announce=CTX)
    b.tl.acknowledge("✓ 1.\n✗ 2. no answer found", turn_id="t1", ts=b.at(), iteration=1)
    b.completion("sorry")  # the turn ends with no render after the acknowledgement
    b.turn("t2", "try again")
    first = announce(renderer.render(now=b.at(), announce=CTX))
    assert "active plan" not in first
    assert first.count("plan p1 completed: 1 of 2 steps done, 1 failed") == 1

    b.turn("t3", "thanks")
    later = announce(renderer.render(now=b.at(), announce=CTX))
    assert "active plan" not in later and "completed" not in later


def test_a_partly_done_plan_stays_announced_with_no_completed_notice() -> None:
    b, renderer = planned(["search", "read", "answer"])
    b.tl.acknowledge("✓ 1.\n✗ 2.\n… 3. writing", turn_id="t1", ts=b.at(), iteration=1)
    for turn in ("t2", "t3"):
        text = announce(renderer.render(now=b.at(), announce=CTX))
        assert "active plan p1" in text
        assert "✓ 1. search" in text and "✗ 2. read" in text and "… 3. answer" in text
        assert "completed" not in text
        b.completion("partial")
        b.turn(turn, "go on")


def test_a_completed_plan_that_an_acknowledgement_reopens_is_announced_again() -> None:
    b, renderer = planned(["search", "answer"])
    b.tl.acknowledge("✓ 1.\n✓ 2.", turn_id="t1", ts=b.at(), iteration=1)
    assert "completed" in announce(renderer.render(now=b.at(), announce=CTX))
    b.tl.acknowledge("□ 2. answer again", turn_id="t1", ts=b.at(), iteration=2)
    reopened = announce(renderer.render(now=b.at(), announce=CTX))
    assert "active plan p1" in reopened and "completed" not in reopened
    b.tl.acknowledge("✓ 2.", turn_id="t1", ts=b.at(), iteration=3)
    assert announce(renderer.render(now=b.at(), announce=CTX)).count("plan p1 completed") == 1


def test_acknowledging_a_completed_plan_again_queues_no_second_notice() -> None:
    b, renderer = planned(["search"])
    b.tl.acknowledge("✓ 1.", turn_id="t1", ts=b.at(), iteration=1)
    assert b.tl.notices.once == ["plan p1 completed: its one step done"]
    renderer.render(now=b.at(), announce=CTX)
    b.tl.acknowledge("✗ 1. it failed after all", turn_id="t1", ts=b.at(), iteration=2)
    assert b.tl.notices.once == []
    assert "completed" not in announce(renderer.render(now=b.at(), announce=CTX))


def test_the_completed_notice_survives_a_restore_and_the_plan_stays_unannounced() -> None:
    b, _ = planned(["search", "answer"])
    b.tl.acknowledge("✓ 1.\n✓ 2.", turn_id="t1", ts=b.at(), iteration=1)
    restored = Timeline.restore(b.tl.full_snapshot(), [block.to_dict() for block in b.tl.blocks])
    renderer = Renderer(restored)
    first = announce(renderer.render(now=b.at(), announce=CTX))
    assert "active plan" not in first and first.count("plan p1 completed") == 1
    assert "completed" not in announce(renderer.render(now=b.at(), announce=CTX))


def test_a_completed_plan_is_no_longer_the_active_plan_block() -> None:
    b, _ = planned(["search"])
    assert b.tl.active_plan_block() is not None
    b.tl.acknowledge("✓ 1.", turn_id="t1", ts=b.at(), iteration=1)
    assert b.tl.active_plan_block() is None
    assert b.tl.plans.current is not None and b.tl.plans.active is None
