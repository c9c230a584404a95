"""The prompt-cache accounting of ``actline.llm.cache_sim``, on hand-computed examples.

Text of exactly 4*k ASCII characters is k tokens (actline.timeline.tokens' estimate), so
every number below is computed by hand from the block sizes in the comments.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.llm.cache_sim import CacheSim, CacheUsage, split_prompt
from actline.llm.errors import ModelRequestError

T0 = 1_800_000_000.0
MODEL = "claude-sonnet-4-6"  # minimum cacheable prefix: 1024 tokens


def text(tokens: int, tag: str = "") -> str:
    """Exactly ``tokens`` tokens of ASCII text, distinct per ``tag``."""
    return (tag + ":").ljust(4 * tokens, "x")


def block(tokens: int, tag: str, ttl: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "text", "text": text(tokens, tag)}
    if ttl is not None:
        out["cache_control"] = (
            {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}
        )
    return out


def body(
    content: list[dict[str, Any]],
    *,
    system: list[dict[str, Any]] | str | None = None,
    tools: list[dict[str, Any]] | None = None,
    model: str = MODEL,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model, "max_tokens": 100, **extra}
    out["messages"] = [{"role": "user", "content": content}]
    if system is not None:
        out["system"] = system
    if tools is not None:
        out["tools"] = tools
    return out


def usage(read: int = 0, write_5m: int = 0, write_1h: int = 0, uncached: int = 0) -> CacheUsage:
    return CacheUsage(
        input_tokens=uncached,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=write_5m + write_1h,
        ephemeral_5m_input_tokens=write_5m,
        ephemeral_1h_input_tokens=write_1h,
    )


# -- (a) the three-turn example ------------------------------------------------------------
# System: 1000 tokens, unmarked. Turn n's user content is blocks b0..b(k-1) of 10 tokens
# each, then a 20-token tail after the last mark. Positions: system = 0, b_i = i + 1.


def turn(blocks: int, marks: tuple[int, ...]) -> dict[str, Any]:
    content = [block(10, f"b{i}", "5m" if i in marks else None) for i in range(blocks)]
    content.append(block(20, f"tail{blocks}"))
    return body(content, system=[block(1000, "system")])


def test_a_single_tail_mark_misses_once_a_turn_adds_more_than_twenty_blocks() -> None:
    sim = CacheSim()
    # Turn 1: b0..b4, mark on b4 (position 5): 1000 + 5*10 = 1050 >= 1024 is written.
    assert sim.run(turn(5, (4,)), T0) == usage(write_5m=1050, uncached=20)
    # Turn 2: b0..b14, mark on b14 (position 15); walking back 15..0 finds position 5.
    assert sim.run(turn(15, (14,)), T0 + 10) == usage(read=1050, write_5m=100, uncached=20)
    # Turn 3: b0..b39, mark on b39 (position 40); the walk covers 40..21 and the last
    # write is at 15: a miss, and the whole 1400-token prefix is written again.
    assert sim.run(turn(40, (39,)), T0 + 20) == usage(write_5m=1400, uncached=20)


def test_a_second_mark_at_the_end_of_the_previous_turn_keeps_the_read() -> None:
    sim = CacheSim()
    assert sim.run(turn(5, (4,)), T0) == usage(write_5m=1050, uncached=20)
    # Marks on b4 (end of turn 1) and b14: b4 hits exactly.
    assert sim.run(turn(15, (4, 14)), T0 + 10) == usage(read=1050, write_5m=100, uncached=20)
    # Marks on b14 (end of turn 2, position 15) and b39: b14 hits; 1400 - 1150 = 250 written.
    assert sim.run(turn(40, (14, 39)), T0 + 20) == usage(read=1150, write_5m=250, uncached=20)


@pytest.mark.parametrize(("mark", "read"), [(23, 1050), (24, 0)])
def test_the_walk_back_covers_twenty_positions_counting_the_mark(mark: int, read: int) -> None:
    sim = CacheSim()
    sim.run(turn(5, (4,)), T0)  # writes position 5
    # A mark on b23 is position 24: 24..5 is 20 positions, a hit; b24 (position 25) misses.
    result = sim.run(turn(mark + 1, (mark,)), T0 + 1)
    assert result.cache_read_input_tokens == read
    assert result.total == 1000 + (mark + 1) * 10 + 20


# -- (b) time to live ----------------------------------------------------------------------
# System 1200 tokens marked (position 0), user message 10 tokens unmarked.

CACHED = body([block(10, "question")], system=[block(1200, "system", "5m")])


@pytest.mark.parametrize(("later", "read"), [(299.0, 1200), (301.0, 0)])
def test_a_five_minute_entry_hits_until_it_expires(later: float, read: int) -> None:
    sim = CacheSim()
    assert sim.run(CACHED, T0) == usage(write_5m=1200, uncached=10)
    result = sim.account(CACHED, T0 + later).usage
    assert result.cache_read_input_tokens == read
    assert result.cache_creation_input_tokens == 1200 - read


def test_a_read_refreshes_the_entry_even_when_its_request_writes_nothing() -> None:
    sim = CacheSim()
    sim.run(CACHED, T0)
    # At +200 a request reads the system entry; its response never begins (no commit).
    longer = body([block(10, "question", "5m")], system=[block(1200, "system", "5m")])
    assert sim.account(longer, T0 + 200).usage == usage(read=1200, write_5m=10)
    # The read moved the expiry to +500, so +450 still hits (it would have expired at +300).
    assert sim.account(CACHED, T0 + 450).usage == usage(read=1200, uncached=10)


def test_a_one_hour_entry_outlives_five_minutes() -> None:
    sim = CacheSim()
    one_hour = body([block(10, "question")], system=[block(1200, "system", "1h")])
    assert sim.run(one_hour, T0) == usage(write_1h=1200, uncached=10)
    assert sim.account(one_hour, T0 + 3599).usage == usage(read=1200, uncached=10)
    assert sim.account(one_hour, T0 + 3599 + 3601).usage == usage(write_1h=1200, uncached=10)


def test_expire_all_forgets_every_entry() -> None:
    sim = CacheSim()
    sim.run(CACHED, T0)
    assert sim.entry_count == 1
    sim.expire_all()
    assert sim.entry_count == 0
    assert sim.account(CACHED, T0 + 1).usage == usage(write_5m=1200, uncached=10)


# -- (c) below the minimum -----------------------------------------------------------------


def test_a_prompt_below_the_minimum_reports_no_cache_tokens() -> None:
    sim = CacheSim()
    short = body([block(20, "question")], system=[block(1000, "system", "5m")])  # 1000 < 1024
    for later in (0.0, 1.0):
        assert sim.run(short, T0 + later) == usage(uncached=1020)
    assert sim.entry_count == 0


def test_the_minimum_is_per_model_and_can_be_overridden() -> None:
    prompt = [block(10, "question")]
    system = [block(2000, "system", "5m")]
    assert CacheSim().run(body(prompt, system=system), T0) == usage(write_5m=2000, uncached=10)
    haiku = body(prompt, system=system, model="claude-haiku-4-5")  # minimum 4096
    assert CacheSim().run(haiku, T0) == usage(uncached=2010)
    assert CacheSim(min_cache_tokens=2000).run(haiku, T0) == usage(write_5m=2000, uncached=10)


def test_only_the_marks_that_reach_the_minimum_write() -> None:
    sim = CacheSim()
    # Marks after 600 (below 1024) and after 600 + 600 = 1200 tokens.
    two = body([block(600, "a", "5m"), block(600, "b", "5m"), block(8, "tail")])
    assert sim.run(two, T0) == usage(write_5m=1200, uncached=8)
    assert sim.entry_count == 1


# -- (d) what invalidates what -------------------------------------------------------------
# A tool's tokens are those of its canonical JSON: the fixed part
# {"description":"","input_schema":{"type":"object"},"name":"t"} is 62 characters, so a
# 338-character description makes exactly 400 characters = 100 tokens.


def tool(letter: str) -> dict[str, Any]:
    return {
        "name": "t",
        "description": letter * 338,
        "input_schema": {"type": "object"},
        "cache_control": {"type": "ephemeral"},
    }


def layered(*, tool_letter: str = "d", system_tag: str = "system", **extra: Any) -> dict[str, Any]:
    """Tool 100 (marked) -> system 200 (marked) -> message 300 (marked) -> tail 50."""
    return body(
        [block(300, "message", "5m"), block(50, "tail")],
        system=[block(200, system_tag, "5m")],
        tools=[tool(tool_letter)],
        **extra,
    )


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        ({}, usage(read=600, uncached=50)),
        ({"system_tag": "other"}, usage(read=100, write_5m=500, uncached=50)),
        ({"tool_letter": "e"}, usage(write_5m=600, uncached=50)),
        ({"tool_choice": {"type": "any"}}, usage(read=300, write_5m=300, uncached=50)),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 2000}},
            usage(read=300, write_5m=300, uncached=50),
        ),
    ],
    ids=["nothing", "system", "tools", "tool_choice", "thinking"],
)
def test_a_change_invalidates_its_layer_and_everything_after_it(
    changed: dict[str, Any], expected: CacheUsage
) -> None:
    sim = CacheSim(min_cache_tokens=100)
    assert sim.run(layered(), T0) == usage(write_5m=600, uncached=50)
    assert sim.run(layered(**changed), T0 + 1) == expected


def test_a_string_system_prompt_caches_like_the_same_text_block() -> None:
    sim = CacheSim()
    as_blocks = body([block(10, "q", "5m")], system=[block(1200, "system")])
    as_string = body([block(10, "q", "5m")], system=text(1200, "system"))
    sim.run(as_blocks, T0)
    assert sim.account(as_string, T0 + 1).usage == usage(read=1210)


def test_the_role_of_a_message_is_part_of_the_prefix() -> None:
    user = body([block(1100, "same", "5m")])
    assistant = {**user, "messages": [*user["messages"], {"role": "assistant", "content": "ok"}]}
    swapped = {
        **user,
        "messages": [{"role": "assistant", "content": user["messages"][0]["content"]}],
    }
    assert split_prompt(user).positions[0].key == split_prompt(assistant).positions[0].key
    assert split_prompt(user).positions[0].key != split_prompt(swapped).positions[0].key


# -- (e) five-minute and one-hour writes ---------------------------------------------------


def test_creation_tokens_split_by_the_ttl_of_the_mark_that_ends_each_segment() -> None:
    sim = CacheSim()
    system = [block(1100, "system", "1h")]
    first = body([block(200, "turn1", "5m"), block(30, "tail")], system=system)
    # 0..1100 ends at the 1h mark, 1100..1300 at the 5m mark.
    result = sim.run(first, T0)
    assert result == usage(write_1h=1100, write_5m=200, uncached=30)
    assert result.cost_ratio() == pytest.approx((30 + 1.25 * 200 + 2 * 1100) / 1330)
    # A new turn reads the system entry and writes only its own 200-token segment.
    second = body([block(200, "turn2", "5m"), block(30, "tail")], system=system)
    result = sim.run(second, T0 + 60)
    assert result == usage(read=1100, write_5m=200, uncached=30)
    assert result.cost_ratio() == pytest.approx((30 + 1.25 * 200 + 0.1 * 1100) / 1330)


def test_totals_add_up_every_accounted_request() -> None:
    sim = CacheSim()
    sim.run(CACHED, T0)
    sim.run(CACHED, T0 + 1)
    assert sim.requests == 2
    assert sim.totals == usage(read=1200, write_5m=1200, uncached=20)
    assert sim.totals.total == 2 * 1210


def test_no_caching_costs_exactly_the_base_price() -> None:
    assert usage(uncached=500).cost_ratio() == 1.0
    assert CacheUsage().cost_ratio() == 1.0


# -- (f) entries appear only once a response has begun ------------------------------------


def test_an_entry_is_not_readable_before_its_request_is_committed() -> None:
    sim = CacheSim()
    pending = sim.account(CACHED, T0)
    assert pending.usage == usage(write_5m=1200, uncached=10)
    # A concurrent identical request, before the first response began: no read.
    assert sim.account(CACHED, T0 + 1).usage == usage(write_5m=1200, uncached=10)
    sim.commit(pending, T0 + 2)
    assert sim.account(CACHED, T0 + 3).usage == usage(read=1200, uncached=10)


# -- validation and invariants -------------------------------------------------------------


def test_a_bad_ttl_is_refused_as_an_invalid_request() -> None:
    bad = body([{"type": "text", "text": "q", "cache_control": {"type": "ephemeral", "ttl": "2h"}}])
    with pytest.raises(ModelRequestError, match="ttl"):
        CacheSim().account(bad, T0)


def test_media_blocks_have_fixed_token_costs() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 99},
    }
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "A" * 8000},
    }
    prompt = split_prompt(body([image, pdf]))
    assert [p.tokens for p in prompt.positions] == [1600, 1000]


@given(
    sizes=st.lists(st.integers(1, 400), min_size=1, max_size=40),
    marks=st.sets(st.integers(0, 39), max_size=4),
    steps=st.lists(st.tuples(st.integers(0, 10), st.floats(0, 400)), min_size=1, max_size=6),
)
def test_usage_always_adds_up_to_the_prompt(
    sizes: list[int], marks: set[int], steps: list[tuple[int, float]]
) -> None:
    sim = CacheSim(min_cache_tokens=300)
    now = T0
    for grow, wait in steps:
        sizes = sizes + [7] * grow
        content = [block(n, f"b{i}", "5m" if i in marks else None) for i, n in enumerate(sizes)]
        now += wait
        plan = sim.account(body(content), now)
        result = plan.usage
        assert result.total == sum(sizes)
        assert result.cache_creation_input_tokens == (
            result.ephemeral_5m_input_tokens + result.ephemeral_1h_input_tokens
        )
        assert min(result.input_tokens, result.cache_read_input_tokens) >= 0
        assert result.cache_creation_input_tokens >= 0
        sim.commit(plan, now)
