"""Structured summaries (parse, render, integrity) and the memory fact book."""

from __future__ import annotations

from actline.timeline import Timeline
from actline.timeline.editing.summary import SummaryRequest, offline_record
from actline.timeline.facts import (
    Fact,
    FactBook,
    StructuredSummary,
    canonical_facts,
    check_integrity,
    extract_json,
    fact_key,
    note_facts,
    parse_summary,
)

from .builders import Build


def test_json_is_taken_from_a_fence_else_from_the_outer_braces() -> None:
    assert extract_json('text ```json\n{"a": 1}\n``` more {"b": 2}') == '{"a": 1}'
    assert extract_json('Sure: {"a": {"b": 1}} thanks') == '{"a": {"b": 1}}'
    assert extract_json("no json here") is None


def test_parse_normalizes_keys_defaults_confidence_and_reads_the_aliases() -> None:
    parsed = parse_summary(
        '{"stable_facts": [{"key": "Deploy Region", "value": "eu"}, {"value": "no key"},'
        ' {"key": "x", "value": "y", "confidence": 0.95}], "obsolete_discarded": ["db: mysql"],'
        ' "rawSummary": "narrative", "active_goals": "one goal"}'
    )
    assert parsed is not None
    assert [(f.key, f.value, f.confidence) for f in parsed.stable_facts] == [
        ("deploy_region", "eu", 0.7),
        ("x", "y", 0.95),
    ]
    assert parsed.discarded == ("db: mysql",) and parsed.raw_summary == "narrative"
    assert parsed.active_goals == ("one goal",)
    assert parse_summary("[1, 2]") is None and parse_summary("{not json}") is None
    assert parse_summary('{"rawSummary": "only prose"}') == StructuredSummary(
        raw_summary="only prose"
    )  # no fact_i lines made from the text


def test_render_omits_empty_sections() -> None:
    summary = StructuredSummary(
        (Fact("region", "eu"),), open_questions=("which db?",), raw_summary="See tc:t1.c1.result."
    )
    assert summary.render() == (
        "Context summary:\nStable facts:\n- region: eu\nOpen questions:\n- which db?\n"
        "Narrative:\nSee tc:t1.c1.result."
    )
    assert StructuredSummary.from_dict(summary.to_dict()) == summary


def test_canonical_facts_from_tool_output_lines() -> None:
    text = "PROJECT|code=ALPHA|budget=100|owner=ann\nnot|a=line\nSTATUS|ok\nTASK_2|state=open"
    facts = {f.key: f for f in canonical_facts(text, turn_id="t1", path="tc:t1.c1.result")}
    assert set(facts) == {
        "project.alpha.code",
        "project.alpha.budget",
        "project.alpha.owner",
        "task_2.state",
    }
    assert facts["project.alpha.budget"].value == "100"
    assert facts["project.alpha.budget"].confidence == 0.98
    assert facts["task_2.state"].path == "tc:t1.c1.result"


def test_note_facts_read_k_lines_only() -> None:
    facts = note_facts("[D] go\n[K] Deploy region: eu-west-1\n[K] owner = ann\n[K] no value")
    assert [(f.key, f.value) for f in facts] == [("deploy_region", "eu-west-1"), ("owner", "ann")]
    assert fact_key(" Deploy-Region ") == "deploy_region"


def test_integrity_re_adds_lost_facts_and_removes_revived_ones() -> None:
    previous = StructuredSummary(
        (Fact("region", "eu"), Fact("owner", "ann"), Fact("stage", "beta")),
        discarded=("database: mysql",),
    )
    new = StructuredSummary(
        (Fact("database", "mysql"), Fact("owner", "bob"), Fact("cache", "redis")),
        discarded=("stage", "cache: memcached"),
    )
    repaired, report = check_integrity(new, previous)
    assert report.lost_readded == ("region",)  # stage is discarded; owner has a new value
    assert report.revived_removed == ("database",)
    assert [(f.key, f.value) for f in repaired.stable_facts] == [
        ("owner", "bob"),
        ("cache", "redis"),
        ("region", "eu"),
    ]
    # A revived old value does not take its key away: the previous value comes back.
    again, fixed = check_integrity(
        StructuredSummary((Fact("region", "eu"),)),
        StructuredSummary((Fact("region", "us"),), discarded=("region: eu",)),
    )
    assert [(f.key, f.value) for f in again.stable_facts] == [("region", "us")]
    assert (fixed.lost_readded, fixed.revived_removed) == (("region",), ("region",))
    clean, nothing = check_integrity(repaired, repaired)
    assert clean == repaired and not nothing.repaired


