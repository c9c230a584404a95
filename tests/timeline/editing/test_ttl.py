"""Session TTL pruning: statuses, old-turn and light pruning, the note, restores, read-back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.timeline import DEFAULT_COUNTER, Renderer, Timeline, TimelineConfig, TimelineError
from actline.timeline.blocks import (
    NOTE_PRESERVED,
    PLAN,
    PLAN_ACK,
    REACT_NOTES,
    SUMMARY,
    SYSTEM_MESSAGE,
    TURN_HEADER,
    USER_FOLLOWUP,
    USER_FOLLOWUP_PRESERVED,
)
from actline.timeline.editing import ttl
from actline.timeline.paths import ar_path, su_path
from actline.timeline.tokens import block_tokens
from tests.timeline.builders import T0, Build, shown, texts, words

TTL = 300
BUFFER = 10
EXPIRY = TTL - BUFFER
"""Seconds after the last render at which the cache counts as cold."""
ARMED_AT = T0 + 1000.0
"""When the tests' first render happens (after every block the builders append)."""

OLD = TimelineConfig(keep_recent_turns=2, keep_recent_intact_turns=1)
"""Four-turn conversations: t1 and t2 are old, t3 is recent, t4 is intact."""
LIGHT = TimelineConfig(
    keep_recent_intact_turns=1, light_prune_result_tokens=200, keep_recent_images=2
)
"""Every turn is recent (keep_recent_turns=10): only light pruning, t3 intact."""
SYSTEM_PATH = "ar:t4.system.message.cache_pruned"


def conversation(turns: int = 4) -> Build:
    """``turns`` turns: prompt, internal note, one tool round, completion.

    Prompt, call, result and completion are each larger than their pruned view
    (blocks smaller than their view are never pruned); the note is small.
    """
    b = Build()
    for n in range(1, turns + 1):
        b.turn(f"t{n}", words(100, f"ask{n}"))
        b.note(f"note {n}")
        b.call(f"c{n}", words(100, f"arg{n}"))
        b.result(f"c{n}", words(100, f"res{n}"))
        b.completion(words(100, f"ans{n}"))
    return b


def prune(tl: Timeline, cfg: TimelineConfig = OLD) -> ttl.TtlOutcome:
    """Arm the cache, then apply the TTL check exactly when it has expired."""
    ttl.apply(tl, cfg, now=ARMED_AT, counter=DEFAULT_COUNTER)
    return ttl.apply(tl, cfg, now=ARMED_AT + EXPIRY, counter=DEFAULT_COUNTER)


def hidden_paths(tl: Timeline) -> set[str]:
    return {b.path for b in tl.blocks if b.hidden}


# --- statuses ------------------------------------------------------------------------------


def test_a_zero_ttl_disables_pruning_but_still_touches_the_cache() -> None:
    tl = conversation().tl
    cfg = TimelineConfig(cache_ttl_seconds=0, keep_recent_turns=1, keep_recent_intact_turns=0)
    for now in (ARMED_AT, ARMED_AT + 10_000):
        outcome = ttl.apply(tl, cfg, now=now, counter=DEFAULT_COUNTER)
        assert outcome.status == "disabled"
        assert tl.cache.last_touch_at == now
    assert not hidden_paths(tl)
    assert ttl.is_expired(tl, cfg, ARMED_AT + 1_000_000) is False


def test_an_empty_timeline_reports_empty() -> None:
    tl = Timeline("c")
    assert ttl.apply(tl, OLD, now=ARMED_AT, counter=DEFAULT_COUNTER).status == "empty"
    outcome = ttl.apply(tl, OLD, now=ARMED_AT + 10 * TTL, counter=DEFAULT_COUNTER)
    assert outcome.status == "empty"


def test_the_first_render_arms_the_cache_without_pruning() -> None:
    b = conversation()
    outcome = Renderer(b.tl, OLD).render(now=ARMED_AT).events.ttl
    assert outcome.status == "armed"
    assert b.tl.cache.last_touch_at == ARMED_AT
    assert b.tl.cache.last_ttl_seconds == TTL
    assert not hidden_paths(b.tl)


