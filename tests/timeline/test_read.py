"""Reopening by path: stored blocks, the plan alias, pool rows, the turn index."""

from __future__ import annotations

from actline.timeline import Block, Renderer, SourceRow, Timeline, resolve, turn_index
from actline.timeline.blocks import COMPLETION, NOTE, TOOL_CALL, TOOL_RESULT, USER_PROMPT
from actline.timeline.rendering.announce import AnnounceContext, announce_text, local_time

T0 = 1_800_000_000.0


def small() -> Timeline:
    tl = Timeline("c")
    tl.begin_turn("t1", T0)
    tl.append(Block.new(USER_PROMPT, "t1", T0 + 1, path="ar:t1.user.prompt", text="question"))
    tl.append(Block.new(TOOL_CALL, "t1", T0 + 2, path="tc:t1.a.call", call_id="a", text="{}"))
    rows = [{"sid": 1, "title": "Keys", "url": "https://k.example"}]
    tl.append(
        Block.new(
            TOOL_RESULT,
            "t1",
            T0 + 3,
            path="tc:t1.a.result",
            call_id="a",
            text="found",
            meta={"sources": rows},
        )
    )
    tl.append(Block.new("react.artifact", "t1", T0 + 4, path="fi:t1.outputs/report.md", text="r"))
    tl.append(Block.new(NOTE, "t1", T0 + 5, path="ar:t1.react.note.n1", text="[D] use keys"))
    tl.append(Block.new(COMPLETION, "t1", T0 + 6, path="ar:t1.assistant.completion", text="done"))
    tl.sources.add([SourceRow(sid=1, url="https://k.example", title="Keys")])
    tl.sources.add([SourceRow(sid=1, url="https://l.example", title="Logs")])
    return tl


def test_a_stored_path_returns_its_blocks_even_when_hidden() -> None:
    tl = small()
    tl.begin_turn("t2", T0 + 10)
    for i in range(6):
        tl.append(Block.new(TOOL_CALL, "t2", T0 + 20 + i, path=f"tc:t2.c{i}.call", call_id=f"c{i}"))
    Renderer(tl).hide("tc:t2.c5.call", "")
    found = resolve(tl, "tc:t2.c5.call")
    assert found.kind == "blocks"
    assert found.blocks[0].hidden


def test_the_plan_alias_opens_the_newest_snapshot() -> None:
    tl = small()
    plan = tl.plans.apply("new", turn_id="t1", plan_id="p1", steps=["one", "two"])
    tl.record_plan(plan, turn_id="t1", ts=T0 + 7)
    tl.acknowledge("✓ 1 done", turn_id="t1", ts=T0 + 8, iteration=3)
    found = resolve(tl, "ar:plan.latest:p1")
    assert found.kind == "plan"
    assert found.blocks[0].data["steps"][0]["status"] == "done"
    assert resolve(tl, "ar:plan.latest:nope").kind == "missing"


def test_a_sources_selector_returns_rows_and_names_missing_sids() -> None:
    tl = small()
    found = resolve(tl, "so:sources_pool[1-3]")
    assert [r.sid for r in found.rows] == [1, 2]
    assert found.missing_sids == (3,)
    assert [r.sid for r in resolve(tl, "so:sources_pool").rows] == [1, 2]
    assert resolve(tl, "so:sources_pool[9]").kind == "missing"


def test_the_turn_index_is_built_on_demand() -> None:
    tl = small()
    index = turn_index(tl, "t1")
    assert [m["path"] for m in index["messages"]] == [
        "ar:t1.user.prompt",
        "ar:t1.assistant.completion",
    ]
    assert [t["path"] for t in index["tools"]] == ["tc:t1.a.call", "tc:t1.a.result"]
    assert [a["path"] for a in index["artifacts"]] == ["fi:t1.outputs/report.md"]
    assert index["notes"][0]["hint"] == "[D] use keys"
    assert index["sources"] == [{"sid": 1, "title": "Keys", "url": "https://k.example"}]
    found = resolve(tl, "ar:t1.react.turn.index")
    assert found.kind == "turn_index"
    assert "fi:t1.outputs/report.md — r" in found.text
    assert resolve(tl, "ar:t9.react.turn.index").kind == "missing"


def test_unknown_and_invalid_paths_do_not_raise() -> None:
    tl = small()
    assert resolve(tl, "ar:t1.nothing").kind == "missing"
    bad = resolve(tl, "../etc/passwd")
    assert bad.kind == "invalid"
    assert "physical_path" in bad.error or "dot_segment" in bad.error
    assert not bad.found


def test_announce_shows_budget_time_plan_notices_workspace_and_hotset() -> None:
    tl = small()
    plan = tl.plans.apply("new", turn_id="t1", plan_id="p1", steps=["read", "write"])
    ctx = AnnounceContext(
        iteration=3,
        max_iterations=15,
        budget_tokens=1234,
        timezone="Europe/Berlin",
        notices=["late DONE from reviewer"],
        workspace=["files/app: 3 files"],
        hotset=["prefers short answers"],
    )
    text = announce_text(ctx, now=T0, plan=plan, notices=["feedback: thumbs up"])
    assert text.splitlines()[0] == "[ANNOUNCE]"
    assert "iteration 3/15 · 1,234 tokens left" in text
    assert "time: 2027-01-15T08:00:00Z (UTC, authoritative)" in text
    assert "user time: 2027-01-15 09:00 CET (Friday) [Europe/Berlin]" in text
    assert "□ 1. read" in text
    assert text.index("feedback: thumbs up") < text.index("late DONE from reviewer")
    assert "files/app: 3 files" in text
    assert "[USER MEMORY HOTSET]" in text


def test_an_unknown_timezone_is_reported_not_raised() -> None:
    assert "unknown timezone" in local_time(T0, "Mars/Olympus")


def test_next_turn_notices_appear_on_the_next_turn_only() -> None:
    tl = small()
    tl.notices.next.append("late DONE from reviewer for turn t1")
    renderer = Renderer(tl)
    assert "late DONE" not in renderer.render(now=T0 + 50).tail[-1]["text"]
    tl.begin_turn("t2", T0 + 60)
    assert "late DONE" in renderer.render(now=T0 + 61).tail[-1]["text"]
    tl.begin_turn("t3", T0 + 70)
    assert "late DONE" not in renderer.render(now=T0 + 71).tail[-1]["text"]
