"""react.search_knowledge and react.read: knowledge documents, refusals, and blocks read back
from the timeline, the store, the pool and the turn indexes."""

from __future__ import annotations

from typing import Any

import pytest

from actline.storage import Store, Workspace
from actline.timeline.blocks import COMPLETION, NOTICE, SUMMARY, TOOL_RESULT, USER_PROMPT
from actline.timeline.paths import ar_path
from actline.tools import KnowledgeSpace

from .conversation import Conv, codes, refused, rounds

# -- react.search_knowledge ----------------------------------------------------------------------


def test_search_knowledge_returns_ranked_hits_with_ks_paths(kb: KnowledgeSpace) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    out = conv.run("react.search_knowledge", {"query": "default retention", "top_k": 3})
    assert out.ok and out.blocks == [] and out.notices == []
    hits = out.result["hits"]
    assert 1 <= len(hits) <= 3
    assert hits[0]["path"] == "ks:config/retention.md"
    assert hits[0]["title"] and hits[0]["url"].startswith("https://")
    assert hits[0]["snippet"] and hits[0]["score"] >= hits[-1]["score"]


def test_search_knowledge_without_a_knowledge_space_is_unavailable() -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.search_knowledge", {"query": "retention"})
    assert refused(out, "knowledge_unavailable") and not out.ok


@pytest.mark.parametrize("params", [{"query": ""}, {"query": "x", "top_k": 0}, {"query": 3}])
def test_search_knowledge_with_bad_params_is_refused(
    kb: KnowledgeSpace, params: dict[str, Any]
) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    assert refused(conv.run("react.search_knowledge", params), "bad_params")


# -- react.read: knowledge documents -------------------------------------------------------------


def test_reading_a_ks_document_adds_it_to_the_pool_with_the_sid_line(kb: KnowledgeSpace) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    out = conv.run("react.read", {"paths": ["ks:config/retention.md"]})
    assert out.ok and out.result["found"] == ["ks:config/retention.md"]
    [block] = out.blocks
    assert (block.type, block.path, block.call_id) == (TOOL_RESULT, "ks:config/retention.md", "c1")
    doc = kb.read("ks:config/retention.md")
    assert block.text == f"[S:1] {doc.title} — {doc.url}\n{doc.text}"
    [row] = conv.tl.sources.rows()
    assert (row.sid, row.url, row.title) == (1, doc.url, doc.title)
    assert out.result["paths"][0]["sid"] == 1 and out.result["paths"][0]["tokens"] > 0


def test_reading_a_ks_document_twice_keeps_its_sid_and_adds_no_second_block(
    kb: KnowledgeSpace,
) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    conv.run("react.read", {"paths": ["ks:config/retention.md"]})
    again = conv.run("react.read", {"paths": ["ks:config/retention.md", "ks:pricing/tiers.md"]})
    assert again.ok
    assert again.result["exists_in_visible_context"] == ["ks:config/retention.md"]
    assert again.result["found"] == ["ks:pricing/tiers.md"]
    assert again.result["paths"][0] == {
        "path": "ks:config/retention.md",
        "status": "visible",
        "sid": 1,
    }
    assert [b.path for b in again.blocks] == ["ks:pricing/tiers.md"]
    assert again.blocks[0].text.startswith("[S:2] Pricing tiers — ")
    assert len(conv.tl.blocks_at("ks:config/retention.md")) == 1
    assert [r.sid for r in conv.tl.sources.rows()] == [1, 2]


def test_a_ks_document_before_the_summary_is_read_again_with_the_same_sid(
    kb: KnowledgeSpace,
) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    conv.run("react.read", {"paths": ["ks:config/retention.md"]})
    conv.begin("t2")
    conv.add(SUMMARY, "su:t2.conv.range.summary", "earlier: read the retention page")
    out = conv.run("react.read", {"paths": ["ks:config/retention.md"]})
    assert out.ok and [b.turn_id for b in out.blocks] == ["t2"]
    assert out.blocks[0].text.startswith("[S:1] ")
    assert len(conv.tl.sources) == 1


def test_ks_reads_without_a_knowledge_space_are_missing_and_say_why() -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.read", {"paths": ["ks:config/retention.md"]})
    assert out.result["status"] == "error"
    assert codes(out) == ["knowledge_unavailable", "read_paths_missing"]


def test_a_ks_path_that_names_no_document_is_missing(kb: KnowledgeSpace) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    out = conv.run("react.read", {"paths": ["ks:config/nope.md", "ks:config/retention.md"]})
    assert out.result["status"] == "partial"
    assert out.result["missing"] == ["ks:config/nope.md"]
    assert codes(out) == ["read_paths_missing"]
    assert "ks:config/nope.md (not_found)" in out.notices[0].message