def test_renders_within_ttl_minus_buffer_are_fresh_and_move_the_touch_time() -> None:
    tl = conversation().tl
    ttl.apply(tl, OLD, now=ARMED_AT, counter=DEFAULT_COUNTER)
    now = ARMED_AT
    for _ in range(3):
        # Each render resets the clock, so the session stays warm well past one TTL.
        now += EXPIRY - 1
        assert ttl.apply(tl, OLD, now=now, counter=DEFAULT_COUNTER).status == "fresh"
        assert tl.cache.last_touch_at == now
    assert now - ARMED_AT > TTL
    assert not hidden_paths(tl)


def test_the_cache_expires_exactly_at_ttl_minus_buffer() -> None:
    tl = conversation().tl
    ttl.apply(tl, OLD, now=ARMED_AT, counter=DEFAULT_COUNTER)
    assert ttl.is_expired(tl, OLD, ARMED_AT + EXPIRY - 0.001) is False
    assert ttl.is_expired(tl, OLD, ARMED_AT + EXPIRY) is True
    outcome = ttl.apply(tl, OLD, now=ARMED_AT + EXPIRY, counter=DEFAULT_COUNTER)
    assert outcome.status == "pruned"
    assert tl.cache.last_touch_at == ARMED_AT + EXPIRY


def test_an_expired_cache_with_old_turns_prunes() -> None:
    tl = conversation().tl
    outcome = prune(tl)
    assert outcome.status == "pruned"
    assert outcome.skip_old_turns is False
    assert set(outcome.hidden_paths) == hidden_paths(tl)


def test_only_light_pruning_happens_when_every_turn_is_recent() -> None:
    b = conversation(3)
    b.tool("big", words(200), turn="t1")
    outcome = prune(b.tl, LIGHT)
    assert outcome.status == "pruned_light"
    assert outcome.skip_old_turns is True
    assert outcome.hidden_paths == ("tc:t1.big.result",)


def test_an_expired_cache_with_nothing_to_prune_has_no_effect() -> None:
    b = conversation(3)
    before = len(b.tl)
    outcome = prune(b.tl, LIGHT)
    assert outcome.status == "no_effect"
    assert outcome.skip_old_turns is True
    assert outcome.hidden_paths == ()
    assert len(b.tl) == before  # no pruning note without pruning
    assert not b.tl.notices.once


# --- old-turn pruning ------------------------------------------------------------------------


def test_old_turns_are_hidden_by_path_with_a_short_view_that_says_how_to_restore() -> None:
    tl = conversation().tl
    prune(tl)
    expected = {
        f"{prefix}:t{n}.{name}"
        for n in (1, 2)
        for prefix, name in (
            ("ar", "user.prompt"),
            ("ar", "assistant.completion"),
            ("tc", f"c{n}.call"),
            ("tc", f"c{n}.result"),
        )
    }
    assert hidden_paths(tl) == expected
    for path in expected:
        (block,) = tl.blocks_at(path)
        assert block.hidden
        assert "react.read" in block.replacement
        assert path in block.replacement
        assert block.replacement != block.content


def test_every_block_of_an_old_path_is_hidden_and_only_the_first_shows_the_view() -> None:
    b = Build()
    b.turn("t1")
    first = b.add("react.tool.output", path=ar_path("t1", "react.output"), text=words(100, "one"))
    second = b.add("react.tool.output", path=ar_path("t1", "react.output"), text=words(99, "two"))
    for n in (2, 3, 4):
        b.turn(f"t{n}")
    prune(b.tl)
    assert first.hidden and second.hidden
    assert first.replacement.startswith("[TRUNCATED] one one")
    assert 'react.read(["ar:t1.react.output"])' in first.replacement
    assert second.replacement == ""
    renderer = Renderer(b.tl, OLD)
    paths = list(renderer.render(now=ARMED_AT + EXPIRY).paths)
    assert paths.count("ar:t1.react.output") == 1


