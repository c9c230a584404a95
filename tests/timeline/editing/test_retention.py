"""Tool-response retention: classes, policies, the recency window, batching, reopening by path,
persistence across a store reload, and no double handling of hidden or pruned results.

These are retention's own rules, run as the ``append`` context policy runs them (each pass
when its rule says); where and when the ``cost`` policy lets a pass change the rendered
prefix is tests/timeline/rendering/test_policy.py."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from actline.storage import Store
from actline.timeline import Block, Renderer, Timeline, TimelineConfig, TimelineError
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from actline.timeline.editing.retention import (
    RetentionOutcome,
    apply,
    classify,
    policy_for,
    replacement,
    retained_info,
    summarize_object,
)
from actline.timeline.editing.summary import OfflineSummarizer, SummaryRequest
from actline.timeline.paths import tc_path
from actline.timeline.read import resolve
from actline.timeline.tokens import DEFAULT_COUNTER
from actline.tools.react.core import ReactContext, ReactTools
from tests.timeline.builders import Build, texts, words

CFG = TimelineConfig(cache_ttl_seconds=0, context_policy="append")
BIG = words(900)  # ~1,350 tokens, 5,400 characters: verbose under the defaults


def rounds(b: Build, n: int, *, tool: str = "web.search", text: str = BIG, start: int = 0) -> None:
    """``n`` tool rounds whose call blocks name ``tool`` (as the runtime writes them)."""
    turn = b.tl.current_turn_id
    assert turn is not None
    for i in range(start, start + n):
        call = f"c{i}"
        body = {"tool": tool, "params": {"q": str(i)}}
        b.add(TOOL_CALL, path=tc_path(turn, call, "call"), call_id=call, data=body)
        b.result(call, text)


def hidden_paths(tl: Timeline) -> list[str]:
    return [b.path for b in tl.blocks if b.type == TOOL_RESULT and b.hidden]


def render(renderer: Renderer, b: Build) -> Any:
    return renderer.render(now=b.at(), include_sources=False, include_announce=False)


# -- classes and policies ------------------------------------------------------------------------


def test_each_classification() -> None:
    assert classify("react.read", BIG, 5000, CFG) == "critical"
    critical = replace(CFG, retention_critical_tools=("mcp.*",))
    assert classify("mcp.files.read", "x", 1, critical) == "critical"
    assert classify("web.fetch", "x" * 10, 1200, CFG) == "verbose"  # tokens
    assert classify("web.fetch", "x" * 3600, 10, CFG) == "verbose"  # characters
    for text in ("ok", " OK ", "true", "null", "", "{}", "[]", '{"status": "ok"}'):
        assert classify("web.fetch", text, 1, CFG) == "redundant", text
    assert classify("web.fetch", '{"status": "ok", "rows": 3}', 8, CFG) == "informative"


def test_policies_of_the_default_profile_and_a_per_tool_override() -> None:
    assert policy_for("web.fetch", "verbose", CFG) == "summarize_archive"
    assert policy_for("web.fetch", "redundant", CFG) == "drop"
    assert policy_for("web.fetch", "informative", CFG) == "keep_full"
    assert policy_for("react.read", "critical", CFG) == "keep_full"
    tuned = replace(CFG, retention_by_tool=(("web.*", "keep_structured"), ("*", "drop")))
    assert policy_for("web.fetch", "verbose", tuned) == "keep_structured"  # first match wins
    assert policy_for("react.read", "critical", tuned) == "drop"  # an override beats the class


def test_summarize_object_is_the_originals_structured_preview() -> None:
    assert summarize_object("a" * 300) == "a" * 240 + "..."
    assert summarize_object([1, "two", {"k": 3}, 4]) == 'array(length=4) 1 | two | {"k": 3}'
    data = {f"k{i}": "v" * 100 for i in range(8)}
    text = summarize_object(data)
    assert text.startswith("object(keys=8) k0=" + "v" * 80 + "...; k1=")
    assert "k5=" in text and "k6=" not in text


def test_replacement_texts_name_the_path_that_reopens_the_result() -> None:
    block = Block.new(TOOL_RESULT, "t1", 0.0, data={"rows": [1, 2, 3], "status": "ok"})
    path = "tc:t1.c1.result"
    archived = replacement("summarize_archive", path=path, tokens=900, block=block, cfg=CFG)
    assert archived == (
        f"ARCHIVED tool result {path} (900 tokens): object(keys=2) rows=[1, 2, 3]; status=ok"
        f" — react.read {path} for the full result"
    )
    structured = replacement("keep_structured", path=path, tokens=900, block=block, cfg=CFG)
    assert structured is not None and structured.startswith(f"STRUCTURED tool result {path}")
    dropped = replacement("drop", path=path, tokens=900, block=block, cfg=CFG)
    assert (
        dropped
        == f"DROPPED tool result {path} (900 tokens) — react.read {path} for the full result"
    )
    assert replacement("keep_full", path=path, tokens=900, block=block, cfg=CFG) is None


def test_an_archived_view_keeps_the_results_canonical_facts() -> None:
    """A ``LABEL|k=v`` line in the middle of a verbose result (a JSON result's content, as
    external tools write it) survives into its archived and structured views."""
    content = f"{words(450)}\nPLANTED|code=F07|value=amber-4412\n{words(450)}"
    block = Block.new(TOOL_RESULT, "t1", 1.0, path="tc:t1.c1.result", data={"content": content})
    block.text = json.dumps(block.data)
    archived = replacement("summarize_archive", path=block.path, tokens=1350, block=block, cfg=CFG)
    assert archived is not None and "planted.f07.value=amber-4412" in archived
    structured = replacement("keep_structured", path=block.path, tokens=1350, block=block, cfg=CFG)
    assert structured is not None and "facts: planted.f07.code=F07" in structured
    plain = replace(block, data={"content": words(900)})
    archived = replacement("summarize_archive", path=block.path, tokens=1350, block=plain, cfg=CFG)
    assert archived is not None and "facts:" not in archived


@pytest.mark.parametrize(
    ("field", "value", "words_in_error"),
    [
        ("retention_verbose", "archive", "retention_verbose"),
        ("retention", "yes", "retention must be true or false"),
        ("retention_batch", "4", "retention_batch must be a number"),
        ("retention_recent_results", -1, "retention_recent_results must be >= 0"),
        ("retention_critical_tools", "react.read", "retention_critical_tools"),
        ("retention_by_tool", (("web.*", "zip"),), "retention_by_tool['web.*']"),
        ("retention_by_tool", (("web.*",),), "not a (pattern, policy) pair"),
    ],
)
def test_bad_retention_settings_are_refused_by_name(
    field: str, value: Any, words_in_error: str
) -> None:
    with pytest.raises(TimelineError, match=re.escape(words_in_error)):
        TimelineConfig(**{field: value})


def test_retention_settings_from_a_profile_file_become_tuples() -> None:
    cfg = TimelineConfig(
        retention_critical_tools=["react.read"],  # type: ignore[arg-type]
        retention_by_tool={"web.*": "drop"},  # type: ignore[arg-type]
    )
    assert cfg.retention_critical_tools == ("react.read",)
    assert cfg.retention_by_tool == (("web.*", "drop"),)
    assert hash(cfg)


# -- the recency window and batching ---------------------------------------------------------------


def test_the_newest_results_stay_whole_and_older_ones_are_archived_by_path() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 10)
    renderer = Renderer(b.tl, CFG)
    result = render(renderer, b)
    outcome = result.events.retention
    old = [tc_path("t1", f"c{i}", "result") for i in range(4)]
    assert outcome.status == "retained" and outcome.retained == tuple(old)
    assert outcome.policies == (("summarize_archive", 4),)
    assert outcome.tokens_saved > 4 * 1200
    assert hidden_paths(b.tl) == old  # the newest six stay whole
    shown = "\n".join(texts(result))
    assert f"ARCHIVED tool result {old[0]} (1,350 tokens): lorem lorem" in shown
    assert f"react.read {old[0]} for the full result" in shown
    assert shown.count(BIG) == 6
    info = retained_info(b.tl.blocks_at(old[0])[0])
    assert info == {
        "class": "verbose",
        "policy": "summarize_archive",
        "tokens": 1350,
        "tool": "web.search",
    }


def test_results_wait_for_a_batch_then_go_together() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 9)  # 3 outside the window of 6: fewer than a batch of 4
    renderer = Renderer(b.tl, replace(CFG, retention_batch=4))
    first = render(renderer, b).events.retention
    assert first == RetentionOutcome("waiting", pending=3)
    assert hidden_paths(b.tl) == []
    rounds(b, 1, start=9)
    second = render(renderer, b).events.retention
    assert second.status == "retained" and len(second.retained) == 4
    assert render(renderer, b).events.retention.status == "none"  # nothing is redone


def test_results_the_model_has_not_seen_yet_are_never_retained() -> None:
    """The original archived the freshest batch; here the round rendered now stays whole
    even with no recency window at all."""
    cfg = replace(CFG, retention_recent_results=0)
    b = Build()
    b.turn("t1")
    renderer = Renderer(b.tl, cfg)
    render(renderer, b)
    rounds(b, 3)  # appended after that render: the round being rendered now
    assert render(renderer, b).events.retention.status == "none"
    assert hidden_paths(b.tl) == []
    rounds(b, 1, start=3)
    outcome = render(renderer, b).events.retention
    assert outcome.retained == tuple(tc_path("t1", f"c{i}", "result") for i in range(3))


def test_critical_and_informative_results_stay_whole_under_the_defaults() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 5, tool="react.read")
    rounds(b, 5, tool="web.search", text=words(40), start=5)
    rounds(b, 6, tool="web.search", start=10)
    render(Renderer(b.tl, CFG), b)
    assert hidden_paths(b.tl) == []


def test_keep_structured_and_drop_by_profile_and_by_tool() -> None:
    cfg = replace(
        CFG,
        retention_informative="keep_structured",
        retention_by_tool=(("web.fetch", "drop"),),
    )
    b = Build()
    b.turn("t1")
    rows = json.dumps({"rows": [{"id": i, "name": words(20)} for i in range(20)]})
    rounds(b, 1, tool="db.query", text=rows)
    rounds(b, 1, tool="web.fetch", text=BIG, start=1)
    rounds(b, 6, tool="react.plan", text=words(30), start=2)
    result = render(Renderer(b.tl, cfg), b)
    shown = "\n".join(texts(result))
    query, fetch = tc_path("t1", "c0", "result"), tc_path("t1", "c1", "result")
    assert f"STRUCTURED tool result {query} (" in shown
    assert 'object(keys=1) rows=[{"id": 0, "name": "lorem lorem' in shown
    assert f"DROPPED tool result {fetch} (1,350 tokens) — react.read {fetch}" in shown
    assert dict(result.events.retention.policies) == {"keep_structured": 1, "drop": 1}


def test_a_small_result_is_not_replaced_by_a_longer_marker() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 8, text="ok")  # redundant -> drop, but the marker would be longer
    assert render(Renderer(b.tl, CFG), b).events.retention.status == "none"
    assert hidden_paths(b.tl) == []


def test_retention_off_leaves_every_result_whole() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 12)
    result = render(Renderer(b.tl, replace(CFG, retention=False)), b)
    assert result.events.retention.status == "disabled" and hidden_paths(b.tl) == []


# -- no double handling ------------------------------------------------------------------------


def test_a_model_hidden_result_is_left_alone() -> None:
    b = Build()
    b.turn("t1")
    renderer = Renderer(b.tl, CFG)
    rounds(b, 2)
    render(renderer, b)
    hidden = renderer.hide(tc_path("t1", "c1", "result"), "not needed")
    assert hidden.status == "ok"
    rounds(b, 8, start=2)
    outcome = render(renderer, b).events.retention
    assert tc_path("t1", "c1", "result") not in outcome.retained
    block = b.tl.blocks_at(tc_path("t1", "c1", "result"))[0]
    assert block.replacement.startswith("[hidden by react.hide") and retained_info(block) is None


def test_ttl_pruned_results_are_left_alone_and_a_cold_cache_retains_without_a_batch() -> None:
    cfg = TimelineConfig(
        cache_ttl_seconds=300, keep_recent_turns=2, retention_batch=100, context_policy="append"
    )
    b = Build()
    renderer = Renderer(b.tl, cfg)
    for turn in ("t1", "t2", "t3"):
        b.turn(turn)
        rounds(b, 4)
        assert render(renderer, b).events.retention.status in ("none", "waiting")
    assert hidden_paths(b.tl) == []
    b.clock += 600  # the provider cache went cold: TTL prunes, retention goes without a batch
    result = render(renderer, b)
    assert result.events.ttl.status == "pruned"
    retained = set(result.events.retention.retained)
    pruned = set(result.events.ttl.hidden_paths)
    assert retained and pruned and not retained & pruned
    assert retained == {tc_path("t2", f"c{i}", "result") for i in range(2)}
    for path in pruned:
        assert retained_info(b.tl.blocks_at(path)[0]) is None


def test_a_reopened_result_is_not_retained_again(tmp_path: Path) -> None:
    """react.read of an archived result copies its full text to the tail once; the archived
    block keeps its short view (the cached prefix is not rewritten) and is not redone."""
    b = Build()
    b.turn("t1")
    rounds(b, 10)
    renderer = Renderer(b.tl, CFG)
    render(renderer, b)
    path = tc_path("t1", "c0", "result")
    assert renderer.hide(path, "x").status == "not_found"  # already out of the view
    tools = ReactTools()
    ctx = ReactContext(b.tl, renderer, "t1", "r1", b.at())
    outcome = tools.run("react.read", {"paths": [path]}, ctx)
    assert outcome.result["paths"] == [
        {"path": path, "status": "read", "tokens": 1350, "source": "archive"}
    ]
    b.add(TOOL_CALL, path=tc_path("t1", "r1", "call"), call_id="r1", data={"tool": "react.read"})
    b.tl.extend(outcome.to_blocks(ctx))
    original, copy = b.tl.blocks_at(path)
    assert original.hidden and not copy.hidden and copy.content == BIG
    assert resolve(b.tl, path).text.startswith(BIG)  # the timeline read API: the full text
    shown = "\n".join(texts(render(renderer, b)))
    # the copy is in the window now, so c4 left it: c5..c9 and the copy are whole
    assert shown.count(BIG) == 6 and f"ARCHIVED tool result {path}" in shown
    assert f"ARCHIVED tool result {tc_path('t1', 'c4', 'result')}" in shown
    again = tools.run(
        "react.read", {"paths": [path]}, ReactContext(b.tl, renderer, "t1", "r2", b.at())
    )
    assert again.result["paths"][0]["status"] == "visible"
    assert renderer.hide(path, "done").status == "ok"  # the copy in the tail can be hidden
    rounds(b, 12, start=10)
    render(renderer, b)
    assert original.replacement.startswith("ARCHIVED") and copy.replacement.startswith("[hidden")


def test_the_offline_summary_lists_archived_results_with_their_size() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 10)
    render(Renderer(b.tl, CFG), b)
    text = OfflineSummarizer().summarize(SummaryRequest(b.tl.blocks, max_tokens=2000))
    assert f"- {tc_path('t1', 'c0', 'result')} (summarize_archive, 1350 tokens)" in text


# -- compaction and persistence ----------------------------------------------------------------


def test_retaining_what_waits_can_spare_a_compaction() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 9)  # 3 waiting: no batch yet
    cfg = replace(CFG, max_tokens=13_000, retention_batch=4)  # ceiling 11,700; ~12,400 shown
    renderer = Renderer(b.tl, cfg)
    result = render(renderer, b)
    assert result.events.compaction is None and result.events.retention.status == "retained"
    assert result.stable_tokens < 11_700 and b.tl.latest_summary is None
    assert len(result.events.retention.retained) == 3


def test_plan_compaction_retains_first_and_needs_no_summary_when_that_is_enough() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 9)
    renderer = Renderer(b.tl, replace(CFG, max_tokens=13_000, retention_batch=4))
    assert renderer.plan_compaction(now=b.at()) is None
    assert len(hidden_paths(b.tl)) == 3 and renderer.stable_tokens < 11_700
    assert renderer.plan_compaction(now=b.at(), force=True) is not None


def test_the_retained_view_survives_a_store_reload(tmp_path: Path) -> None:
    b = Build(Timeline("conv"))
    b.turn("t1")
    rounds(b, 4)
    with Store(tmp_path / "db") as store:
        store.persist(b.tl)  # the results are stored whole first
        rounds(b, 6, start=4)
        renderer = Renderer(b.tl, CFG)
        before = texts(render(renderer, b))
        store.persist(b.tl)  # the restyled results are rewritten
        loaded = store.load("conv").timeline
    path = tc_path("t1", "c0", "result")
    block = loaded.blocks_at(path)[0]
    assert block.hidden and block.replacement.startswith(f"ARCHIVED tool result {path}")
    assert retained_info(block) == retained_info(b.tl.blocks_at(path)[0])
    assert block.content == BIG
    after = Renderer(loaded, CFG).render(now=b.at(), include_sources=False, include_announce=False)
    assert texts(after) == before
    assert after.events.retention.status == "none"  # not redone after the reload


def test_a_pass_without_renderer_state_scans_the_whole_window() -> None:
    b = Build()
    b.turn("t1")
    rounds(b, 11)
    outcome = apply(b.tl, CFG, counter=DEFAULT_COUNTER)
    assert len(outcome.retained) == 5
