"""Properties of the timeline over random conversations and operations (Hypothesis).

A state machine drives one timeline through turns, tool rounds (some results
arriving late), notes, followups, streamed completions, plans, sources, hides,
unhides, TTL expiries and forced compactions, rendering with one long-lived
incremental renderer. After every step it checks the invariants of the issue:
render order, marks, hide floors, compaction safety, reachability, stable SIDs,
and that the incremental render equals a full render.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from actline.timeline import (
    Block,
    Renderer,
    RenderResult,
    SourceRow,
    Timeline,
    TimelineConfig,
    resolve,
)
from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    NOTE_PRESERVED,
    PLAN,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_FOLLOWUP,
    USER_FOLLOWUP_PRESERVED,
    USER_PROMPT,
)
from actline.timeline.paths import ar_path, tc_path

T0 = 1_800_000_000.0
TEXT = st.text(alphabet="abcdefghij klmnop\n", min_size=0, max_size=600)
URLS = st.sampled_from(
    [
        "https://a.example/x",
        "https://A.example/x/",
        "https://a.example/x#frag",
        "https://a.example/x?utm_source=q",
        "http://b.example:80/",
        "https://c.example/page?id=1",
        "https://c.example/page?id=2",
    ]
)


class TimelineMachine(RuleBasedStateMachine):
    """One conversation under random operations, rendered incrementally."""

    @initialize(
        max_tokens=st.sampled_from([0, 1200, 2500]),
        offset=st.integers(1, 5),
        tail_limit=st.sampled_from([0, 300, 2000]),
    )
    def start(self, max_tokens: int, offset: int, tail_limit: int) -> None:
        self.cfg = TimelineConfig(
            max_tokens=max_tokens,
            cache_point_offset_rounds=offset,
            hide_max_tail_tokens=tail_limit,
            keep_recent_turns=2,
            keep_recent_intact_turns=1,
            light_prune_result_tokens=60,
        )
        self.tl = Timeline("c")
        self.renderer = Renderer(self.tl, self.cfg)
        self.now = T0
        self.turns = 0
        self.calls = 0
        self.pending: list[tuple[str, str]] = []
        self.sids: dict[int, str] = {}
        self.appended: list[Block] = []
        self.last: RenderResult | None = None
        self.rows: dict[str, object] = {}
        """Every header row taken so far, later takes winning: what a store holds."""
        self.new_turn()

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now

    @property
    def turn(self) -> str:
        return f"t{self.turns}"

    def add(self, block: Block) -> Block:
        rendered = self.tl.rendered_block
        self.appended.append(self.tl.append(block))
        if rendered is not None:  # a block arriving after a render lands after all it showed
            assert self.tl.index_of(block) > self.tl.index_of(rendered)
        return block

    # -- operations --------------------------------------------------------------------------

    @rule()
    def new_turn(self) -> None:
        self.turns += 1
        self.tl.begin_turn(self.turn, self.tick())
        path = ar_path(self.turn, "user.prompt")
        self.add(Block.new(USER_PROMPT, self.turn, self.tick(), path=path, text="question"))

    @rule(text=TEXT, late=st.booleans())
    def tool_round(self, text: str, late: bool) -> None:
        self.calls += 1
        call = f"c{self.calls}"
        path = tc_path(self.turn, call, "call")
        self.add(Block.new(TOOL_CALL, self.turn, self.tick(), path=path, call_id=call, text="{}"))
        if late:
            self.pending.append((self.turn, call))
            return
        path = tc_path(self.turn, call, "result")
        self.add(Block.new(TOOL_RESULT, self.turn, self.tick(), path=path, call_id=call, text=text))

    @precondition(lambda self: bool(self.pending))
    @rule(text=TEXT)
    def late_result(self, text: str) -> None:
        turn, call = self.pending.pop(0)
        path = tc_path(turn, call, "result")
        self.add(Block.new(TOOL_RESULT, self.turn, self.tick(), path=path, call_id=call, text=text))

    @rule(text=st.text(alphabet="abc [DPK]", min_size=1, max_size=80))
    def note(self, text: str) -> None:
        path = ar_path(self.turn, f"react.note.n{len(self.appended)}")
        self.add(Block.new(NOTE, self.turn, self.tick(), path=path, text=text))

    @rule(text=TEXT)
    def followup(self, text: str) -> None:
        path = ar_path(self.turn, f"external.followup.m{len(self.appended)}")
        self.add(Block.new(USER_FOLLOWUP, self.turn, self.tick(), path=path, text=text or "more"))

    @rule(text=TEXT, back=st.floats(0.0, 5.0))
    def streamed_completion(self, text: str, back: float) -> None:
        """A completion that started streaming ``back`` seconds ago (ts_first before ts)."""
        start = self.now - back
        path = ar_path(self.turn, f"assistant.completion.{len(self.appended)}")
        block = Block.new(COMPLETION, self.turn, self.tick(), ts_first=start, path=path, text=text)
        self.add(block)

    @rule(steps=st.lists(st.sampled_from(["read", "draft", "review"]), min_size=1, max_size=3))
    def plan(self, steps: list[str]) -> None:
        plan = self.tl.plans.apply("new", turn_id=self.turn, steps=steps)
        self.appended.append(self.tl.record_plan(plan, turn_id=self.turn, ts=self.tick()))

    @rule(step=st.integers(0, 4))
    def ack(self, step: int) -> None:
        blocks, _ = self.tl.acknowledge(
            f"✓ {step}. done", turn_id=self.turn, ts=self.tick(), iteration=len(self.appended)
        )
        self.appended.extend(blocks)

    @rule(urls=st.lists(URLS, min_size=1, max_size=4))
    def sources(self, urls: list[str]) -> None:
        rows = [SourceRow(sid=i + 1, url=u, title=f"title {u}") for i, u in enumerate(urls)]
        self.tl.sources.add(rows)

    @rule(data=st.data())
    def hide(self, data: st.DataObject) -> None:
        visible = [b for b in self.renderer.visible_blocks() if b.path and b.type != NOTE]
        if not visible:
            return
        target = data.draw(st.sampled_from(visible)).path
        points = self.renderer.points()
        entries = [(b, self.renderer.entry_of(b)) for b in self.tl.blocks_at(target)]
        entries_before = {b.id: e for b, e in entries if e is not None}
        result = self.renderer.hide(target, "junk")
        event(f"hide {result.status}")
        if result.status == "ok":
            hidden = [b for b in self.tl.blocks_at(target) if b.hidden and b.id in entries_before]
            assert hidden
            assert all(entries_before[b.id] > points.hide_floor for b in hidden)
        else:
            assert result.code in ("hide_before_cache", "hide_too_old", "hide_failed")

    @rule(data=st.data())
    def unhide(self, data: st.DataObject) -> None:
        hidden = [b.path for b in self.tl.blocks if b.hidden]
        if hidden:
            self.tl.unhide(data.draw(st.sampled_from(hidden)))

    @rule(wait=st.sampled_from([1.0, 30.0, 400.0]), force=st.booleans())
    def render(self, wait: float, force: bool) -> None:
        summary_before = self.tl.latest_summary
        self.last = self.renderer.render(now=self.tick(wait), force_compaction=force)
        event(f"ttl {self.last.events.ttl.status}")
        if self.tl.latest_summary is not summary_before:
            event("compacted")
            self.check_compaction()

    # -- invariants ----------------------------------------------------------------------------

    def check_compaction(self) -> None:
        summary = self.tl.latest_summary
        assert summary is not None
        sides: dict[str, set[bool]] = {}
        for block in self.tl.blocks:
            if block.call_id and block.type in (TOOL_CALL, TOOL_RESULT):
                sides.setdefault(block.call_id, set()).add(block.order > summary.order)
        assert all(len(s) == 1 for s in sides.values()), sides
        visible = self.renderer.visible_blocks()
        texts = {(b.type, b.content) for b in visible}
        for block in self.tl.blocks:
            if block.order > summary.order:
                break
            if block.type in (NOTE, NOTE_PRESERVED):
                assert (NOTE_PRESERVED, block.content) in texts or block.hidden
            if block.type in (USER_FOLLOWUP, USER_FOLLOWUP_PRESERVED):
                assert (USER_FOLLOWUP_PRESERVED, block.content) in texts or block.hidden
        active = self.tl.active_plan_block()
        if active is not None:
            assert any(b.type == PLAN and b.data == active.data for b in visible)

    @invariant()
    def order_follows_turns_then_start_time(self) -> None:
        blocks = self.tl.blocks
        assert [b.order for b in blocks] == sorted(b.order for b in blocks)
        for a, b in itertools.pairwise(blocks):
            inserted = "insert_before" in a.meta or "insert_before" in b.meta
            if b.type == TURN_HEADER and not inserted:
                assert a.turn_id != b.turn_id
            elif a.turn_id == b.turn_id and not inserted and a.type != TURN_HEADER:
                assert a.start <= b.start or "placed" in b.meta  # placed: arrived late

    @invariant()
    def restore_gives_the_same_order(self) -> None:
        dicts = [b.to_dict() for b in reversed(self.tl.blocks)]
        restored = Timeline.restore(self.tl.full_snapshot(), dicts)
        assert [b.id for b in restored.blocks] == [b.id for b in self.tl.blocks]

    @invariant()
    def restore_from_the_rows_taken_equals_the_full_restore(self) -> None:
        self.rows.update(self.tl.take_row_changes())
        dicts = [b.to_dict() for b in self.tl.blocks]
        from_rows = Timeline.restore(self.tl.snapshot(), dicts, rows=self.rows)
        full = Timeline.restore(self.tl.full_snapshot(), dicts)
        assert from_rows.full_snapshot() == full.full_snapshot() == self.tl.full_snapshot()
        assert from_rows.take_row_changes() == {}

    @invariant()
    def marks_are_few_stable_and_never_inside_a_path_run(self) -> None:
        result = self.last
        if result is None:
            return
        assert len(result.marks) <= 3
        for m in result.marks:
            assert 0 <= m < len(result.stable)
            path = result.paths[m]
            if path and m + 1 < len(result.paths):
                assert result.paths[m + 1] != path
        assert [p["text"].split("\n", 1)[0] for p in result.tail][-1] == "[ANNOUNCE]"

    @invariant()
    def incremental_equals_full(self) -> None:
        result = self.last
        if result is None:
            return
        self.renderer.sync()
        full = Renderer(self.tl, self.cfg)
        full.sync()
        assert list(self.renderer.stable_parts()) == list(full.stable_parts())
        assert self.renderer.points() == full.points()

    @invariant()
    def everything_stays_reachable_by_path(self) -> None:
        for block in self.appended:
            if block.path:
                assert any(b is block for b in resolve(self.tl, block.path).blocks)

    @invariant()
    def sids_never_change(self) -> None:
        for row in self.tl.sources.rows():
            key = self.sids.setdefault(row.sid, row.key())
            assert key == row.key()
        assert [r.sid for r in self.tl.sources.rows()] == list(range(1, len(self.tl.sources) + 1))


TimelineMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_timeline_properties = TimelineMachine.TestCase