def test_an_old_result_with_sources_shows_the_compact_sources_view() -> None:
    b = conversation()
    rows = [
        {"sid": 1, "title": "Alpha", "url": "https://a.example/1", "text": words(50, "body")},
        {"sid": 2, "title": "Beta", "url": "https://b.example/2", "text": words(50, "body")},
    ]
    b.result("search", words(200, "raw"), turn="t1", meta={"sources": rows})
    prune(b.tl)
    (block,) = b.tl.blocks_at("tc:t1.search.result")
    assert block.replacement.startswith("[TRUNCATED RESULT] sources: ")
    listing = block.replacement.removeprefix("[TRUNCATED RESULT] sources: ").split(" Pruned")[0]
    assert json.loads(listing) == [{k: r[k] for k in ("sid", "title", "url")} for r in rows]
    assert "body" not in block.replacement
    assert 'react.read(["tc:t1.search.result"])' in block.replacement


@pytest.mark.parametrize(
    ("block_type", "path"),
    [
        (TURN_HEADER, "ar:t1.turn.header"),
        ("react.note", "ar:t1.react.note.1"),
        (NOTE_PRESERVED, "ar:t1.react.note.preserved.9"),
        (REACT_NOTES, "ar:t1.react.notes.c1"),
        (PLAN, "ar:t1.react.plan.p1"),
        (PLAN_ACK, "ar:t1.react.plan.ack.1"),
        ("react.plan.history", "ar:t1.react.plan.history"),
        ("react.round.start", "ar:t1.react.round.start.c1"),
        (USER_FOLLOWUP, "ar:t1.external.followup.m1"),
        (USER_FOLLOWUP_PRESERVED, "ar:t1.user.followup.preserved.3"),
        ("user.steer", "ar:t1.external.steer.m2"),
        ("user.steer.preserved", "ar:t1.user.steer.preserved.4"),
        (SUMMARY, su_path("t1")),
    ],
)
def test_never_pruned_types_stay_visible_in_old_turns(block_type: str, path: str) -> None:
    assert block_type in ttl.NEVER_PRUNED
    b = Build()
    b.turn("t1", words(100))
    if block_type == TURN_HEADER:
        (block,) = b.tl.blocks_at(path)
    elif block_type == PLAN:
        block = b.plan(["Gather", "Write"])
    else:
        block = b.add(block_type, path=path, text=words(800, "keep"))
    for n in (2, 3, 4):
        b.turn(f"t{n}", words(100))
    outcome = prune(b.tl)
    assert outcome.status == "pruned"  # the prompts of t1 and t2 were pruned
    assert not block.hidden
    assert path not in outcome.hidden_paths
    assert path in shown(Renderer(b.tl, OLD))


def test_recent_turns_are_untouched_by_old_turn_pruning() -> None:
    tl = conversation().tl
    prune(tl)
    for turn in ("t3", "t4"):
        assert not any(b.hidden for b in tl.turn_blocks(turn))


# --- light pruning ---------------------------------------------------------------------------


def light_conversation() -> Build:
    """Three recent turns (t1, t2 prunable lightly, t3 intact) with heavy content."""
    b = Build()
    b.turn("t1")
    b.image("a.png")
    b.tool("big1", words(200))
    b.turn("t2")
    b.image("b.png")
    b.skill("reports/SKILL.md", words(100, "report"))
    b.tool("small", "tiny result")
    b.tool("big2", words(200))
    b.turn("t3")
    b.image("c.png")
    b.tool("big3", words(200))
    b.skill("charts/SKILL.md", words(100, "chart"))
    return b