# -- react.read: refusals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("/etc/passwd", "absolute_path"),
        ("C:\\x", "absolute_path"),
        ("../x", "physical_path"),
        ("src/app.py", "physical_path"),
        ("ks:../secrets.md", "dot_segment"),
        ("fi:t1.files/a/../../b", "dot_segment"),
    ],
)
def test_physical_and_dot_dot_paths_are_refused_as_bad_paths(
    kb: KnowledgeSpace, path: str, rule: str
) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    out = conv.run("react.read", {"paths": [path]})
    assert refused(out, "bad_path")
    assert out.result["paths"] == [{"path": path, "status": "invalid", "rule": rule}]
    assert out.blocks == []


def test_a_missing_path_gives_a_read_paths_missing_notice() -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.read", {"paths": ["ar:t1.nothing.here", "tc:t9.c1.result"]})
    assert refused(out, "read_paths_missing")
    assert out.result["missing"] == ["ar:t1.nothing.here", "tc:t9.c1.result"]
    notice = conv.tl.blocks_at("tc:t1.c1.notice")
    assert [b.type for b in notice] == [NOTICE]
    assert notice[0].text.startswith("read_paths_missing: Nothing found at: ar:t1.nothing.here")


@pytest.mark.parametrize(
    "paths", [[], "", [3], None, [f"ar:t1.note.{i}" for i in range(11)], ["ar:t1.a", ""]]
)
def test_read_params_that_are_not_one_to_ten_paths_are_refused(paths: Any) -> None:
    conv = Conv()
    conv.begin("t1")
    assert refused(conv.run("react.read", {"paths": paths}), "bad_params")


# -- react.read: timeline, store, pool and turn index --------------------------------------------


def test_a_path_already_visible_is_reported_and_not_duplicated() -> None:
    conv = Conv()
    conv.begin("t1", "What is the retention?")
    out = conv.run("react.read", {"paths": ["ar:t1.user.prompt"]})
    assert out.ok and out.blocks == []
    assert out.result["exists_in_visible_context"] == ["ar:t1.user.prompt"]


def test_a_hidden_block_read_again_becomes_visible() -> None:
    conv = Conv()
    conv.begin("t1")
    rounds(conv, 6)
    big = conv.add(TOOL_RESULT, "tc:t1.big.result", "x" * 4000, call_id="big")
    hide = conv.run("react.hide", {"path": "tc:t1.big.result", "replacement": "raw dump"})
    assert hide.ok and big.hidden
    out = conv.run("react.read", {"paths": ["tc:t1.big.result"]})
    assert out.ok and out.blocks == [] and not big.hidden
    assert out.result["paths"][0]["status"] == "restored"
    assert out.result["found"] == ["tc:t1.big.result"]
    text = conv.renderer.render(now=conv.tick()).text()
    assert "x" * 4000 in text


def test_a_block_before_the_summary_is_shown_again_as_a_copy() -> None:
    conv = Conv()
    conv.begin("t1", "the old question")
    conv.begin("t2")
    conv.add(SUMMARY, "su:t2.conv.range.summary", "summary of t1")
    out = conv.run("react.read", {"paths": ["ar:t1.user.prompt"]})
    assert out.ok
    [copy] = out.blocks
    assert (copy.type, copy.path, copy.turn_id, copy.text) == (
        TOOL_RESULT,
        "ar:t1.user.prompt",
        "t2",
        "the old question",
    )
    assert copy.meta["read_from"] == "timeline" and copy.meta["origin_type"] == USER_PROMPT


def test_a_block_only_in_the_store_is_read_from_the_store(store: Store) -> None:
    old = Conv(store=store)
    old.begin("t1", "stored question")
    old.add(COMPLETION, ar_path("t1", "assistant.completion"), "stored answer")
    store.persist(old.tl)
    conv = Conv(store=store)  # a view that no longer holds turn t1
    conv.begin("t2")
    out = conv.run("react.read", {"paths": ["ar:t1.assistant.completion"]})
    assert out.ok and out.result["paths"][0]["source"] == "store"
    assert [b.text for b in out.blocks] == ["stored answer"]
    assert out.blocks[0].meta["origin_turn_id"] == "t1"


def test_a_workspace_file_is_read_through_the_store(store: Store) -> None:
    conv = Conv(store=store)
    conv.begin("t1")
    Workspace(store, "c1").write("t1", "files", "notes/a.md", b"# Notes\nhello")
    out = conv.run("react.read", {"paths": ["fi:t1.files/notes/a.md"]})
    assert out.ok and out.blocks[0].text == "# Notes\nhello"


def test_pool_rows_and_turn_indexes_are_read_by_path(kb: KnowledgeSpace) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    conv.run("react.read", {"paths": ["ks:pricing/tiers.md"]})
    out = conv.run(
        "react.read",
        {"paths": ["so:sources_pool[1]", "ar:t1.react.turn.index", "so:sources_pool[9]"]},
    )
    assert out.result["status"] == "partial"
    pool, index = out.blocks
    assert pool.text.startswith("[S:1] Pricing tiers — https://")
    assert index.text.startswith("TURN INDEX t1") and "[S:1] Pricing tiers" in index.text
    assert out.result["missing"] == ["so:sources_pool[9]"]
    again = conv.run("react.read", {"paths": ["so:sources_pool[1]"]})
    assert again.ok and again.blocks == []
