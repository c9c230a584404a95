"""The stable-prefix rule over random conversations (Hypothesis).

Random sequences of tool rounds (small, medium and large results), react.hide of the newest
result, turn boundaries and pauses past the cache lifetime run through one renderer under
the ``cost`` context policy, with random windows, cache-point offsets and budgets. Between
two consecutive rounds of a turn the request keeps the previous request's prefix
byte-identical through its last mark, unless the policy recorded a taken edit — and then the
first changed part is after the previous request's pre-tail mark (an edit in the editable
tail), or the context was at its ceiling (``budget``). Everything hidden, archived, pruned or
compacted stays readable by path, whole.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actline.timeline import Renderer, RenderResult, TimelineConfig, resolve
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from actline.timeline.paths import tc_path
from tests.timeline.builders import Build, words

SIZES = {"small": 40, "medium": 700, "large": 2_400}
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("fetch"), st.sampled_from(sorted(SIZES))),
        st.tuples(st.just("hide"), st.just("")),
        st.tuples(st.just("turn"), st.just("")),
        st.tuples(st.just("pause"), st.just("")),
    ),
    min_size=4,
    max_size=40,
)
CONFIGS = st.builds(
    TimelineConfig,
    max_tokens=st.sampled_from([0, 30_000, 60_000]),
    retention_recent_results=st.sampled_from([1, 3, 6]),
    cache_point_offset_rounds=st.sampled_from([1, 2, 4]),
    cache_ttl_seconds=st.sampled_from([0, 300]),
    compaction_floor_tokens=st.sampled_from([0, 5_000, 17_000]),
)


class Conversation:
    """One timeline, one renderer, the renders in order and the text of every result."""

    def __init__(self, cfg: TimelineConfig) -> None:
        self.b = Build()
        self.renderer = Renderer(self.b.tl, cfg)
        self.turns = 0
        self.calls = 0
        self.originals: dict[str, str] = {}
        self.renders: list[RenderResult] = []
        self.turn()

    def render(self) -> None:
        self.renders.append(
            self.renderer.render(now=self.b.at(), include_sources=False, include_announce=False)
        )

    def turn(self) -> None:
        if self.turns:
            self.b.completion()
        self.turns += 1
        self.b.turn(f"t{self.turns}")
        self.render()

    def fetch(self, size: str) -> None:
        self.calls += 1
        turn, call = f"t{self.turns}", f"c{self.calls}"
        text = f"page {call} " + words(SIZES[size])
        body = {"tool": "web.fetch", "params": {"page": call}}
        self.b.add(TOOL_CALL, path=tc_path(turn, call, "call"), call_id=call, data=body)
        self.b.result(call, text)
        self.originals[tc_path(turn, call, "result")] = text
        self.render()

    def hide(self) -> None:
        if self.originals:
            self.renderer.hide(list(self.originals)[-1], "not needed any more")
        self.fetch("small")

    def pause(self) -> None:
        self.b.clock += 400
        self.fetch("small")


def first_change(before: RenderResult, after: RenderResult) -> int | None:
    """The first part through ``before``'s last mark that ``after`` does not repeat."""
    end = max(before.marks) + 1
    for i in range(end):
        if i >= len(after.stable) or after.stable[i] != before.stable[i]:
            return i
    return None


def check_pair(before: RenderResult, after: RenderResult) -> None:
    if after.events.moment != "round" or not before.marks:
        return
    changed = first_change(before, after)
    taken = [v for v in after.events.edits if v.take]
    if changed is None:
        return
    assert taken, f"part {changed} changed mid-turn without a decision"
    wheres = {v.where for v in taken}
    assert wheres <= {"tail", "budget"}, wheres
    if wheres == {"tail"}:
        assert changed > before.points.hide_floor


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(CONFIGS, OPS)
def test_mid_turn_the_cached_prefix_changes_only_by_a_decided_edit(
    cfg: TimelineConfig, ops: list[tuple[str, str]]
) -> None:
    conv = Conversation(cfg)
    actions: dict[str, Any] = {
        "fetch": conv.fetch,
        "hide": lambda _: conv.hide(),
        "turn": lambda _: conv.turn(),
        "pause": lambda _: conv.pause(),
    }
    for op, arg in ops:
        actions[op](arg)
    for before, after in itertools.pairwise(conv.renders):
        check_pair(before, after)
    tl = conv.b.tl
    for path, text in conv.originals.items():
        assert resolve(tl, path).text.startswith(text)
    for block in tl.blocks:
        if block.type == TOOL_RESULT and block.hidden:
            assert block.replacement and block.path in block.replacement