def test_a_large_result_in_a_recent_turn_gets_a_short_view() -> None:
    b = light_conversation()
    prune(b.tl, LIGHT)
    for path in ("tc:t1.big1.result", "tc:t2.big2.result"):
        (block,) = b.tl.blocks_at(path)
        assert block.hidden
        assert block.replacement.startswith("[TRUNCATED RESULT] lorem")
        assert f'react.read(["{path}"])' in block.replacement
        assert DEFAULT_COUNTER.count(block.replacement) < LIGHT.light_prune_result_tokens
    assert not b.tl.blocks_at("tc:t2.small.result")[0].hidden
    assert not b.tl.blocks_at("tc:t2.big2.call")[0].hidden


def test_a_large_result_with_sources_gets_the_compact_sources_view() -> None:
    b = Build()
    rows = [{"sid": n, "title": f"T{n}", "url": f"https://x.example/{n}"} for n in range(1, 61)]
    for n in (1, 2):
        b.turn(f"t{n}")
    b.result("search", words(1000), turn="t1", meta={"sources": rows})
    prune(b.tl, LIGHT)
    (block,) = b.tl.blocks_at("tc:t1.search.result")
    assert block.replacement.startswith("[TRUNCATED RESULT] sources: [")
    assert "(+10 more)" in block.replacement
    assert '"sid": 50' in block.replacement and '"sid": 51' not in block.replacement
    assert "lorem" not in block.replacement


def test_skill_reads_in_recent_turns_are_hidden() -> None:
    b = light_conversation()
    prune(b.tl, LIGHT)
    (block,) = b.tl.blocks_at("sk:reports/SKILL.md")
    assert block.hidden
    assert "skill content removed by pruning: sk:reports/SKILL.md" in block.replacement
    assert 'react.read(["sk:reports/SKILL.md"])' in block.replacement


def test_images_beyond_keep_recent_images_are_hidden_and_the_newest_stay() -> None:
    b = light_conversation()
    prune(b.tl, LIGHT)
    (oldest,) = b.tl.blocks_at("fi:t1.user.attachments/a.png")
    assert oldest.hidden
    assert oldest.replacement.startswith("[binary removed by pruning: image/png, 400 base64")
    assert "fi:t1.user.attachments/a.png" in oldest.replacement
    # b.png sits in a prunable turn but is among the two newest images, so it stays.
    assert not b.tl.blocks_at("fi:t2.user.attachments/b.png")[0].hidden
    assert not b.tl.blocks_at("fi:t3.user.attachments/c.png")[0].hidden
    parts = Renderer(b.tl, LIGHT).render(now=ARMED_AT + EXPIRY).stable
    assert [p["type"] for p in parts].count("image") == 2


def test_a_large_non_media_binary_in_a_recent_turn_is_hidden() -> None:
    b = Build()
    b.turn("t1")
    zip_path = "fi:t1.user.attachments/data.zip"
    big = b.image("data.zip", LIGHT.max_base64_chars + 1, mime="application/zip")
    small = b.image("small.bin", 100, mime="application/octet-stream")
    b.turn("t2")
    prune(b.tl, LIGHT)
    assert big.hidden and zip_path in big.replacement
    assert big.replacement.startswith("[binary removed by pruning: application/zip")
    assert not small.hidden


def test_intact_turns_are_untouched_by_light_pruning() -> None:
    b = light_conversation()
    outcome = prune(b.tl, LIGHT)
    assert outcome.status == "pruned_light"
    assert not any(block.hidden for block in b.tl.turn_blocks("t3"))
    assert not any(
        path.startswith(("tc:t3", "fi:t3", "sk:charts")) for path in outcome.hidden_paths
    )


def test_old_and_light_pruning_together_report_pruned() -> None:
    b = conversation()
    b.tool("big", words(2000), turn="t3")
    outcome = prune(b.tl)
    assert outcome.status == "pruned"
    assert "tc:t3.big.result" in outcome.hidden_paths
    assert "tc:t1.c1.result" in outcome.hidden_paths
    assert not b.tl.blocks_at("tc:t3.big.call")[0].hidden