def test_the_offline_record_carries_note_and_tool_facts_and_the_previous_ones() -> None:
    b = Build()
    b.turn("t1")
    b.note("[K] region: eu\n[K] region: us")
    b.tool("c1", "PROJECT|id=7|owner=ann")
    previous = StructuredSummary((Fact("team", "core"),))
    record, report = offline_record(SummaryRequest(list(b.tl.blocks)), previous)
    values = {f.key: f.value for f in record.stable_facts}
    assert values == {"region": "us", "project.7.id": "7", "project.7.owner": "ann", "team": "core"}
    assert record.discarded == ("region: eu",) and report.lost_readded == ("team",)


def test_a_new_value_supersedes_and_the_same_value_refreshes() -> None:
    book = FactBook()
    book.upsert(Fact("region", "eu", 0.6, "note", "t1", "ar:t1.react.note.c1", 10.0), now=10.0)
    book.upsert(Fact("Region", "eu", 0.9, "summary", "t2", "su:t2.conv.range.summary", 20), now=20)
    (fact,) = book.active()
    assert (fact.confidence, fact.turn_id, fact.ts, fact.updated_at) == (0.9, "t2", 20.0, 20.0)
    book.upsert(Fact("region", "us", 0.7, "note", "t3", "ar:t3.react.note.c2", 30.0), now=30.0)
    assert [f.line() for f in book.active()] == ["region: us (turn t3)"]
    old, new = book.history("region")
    assert (old.value, old.status, old.superseded_by) == ("eu", "obsolete", "t3")
    assert new.status == "active"
    # A value stated before the active one (an older summary) is kept, but obsolete.
    book.upsert(Fact("region", "apac", 0.99, "summary", "t1", "", 15.0), now=40.0)
    assert book.current("region").value == "us"  # type: ignore[union-attr]
    assert {f.value: f.status for f in book.history("region")}["apac"] == "obsolete"


def test_relevance_prefers_key_overlap_then_recency() -> None:
    book = FactBook()
    for i, (key, value) in enumerate(
        [
            ("deploy region", "eu-west-1"),
            ("database", "postgres"),
            ("owner", "ann"),
            ("budget", "100 euros"),
            ("deadline", "friday"),
        ]
    ):
        book.upsert(Fact(key, value, ts=float(i)), now=float(i))
    assert [f.key for f in book.relevant("Which region do we deploy to?", 2)] == [
        "deploy_region",
        "deadline",  # no overlap: the newest fills the rest
    ]
    assert [f.key for _, f in book.search("postgres database", 5)] == ["database"]
    assert book.hotset("the budget", 1) == ["budget: 100 euros"]
    assert book.relevant("anything", 0) == []


def test_facts_persist_as_rows_with_the_timeline() -> None:
    b = Build()
    b.turn("t1")
    b.tl.facts.upsert(Fact("region", "eu", turn_id="t1", ts=1.0), now=1.0)
    rows = b.tl.take_row_changes()
    assert [k for k in rows if k.startswith("fact/")] and b.tl.take_row_changes() == {}
    b.tl.facts.upsert(Fact("region", "us", turn_id="t1", ts=2.0), now=2.0)
    changed = b.tl.take_row_changes()
    assert len(changed) == 2  # the new fact, and the old one marked obsolete
    b.tl.requeue_row_changes(changed)
    assert b.tl.take_row_changes() == changed
    restored = Timeline.restore(b.tl.snapshot(), b.tl.blocks, rows={**rows, **changed})
    assert [f.line() for f in restored.facts.active()] == ["region: us (turn t1)"]
    assert len(restored.facts.history("region")) == 2
