"""The cost model of a view edit: hand-checked verdicts, and its properties over random edits
(an edit that saves nothing is never taken; more rounds never turn a taken edit into a
refused one; a cold cache makes a rewrite free)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.timeline.editing.cost import (
    DEFAULT_PRICES,
    HORIZON_CAP,
    Edit,
    Prices,
    cost,
    decide,
    gain,
    horizon,
)

KINDS = st.sampled_from(["retention", "ttl", "hide", "compaction"])
TOKENS = st.integers(min_value=-1_000, max_value=2_000_000)
ROUNDS = st.floats(min_value=0, max_value=500, allow_nan=False)
PRICES = st.builds(
    Prices,
    read=st.floats(min_value=0, max_value=0.5),
    write=st.floats(min_value=0.6, max_value=3),
    output=st.floats(min_value=0, max_value=10),
)
EDITS = st.builds(
    Edit,
    kind=KINDS,
    saved=TOKENS,
    rewrite=st.integers(min_value=0, max_value=2_000_000),
    rounds=ROUNDS,
    work_input=st.integers(min_value=0, max_value=200_000),
    work_output=st.integers(min_value=0, max_value=10_000),
    cold=st.booleans(),
)


def test_an_archive_near_the_tail_pays_and_one_deep_in_the_prefix_does_not() -> None:
    """A 3,700-token result archived with 200 tokens after it: 0.1 x 3,700 x 10 rounds =
    3,700 spared against 1.15 x 200 = 230 rewritten. With 40,000 tokens after it the rewrite
    costs 46,000: it would take 125 rounds to pay."""
    near = decide(Edit("retention", 3_700, 200, 10))
    assert near.take and near.reason == "pays"
    assert near.gain == pytest.approx(3_700) and near.cost == pytest.approx(230)
    deep = decide(Edit("retention", 3_700, 40_000, 10))
    assert not deep.take and deep.reason == "costs more than it saves"
    assert deep.cost == pytest.approx(46_000)


def test_a_summary_call_is_priced_in_and_a_cold_cache_rewrites_for_free() -> None:
    """Compaction of 30,000 tokens into 600 with 5,000 kept: the summary call reads 30,000
    at 1x and writes 600 at the output price (5x); the kept tokens are written again."""
    edit = Edit("compaction", 29_400, 5_600, 12, work_input=30_000, work_output=600)
    verdict = decide(edit)
    assert verdict.cost == pytest.approx(1.15 * 5_600 + 30_000 + 5 * 600)
    assert verdict.gain == pytest.approx(0.1 * 29_400 * 12)
    assert not verdict.take
    cold = decide(Edit("retention", 3_700, 40_000, 1, cold=True))
    assert cold.take and cold.cost == 0 and cold.reason == "cache cold"


def test_forced_takes_an_edit_that_does_not_pay_and_keeps_the_arithmetic() -> None:
    verdict = decide(Edit("compaction", 10_000, 60_000, 2), forced="context budget")
    assert verdict.take and verdict.reason == "context budget"
    assert verdict.cost > verdict.gain
    event = verdict.event()
    assert event["verdict"] == "take" and event["reason"] == "context budget"
    assert all(isinstance(v, str | int | float | bool) for v in event.values())


def test_one_hour_writes_cost_more_than_five_minute_ones() -> None:
    edit = Edit("retention", 3_700, 3_000, 10)
    assert decide(edit, Prices(write=1.25)).take
    assert not decide(edit, Prices(write=2.0)).take


def test_prices_are_checked() -> None:
    with pytest.raises(ValueError, match="read <= write"):
        Prices(read=1.5, write=1.25)


def test_without_a_cache_an_edit_costs_no_rewrite_and_saves_every_token() -> None:
    uncached = Prices(read=1.0, write=1.0)
    verdict = decide(Edit("retention", 5_000, 500, 2), uncached)
    assert verdict.take and verdict.cost == 0 and verdict.gain == 10_000


def test_the_horizon_counts_requests_until_the_ceiling() -> None:
    assert horizon(tokens=20_000, growth=3_000, ceiling=48_000) == 10
    assert horizon(tokens=50_000, growth=3_000, ceiling=48_000) == 1
    assert horizon(tokens=20_000, growth=0, ceiling=48_000) == HORIZON_CAP
    assert horizon(tokens=0, growth=1, ceiling=10**9) == HORIZON_CAP


@given(EDITS, PRICES, st.text(max_size=12))
def test_an_edit_that_saves_nothing_is_never_taken(edit: Edit, prices: Prices, forced: str) -> None:
    verdict = decide(edit, prices, forced=forced)
    if edit.saved <= 0:
        assert not verdict.take and verdict.reason == "saves nothing"


@given(EDITS, PRICES, ROUNDS, st.text(max_size=12))
def test_more_rounds_never_refuse_a_taken_edit(
    edit: Edit, prices: Prices, more: float, forced: str
) -> None:
    first = decide(edit, prices, forced=forced)
    longer = Edit(
        edit.kind,
        edit.saved,
        edit.rewrite,
        edit.rounds + more,
        edit.work_input,
        edit.work_output,
        edit.cold,
    )
    if first.take:
        assert decide(longer, prices, forced=forced).take


@given(EDITS, PRICES)
def test_a_cold_cache_never_costs_more_and_the_verdict_is_the_arithmetic(
    edit: Edit, prices: Prices
) -> None:
    warm = Edit(edit.kind, edit.saved, edit.rewrite, edit.rounds, edit.work_input, edit.work_output)
    cold = Edit(
        edit.kind, edit.saved, edit.rewrite, edit.rounds, edit.work_input, edit.work_output, True
    )
    assert cost(cold, prices) <= cost(warm, prices)
    verdict = decide(edit, prices)
    assert verdict.take == (edit.saved > 0 and gain(edit, prices) > cost(edit, prices))
    assert gain(edit, prices) >= 0 and cost(edit, prices) >= 0


def test_the_default_prices_are_the_five_minute_cache() -> None:
    assert (DEFAULT_PRICES.read, DEFAULT_PRICES.write) == (0.1, 1.25)