# --- the pruning note and the notice -----------------------------------------------------------


def test_the_pruning_message_is_appended_once_per_turn() -> None:
    tl = conversation().tl
    prune(tl)
    (message,) = tl.blocks_at(SYSTEM_PATH)
    assert message.type == SYSTEM_MESSAGE
    assert message.meta == {"kind": "cache_ttl_pruned", "ttl_seconds": TTL}
    assert message.content.startswith(
        f"[SYSTEM MESSAGE] Context was pruned because the session TTL ({TTL}s) was exceeded."
    )
    assert "react.read" in message.content
    assert tl.blocks[-1] is message
    # Something prunable again in the same turn: pruning runs, the message is not repeated.
    assert tl.unhide("tc:t1.c1.result") == 1
    again = ttl.apply(tl, OLD, now=ARMED_AT + 2 * EXPIRY, counter=DEFAULT_COUNTER)
    assert again.status == "pruned"
    assert again.hidden_paths == ("tc:t1.c1.result",)
    assert tl.blocks_at(SYSTEM_PATH) == [message]


def test_a_new_turn_gets_its_own_pruning_message() -> None:
    b = conversation()
    prune(b.tl)
    b.turn("t5")
    b.tool("c5", "fresh")
    outcome = ttl.apply(b.tl, OLD, now=ARMED_AT + 2 * EXPIRY, counter=DEFAULT_COUNTER)
    assert outcome.status == "pruned"  # t3 is old now
    assert len(b.tl.blocks_at("ar:t5.system.message.cache_pruned")) == 1
    assert len(b.tl.blocks_at(SYSTEM_PATH)) == 1


def test_the_pruning_notice_is_announced_by_the_next_render_only() -> None:
    tl = conversation().tl
    renderer = Renderer(tl, OLD)
    renderer.render(now=ARMED_AT)
    pruned = renderer.render(now=ARMED_AT + EXPIRY)
    assert pruned.events.ttl.status == "pruned"
    announce = pruned.tail[pruned.labels.index("announce")]["text"]
    assert f"context pruned: the session cache expired ({TTL}s)" in announce
    after = renderer.render(now=ARMED_AT + EXPIRY + 1)
    assert after.events.ttl.status == "fresh"
    assert "context pruned" not in after.tail[after.labels.index("announce")]["text"]


def test_a_notice_queued_outside_a_render_shows_in_the_next_render() -> None:
    tl = conversation().tl
    prune(tl)
    renderer = Renderer(tl, OLD)
    first = renderer.render(now=ARMED_AT + EXPIRY + 1)
    assert "context pruned" in first.tail[-1]["text"]
    assert "context pruned" not in renderer.render(now=ARMED_AT + EXPIRY + 2).tail[-1]["text"]


def test_the_rendered_stream_shows_the_pruned_views_and_the_message() -> None:
    tl = conversation().tl
    renderer = Renderer(tl, OLD)
    renderer.render(now=ARMED_AT)
    result = renderer.render(now=ARMED_AT + EXPIRY)
    by_path = dict(zip(result.paths, texts(result), strict=True))
    assert by_path["tc:t1.c1.result"].startswith("[TOOL RESULT · hidden] tc:t1.c1.result")
    assert 'react.read(["tc:t1.c1.result"])' in by_path["tc:t1.c1.result"]
    assert by_path["tc:t4.c4.result"].endswith(words(100, "res4"))
    assert result.paths[-1] == SYSTEM_PATH


# --- restores --------------------------------------------------------------------------------


def restored(tl: Timeline) -> Timeline:
    return Timeline.restore(tl.full_snapshot(), [b.to_dict() for b in tl.blocks])


