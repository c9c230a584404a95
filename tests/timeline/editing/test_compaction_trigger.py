"""Compaction: when a render compacts, and the summary block it leaves at the head of the
stream."""

from __future__ import annotations

from dataclasses import replace

from actline.timeline import Renderer, TimelineConfig
from actline.timeline.blocks import NOTE_PRESERVED, PLAN, SUMMARY, TOOL_RESULT
from actline.timeline.paths import fi_path, su_path
from tests.timeline.builders import Build, summaries, texts, words
from tests.timeline.editing.compacting import (
    CFG,
    NOW,
    after_summary,
    before_summary,
    compact,
    history,
)

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
    """At the ceiling alone (the ``append`` policy: under ``cost`` a first render, with
    nothing cached, may compact below it when that pays)."""
    cfg = replace(CFG, context_policy="append")
    b = history(4)
    assert Renderer(b.tl, cfg).render(now=NOW).events.compaction is None
    result = Renderer(b.tl, cfg).render(now=NOW, system_tokens=3000)
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


# --- regressions --------------------------------------------------------------------------


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
