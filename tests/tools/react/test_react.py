"""The in-loop react.* tools on a real timeline, renderer, store and the examples/kb space."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.storage import Store, Workspace
from actline.timeline import Block, Renderer, Timeline
from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    NOTICE,
    SUMMARY,
    TOOL_CALL,
    TOOL_RESULT,
    USER_PROMPT,
)
from actline.timeline.paths import ar_path, tc_path
from actline.tools import KnowledgeSpace
from actline.tools.react.core import Notice, ReactContext, ReactOutcome, ReactTools

KB = Path(__file__).parents[3] / "examples" / "kb"
T0 = 1_800_000_000.0
DAY = 86_400.0
TOOLS = ReactTools()


@pytest.fixture(scope="module")
def kb() -> KnowledgeSpace:
    return KnowledgeSpace(KB)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "db") as opened:
        yield opened


class Conv:
    """A conversation on a timeline: turns, blocks, and calls run as a loop would run them."""

    def __init__(
        self,
        *,
        knowledge: KnowledgeSpace | None = None,
        store: Store | None = None,
        cid: str = "c1",
    ) -> None:
        self.tl = Timeline(cid)
        self.renderer = Renderer(self.tl)
        self.knowledge = knowledge
        self.store = store
        self.now = T0
        self.calls = 0
        self.turn = ""

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now

    def begin(self, turn: str, prompt: str = "question") -> None:
        self.turn = turn
        self.tl.begin_turn(turn, self.tick())
        self.add(USER_PROMPT, ar_path(turn, "user.prompt"), prompt)

    def add(self, block_type: str, path: str, text: str, **fields: Any) -> Block:
        return self.tl.append(
            Block.new(block_type, self.turn, self.tick(), path=path, text=text, **fields)
        )

    def ctx(self, *, renderer: bool = True) -> ReactContext:
        self.calls += 1
        return ReactContext(
            self.tl,
            self.renderer if renderer else None,
            self.turn,
            f"c{self.calls}",
            self.tick(),
            store=self.store,
            knowledge=self.knowledge,
        )

    def run(self, tool: str, params: dict[str, Any], **kwargs: bool) -> ReactOutcome:
        """Run a call and append its call, result, content and notice blocks."""
        ctx = self.ctx(**kwargs)
        path = tc_path(self.turn, ctx.call_id, "call")
        body = {"tool": tool, "params": params}
        self.tl.append(Block.new(TOOL_CALL, self.turn, ctx.now, path=path, data=body))
        outcome = TOOLS.run(tool, params, ctx)
        self.tl.extend(outcome.to_blocks(ctx))
        return outcome


def codes(outcome: ReactOutcome) -> list[str]:
    return [n.code for n in outcome.notices]


def refused(outcome: ReactOutcome, code: str) -> bool:
    return outcome.result["status"] == "error" and codes(outcome) == [code]


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
    _rounds(conv, 6)
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


# -- react.plan ----------------------------------------------------------------------------------


def test_plan_create_update_close_records_snapshots() -> None:
    conv = Conv()
    conv.begin("t1")
    created = conv.run("react.plan", {"mode": "create", "steps": ["Search", "Answer"]})
    assert created.ok and created.result["plan_id"] == "plan_1"
    assert created.result["steps"] == ["□ 1. Search", "□ 2. Answer"]
    assert conv.tl.plans.current is not None
    snapshot = conv.tl.latest_plan_block("plan_1")
    assert snapshot is not None and snapshot.path == "ar:t1.react.plan.plan_1"
    assert snapshot.seq < conv.tl.blocks_at("tc:t1.c1.result")[0].seq
    updated = conv.run("react.plan", {"mode": "update", "steps": ["Search", "Read", "Answer"]})
    assert updated.ok and updated.result["revision"] == 2
    closed = conv.run("react.plan", {"mode": "close", "plan_id": "plan_1"})
    assert closed.ok and closed.result["state"] == "closed"
    assert conv.tl.plans.current is None
    assert len(conv.tl.blocks_at("ar:t1.react.plan.plan_1")) == 3


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"mode": "destroy", "steps": ["a"]}, "plan_mode"),
        ({"mode": 1}, "plan_mode"),
        ({"mode": "create", "steps": "one step"}, "plan_steps"),
        ({"mode": "create", "steps": []}, "plan_steps"),
        ({"mode": "create"}, "plan_steps"),
        ({"mode": "update", "steps": ["a"]}, "plan_target_missing"),
        ({"mode": "close", "plan_id": "nope"}, "plan_target_missing"),
        ({"mode": "close", "plan_id": ["p"]}, "plan_target_required"),
    ],
)
def test_bad_plan_calls_are_refused_with_their_codes(params: dict[str, Any], code: str) -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.plan", params)
    assert refused(out, code)
    assert conv.tl.latest_plan_block("plan_1") is None


# -- react.write ---------------------------------------------------------------------------------


def _note(content: str) -> dict[str, Any]:
    return {"path": "files/notes/n.md", "channel": "internal", "content": content}


def test_an_internal_write_returns_a_note_block_with_its_tag() -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.write", {**_note("[K] retention is 72h"), "scratchpad": True})
    assert out.ok and out.result["path"] == "ar:t1.react.note.c1"
    [note] = out.blocks
    assert (note.type, note.path, note.text) == (
        NOTE,
        "ar:t1.react.note.c1",
        "[K] retention is 72h",
    )
    assert conv.tl.blocks_at("ar:t1.react.note.c1") == [note]


def test_k_notes_are_memory_facts_that_memsearch_finds() -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run("react.write", _note("[K] retention: 72h\n[D] keep it"))
    assert out.result["facts"] == ["retention: 72h"]
    conv.begin("t2")
    conv.run("react.write", _note("[K] Retention = 48h"))
    assert [f.line() for f in conv.tl.facts.active()] == ["retention: 48h (turn t2)"]
    assert conv.tl.facts.history("retention")[0].superseded_by == "t2"
    found = conv.run("react.memsearch", {"query": "retention period", "targets": ["facts"]})
    assert found.result["hits"] == []  # only the facts were searched
    [fact] = found.result["facts"]
    assert (fact["key"], fact["value"], fact["turn_id"]) == ("retention", "48h", "t2")
    assert fact["path"] == "ar:t2.react.note.c2"


@pytest.mark.parametrize("channel", ["canvas", "timeline_text"])
def test_a_canvas_or_timeline_write_stores_a_file_of_the_turn(store: Store, channel: str) -> None:
    conv = Conv(store=store)
    conv.begin("t1")
    params = {"path": "outputs/report/summary.md", "channel": channel, "content": "# Sum"}
    out = conv.run("react.write", params)
    assert out.ok and out.result["path"] == "fi:t1.outputs/report/summary.md"
    assert Workspace(store, "c1").read("fi:t1.outputs/report/summary.md") == b"# Sum"
    shown = [b.path for b in out.blocks]
    assert shown == (["fi:t1.outputs/report/summary.md"] if channel == "timeline_text" else [])


def test_a_write_to_another_turns_file_is_rewritten_to_this_turn(store: Store) -> None:
    conv = Conv(store=store)
    conv.begin("t2")
    params = {"path": "fi:t1.files/app/main.txt", "channel": "canvas", "content": "x"}
    out = conv.run("react.write", params)
    assert out.ok and out.result["path"] == "fi:t2.files/app/main.txt"
    assert [n.full_code for n in out.notices] == ["protocol_violation.path_rewritten"]


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "notes/a.md",
        "files/../x.md",
        "files/a.md",
        "files/scope/",
        "C:\\x\\a.md",
        "fi:t1.user.attachments/a.md",
        "files/report/page.exe",
    ],
)
def test_a_write_outside_files_and_outputs_is_refused(store: Store, path: str) -> None:
    conv = Conv(store=store)
    conv.begin("t1")
    out = conv.run("react.write", {"path": path, "channel": "canvas", "content": "x"})
    assert refused(out, "bad_path")
    assert Workspace(store, "c1").turns() == []


def test_a_file_write_without_a_store_is_refused_as_workspace_unavailable() -> None:
    conv = Conv()
    conv.begin("t1")
    params = {"path": "files/a/b.md", "channel": "canvas", "content": "x"}
    assert refused(conv.run("react.write", params), "workspace_unavailable")


@pytest.mark.parametrize(
    "params",
    [
        {"path": "files/a/b.md", "channel": "email", "content": "x"},
        {"path": "files/a/b.md", "channel": "internal", "content": None},
        {"path": "files/a/b.md", "channel": "internal", "content": "x", "kind": "poster"},
    ],
)
def test_write_params_of_the_wrong_kind_are_refused(params: dict[str, Any]) -> None:
    conv = Conv()
    conv.begin("t1")
    assert refused(conv.run("react.write", params), "bad_params")


# -- react.memsearch ---------------------------------------------------------------------------


def _history(store: Store | None = None) -> Conv:
    conv = Conv(store=store)
    conv.begin("t1", "What is the default retention?")
    conv.add(COMPLETION, ar_path("t1", "assistant.completion"), "Retention is 72 hours.")
    conv.tick(40 * DAY)
    conv.begin("t2", "How much does the Team tier cost?")
    conv.add(COMPLETION, ar_path("t2", "assistant.completion"), "The Team tier is $490.")
    conv.add(NOTE, ar_path("t2", "react.note.1"), "[P] the user prefers yearly retention reports")
    conv.begin("t3", "Remind me about retention")
    return conv


def test_memsearch_finds_earlier_turns_and_points_at_their_index() -> None:
    conv = _history()
    params = {"query": "default retention", "targets": ["user", "assistant"], "top_k": 5}
    out = conv.run("react.memsearch", params)
    assert out.ok
    hits = out.result["hits"]
    assert [h["turn_id"] for h in hits] == ["t1"]  # one hit per turn, never the current t3
    assert hits[0]["path"] == "ar:t1.react.turn.index"
    assert hits[0]["snippet"] == "What is the default retention?"
    assert hits[0]["role"] == "user" and hits[0]["block_path"] == "ar:t1.user.prompt"
    assert isinstance(hits[0]["score"], float) and hits[0]["ts"] < conv.now
    everywhere = conv.run("react.memsearch", {"query": "retention reports"})
    assert everywhere.result["targets"] == [
        *["user", "assistant", "notes", "summary", "attachment", "agents"],
        "facts",
    ]
    assert everywhere.result["hits"][0]["turn_id"] == "t2"  # found through its note


def test_memsearch_targets_notes_and_filters_by_days() -> None:
    conv = _history()
    notes = conv.run("react.memsearch", {"query": "retention", "targets": ["notes"]})
    assert [h["block_path"] for h in notes.result["hits"]] == ["ar:t2.react.note.1"]
    recent = conv.run("react.memsearch", {"query": "retention", "targets": ["user"], "days": 7})
    assert recent.ok and recent.result["hits"] == []
    old = conv.run("react.memsearch", {"query": "retention", "targets": ["user"], "days": 60})
    assert [h["turn_id"] for h in old.result["hits"]] == ["t1"]


def test_memsearch_reads_index_rows_of_turns_no_longer_on_the_timeline(store: Store) -> None:
    row = {"turn_id": "t0", "role": "user", "ts": T0 - 10, "text": "archived retention question"}
    store.append_turn("c1", [], {"version": 1}, index_rows=[row])
    conv = _history(store)
    out = conv.run("react.memsearch", {"query": "archived retention", "top_k": 1})
    assert [h["turn_id"] for h in out.result["hits"]] == ["t0"]


@pytest.mark.parametrize("targets", [["assistant", "emails"], [], [1], "calendar"])
def test_memsearch_with_an_unknown_target_is_refused(targets: Any) -> None:
    conv = _history()
    out = conv.run("react.memsearch", {"query": "retention", "targets": targets})
    assert refused(out, "memsearch_bad_target")


# -- react.hide ----------------------------------------------------------------------------------


def _rounds(conv: Conv, n: int, text: str = "result") -> None:
    for i in range(1, n + 1):
        call = f"r{i}"
        conv.add(TOOL_CALL, tc_path(conv.turn, call, "call"), "{}", call_id=call)
        conv.add(TOOL_RESULT, tc_path(conv.turn, call, "result"), text, call_id=call)


def test_hide_replaces_a_tail_block_and_reports_tokens_hidden() -> None:
    conv = Conv()
    conv.begin("t1")
    _rounds(conv, 6, "y" * 4000)
    out = conv.run("react.hide", {"path": "tc:t1.r6.result", "replacement": "seen it"})
    assert out.ok and out.notices == []
    assert out.result["blocks_hidden"] == 1 and out.result["tokens_hidden"] > 900
    assert conv.tl.blocks_at("tc:t1.r6.result")[0].hidden


def test_hide_before_the_cache_point_is_refused_with_its_code() -> None:
    conv = Conv()
    conv.begin("t1")
    _rounds(conv, 6)
    out = conv.run("react.hide", {"path": "tc:t1.r1.result", "replacement": ""})
    assert refused(out, "hide_before_cache")
    assert out.result["hide_status"] == "too_old" and out.result["before_cache"] is True
    assert not any(b.hidden for b in conv.tl)


@pytest.mark.parametrize(
    ("path", "code"), [("tc:t1.nope.result", "hide_failed"), ("/etc/passwd", "bad_path")]
)
def test_hide_of_an_unknown_or_physical_path_is_refused(path: str, code: str) -> None:
    conv = Conv()
    conv.begin("t1")
    _rounds(conv, 6)
    assert refused(conv.run("react.hide", {"path": path}), code)


def test_hide_without_a_renderer_is_refused() -> None:
    conv = Conv()
    conv.begin("t1")
    _rounds(conv, 6)
    out = conv.run("react.hide", {"path": "tc:t1.r6.result"}, renderer=False)
    assert refused(out, "hide_failed")


# -- dispatch ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["agent.send", "react.nope", "code.exec_python"])
def test_a_tool_that_is_not_react_is_unavailable_here(tool: str) -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run(tool, {"paths": ["fi:t1.files/a/b.md"]})
    assert refused(out, "tool_unavailable")
    assert "is not a react.* tool" in out.notices[0].message


def test_params_that_are_not_an_object_are_refused() -> None:
    conv = Conv()
    conv.begin("t1")
    out = TOOLS.run("react.read", ["ks:a.md"], conv.ctx())  # type: ignore[arg-type]
    assert refused(out, "bad_params")


def test_the_outcome_blocks_are_result_then_content_then_notices(kb: KnowledgeSpace) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    ctx = conv.ctx()
    out = TOOLS.run("react.read", {"paths": ["ks:pricing/tiers.md", "ks:nope.md"]}, ctx)
    blocks = out.to_blocks(ctx)
    assert [(b.type, b.path) for b in blocks] == [
        (TOOL_RESULT, "tc:t1.c1.result"),
        (TOOL_RESULT, "ks:pricing/tiers.md"),
        (NOTICE, "tc:t1.c1.notice"),
    ]
    assert blocks[0].data == out.result and blocks[0].data["status"] == "partial"
    assert all(b.ts == ctx.now and b.call_id == "c1" for b in blocks)


def test_protocol_codes_are_prefixed_and_tool_codes_are_not() -> None:
    assert Notice("plan_mode", "m").full_code == "protocol_violation.plan_mode"
    assert Notice("read_paths_missing", "m").full_code == "read_paths_missing"
    assert TOOLS.names == {
        "react.read",
        "react.write",
        "react.plan",
        "react.hide",
        "react.memsearch",
        "react.search_knowledge",
        "react.pull",
        "react.patch",
        "react.checkout",
        "react.search_files",
    }