def test_the_first_render_after_a_restore_uses_the_stored_ttl() -> None:
    b = conversation()
    Renderer(b.tl, OLD).render(now=ARMED_AT)  # stores ttl 300
    back = restored(b.tl)
    longer = TimelineConfig(keep_recent_turns=2, keep_recent_intact_turns=1, cache_ttl_seconds=1000)
    renderer = Renderer(back, longer)
    result = renderer.render(now=ARMED_AT + EXPIRY)  # cold under 300s, warm under 1000s
    assert result.events.ttl.status == "pruned"
    (message,) = back.blocks_at(SYSTEM_PATH)
    assert message.meta["ttl_seconds"] == TTL
    assert back.cache.last_ttl_seconds == 1000
    # Later renders use the configured 1000s: 900s later is still warm.
    assert renderer.render(now=ARMED_AT + EXPIRY + 900).events.ttl.status == "fresh"


def test_later_renders_after_a_restore_use_the_configured_ttl() -> None:
    b = conversation()
    longer = TimelineConfig(keep_recent_turns=2, keep_recent_intact_turns=1, cache_ttl_seconds=1000)
    Renderer(b.tl, longer).render(now=ARMED_AT)  # stores ttl 1000
    back = restored(b.tl)
    assert back.cache.restored is True
    renderer = Renderer(back, OLD)
    first = renderer.render(now=ARMED_AT + 900)  # warm under the stored 1000s
    assert first.events.ttl.status == "fresh"
    assert back.cache.restored is False
    assert back.cache.last_ttl_seconds == TTL
    second = renderer.render(now=ARMED_AT + 900 + EXPIRY)  # cold under 300s
    assert second.events.ttl.status == "pruned"
    assert back.blocks_at(SYSTEM_PATH)[0].meta["ttl_seconds"] == TTL


def test_a_restore_without_a_stored_ttl_uses_the_configured_one() -> None:
    b = conversation()
    ttl.apply(b.tl, TimelineConfig(cache_ttl_seconds=0), now=ARMED_AT, counter=DEFAULT_COUNTER)
    snapshot = b.tl.snapshot()
    snapshot["cache"]["last_ttl_seconds"] = None
    back = Timeline.restore(snapshot, [x.to_dict() for x in b.tl.blocks])
    outcome = ttl.apply(back, OLD, now=ARMED_AT + EXPIRY, counter=DEFAULT_COUNTER)
    assert outcome.status == "pruned"


def test_pruned_state_survives_a_restore() -> None:
    tl = conversation().tl
    prune(tl)
    back = restored(tl)
    assert hidden_paths(back) == hidden_paths(tl)
    original = Renderer(tl, OLD).render(now=ARMED_AT + EXPIRY + 1, include_announce=False)
    again = Renderer(back, OLD).render(now=ARMED_AT + EXPIRY + 1, include_announce=False)
    assert again.events.ttl.status == "fresh"
    assert again.parts() == original.parts()


# --- read-back -------------------------------------------------------------------------------


def test_every_pruned_block_stays_reachable_with_its_original_text() -> None:
    b = light_conversation()
    for n in (4, 5):
        b.turn(f"t{n}")
    originals = {block.id: block.content for block in b.tl.blocks}
    cfg = TimelineConfig(
        keep_recent_turns=3, keep_recent_intact_turns=1, light_prune_result_tokens=100
    )
    outcome = prune(b.tl, cfg)
    assert outcome.status == "pruned"
    assert outcome.hidden_paths
    for path in outcome.hidden_paths:
        found = b.tl.blocks_at(path)
        assert found and all(block.hidden for block in found)
        for block in found:
            assert block.content == originals[block.id]
            assert block.path == path


def test_unhide_shows_a_pruned_block_again_in_the_next_render() -> None:
    tl = conversation().tl
    renderer = Renderer(tl, OLD)
    renderer.render(now=ARMED_AT)
    pruned = renderer.render(now=ARMED_AT + EXPIRY)
    text = dict(zip(pruned.paths, texts(pruned), strict=True))["tc:t1.c1.result"]
    assert text.startswith("[TOOL RESULT · hidden] tc:t1.c1.result")
    assert tl.unhide("tc:t1.c1.result") == 1
    again = renderer.render(now=ARMED_AT + EXPIRY + 1)
    assert again.events.ttl.status == "fresh"
    text = dict(zip(again.paths, texts(again), strict=True))["tc:t1.c1.result"]
    assert text.startswith("[TOOL RESULT] tc:t1.c1.result")
    assert text.endswith("\n" + words(100, "res1"))


# --- properties --------------------------------------------------------------------------------

TURN_KINDS = st.sampled_from(["result", "big", "note", "image", "followup", "skill"])


@given(
    turns=st.lists(st.lists(TURN_KINDS, max_size=4), min_size=1, max_size=6),
    keep_recent=st.integers(0, 6),
    intact=st.integers(0, 3),
)
def test_pruning_never_hides_protected_blocks_and_keeps_everything_readable(
    turns: list[list[str]], keep_recent: int, intact: int
) -> None:
    b = Build()
    for n, kinds in enumerate(turns, start=1):
        b.turn(f"t{n}")
        for k, kind in enumerate(kinds):
            if kind in ("result", "big"):
                b.tool(f"c{k}", words(200 if kind == "big" else 3))
            elif kind == "note":
                b.note(words(5))
            elif kind == "image":
                b.image(f"i{k}.png")
            elif kind == "followup":
                b.followup("also this", f"m{n}x{k}")
            else:
                b.skill(f"s{k}/SKILL.md", words(100, "skill"))
    originals = {block.id: block.content for block in b.tl.blocks}
    cfg = TimelineConfig(
        keep_recent_turns=keep_recent,
        keep_recent_intact_turns=min(intact, keep_recent),
        light_prune_result_tokens=100,
    )
    outcome = prune(b.tl, cfg)
    protected = [block for block in b.tl.blocks if block.type in ttl.NEVER_PRUNED]
    assert not any(block.hidden for block in protected)
    assert set(outcome.hidden_paths) == hidden_paths(b.tl)
    for block in b.tl.blocks:
        assert block.content == originals.get(block.id, block.content)
        if block.hidden:
            assert block in b.tl.blocks_at(block.path)
    for path in set(outcome.hidden_paths):
        # A pruned path never costs more than it did.
        blocks = [block for block in b.tl.blocks_at(path) if block.hidden]
        view = "".join(block.replacement for block in blocks)
        assert DEFAULT_COUNTER.count(view) < sum(block_tokens(block) for block in blocks)
    if outcome.status in ("pruned", "pruned_light"):
        assert len(b.tl.blocks_at(f"ar:t{len(turns)}.system.message.cache_pruned")) == 1


# --- edges -------------------------------------------------------------------------------------


def test_a_block_smaller_than_its_view_is_not_pruned() -> None:
    b = Build()
    b.turn("t1", "hi")
    tiny = b.result("c1", "ok")
    for n in (2, 3, 4):
        b.turn(f"t{n}", "hi")
    outcome = prune(b.tl)
    assert outcome.status == "no_effect"
    assert not tiny.hidden
    assert not b.tl.blocks_at("ar:t1.user.prompt")[0].hidden


def test_a_config_with_more_intact_than_recent_turns_is_refused() -> None:
    with pytest.raises(TimelineError, match="keep_recent_intact_turns"):
        TimelineConfig(keep_recent_turns=1, keep_recent_intact_turns=2)


def test_hidden_paths_name_each_path_once() -> None:
    """An sk: path read in an old turn and in a recent one is hidden by both passes."""
    b = Build()
    for n in range(1, 6):
        b.turn(f"t{n}", words(100))
        if n in (1, 3):
            b.skill("reports/SKILL.md", words(200, "skill"))
    cfg = TimelineConfig(keep_recent_turns=3, keep_recent_intact_turns=1)
    outcome = prune(b.tl, cfg)
    assert all(block.hidden for block in b.tl.blocks_at("sk:reports/SKILL.md"))
    assert len(outcome.hidden_paths) == len(set(outcome.hidden_paths))
