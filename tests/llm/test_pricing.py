"""A usage priced by the model table: each part at its multiple of the input price, what
caching saved, unknown models marked as estimates, and USD as displays print it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.llm import model_spec
from actline.llm.pricing import format_usd, price, priced_entry
from actline.messages import Cost, Usage

TOKENS = st.integers(min_value=0, max_value=5_000_000)


def usage(**tokens: int) -> Usage:
    return Usage(model="claude-sonnet-4-6", **tokens)


def test_each_part_is_priced_at_its_multiple_of_the_input_price() -> None:
    # Sonnet 4.6: $3 input, $15 output per million tokens.
    cost = price(
        usage(
            input_tokens=2_000,
            cache_read_tokens=100_000,
            cache_write_5m_tokens=10_000,
            cache_write_1h_tokens=4_000,
            output_tokens=1_000,
        )
    )
    assert cost.input_usd == pytest.approx(0.006)  # 2,000 x $3/M
    assert cost.cache_read_usd == pytest.approx(0.03)  # 100,000 x $0.30/M
    assert cost.cache_write_5m_usd == pytest.approx(0.0375)  # 10,000 x $3.75/M
    assert cost.cache_write_1h_usd == pytest.approx(0.024)  # 4,000 x $6/M
    assert cost.output_usd == pytest.approx(0.015)  # 1,000 x $15/M
    assert cost.total_usd == pytest.approx(0.1125)
    assert cost.uncached_usd == pytest.approx(116_000 * 3e-6 + 0.015)  # every input token 1x
    assert cost.saved_usd == pytest.approx(0.363 - 0.1125)
    assert (cost.priced_as, cost.estimated) == ("claude-sonnet-4-6", False)


def test_caching_that_only_writes_costs_more_than_no_caching() -> None:
    cost = price(usage(cache_write_5m_tokens=10_000, output_tokens=10))
    assert cost.saved_usd == pytest.approx(-10_000 * 3e-6 * 0.25)
    assert cost.saved_usd < 0


@given(TOKENS, TOKENS, TOKENS, TOKENS, TOKENS)
def test_the_total_is_the_model_tables_cost_and_the_sum_of_the_parts(
    fresh: int, read: int, write_5m: int, write_1h: int, out: int
) -> None:
    u = Usage(
        input_tokens=fresh,
        output_tokens=out,
        cache_read_tokens=read,
        cache_write_5m_tokens=write_5m,
        cache_write_1h_tokens=write_1h,
        model="claude-opus-4-5-20251101",
    )
    cost = price(u)
    spec = model_spec(u.model)
    expected = spec.cost(
        input_tokens=fresh,
        output_tokens=out,
        cache_read=read,
        cache_write_5m=write_5m,
        cache_write_1h=write_1h,
    )
    parts = (
        cost.input_usd
        + cost.cache_read_usd
        + cost.cache_write_5m_usd
        + cost.cache_write_1h_usd
        + cost.output_usd
    )
    assert math.isclose(cost.total_usd, expected, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(cost.total_usd, parts, rel_tol=1e-9, abs_tol=1e-12)
    assert cost.total_usd <= cost.uncached_usd or write_5m + write_1h > 0


@given(TOKENS, TOKENS, TOKENS, TOKENS)
def test_pricing_two_usages_is_pricing_their_sum(
    a_in: int, a_read: int, b_in: int, b_out: int
) -> None:
    a = usage(input_tokens=a_in, cache_read_tokens=a_read)
    b = usage(input_tokens=b_in, output_tokens=b_out)
    both, apart = price(a + b), price(a) + price(b)
    for name in ("input_usd", "cache_read_usd", "output_usd", "total_usd", "uncached_usd"):
        assert math.isclose(getattr(both, name), getattr(apart, name), rel_tol=1e-9, abs_tol=1e-12)
    assert apart.priced_as == "claude-sonnet-4-6"


def test_dated_names_and_aliases_are_priced_as_their_table_entry() -> None:
    assert price(Usage(input_tokens=1, model="claude-opus-4-5-20251101")).priced_as == (
        "claude-opus-4-5"
    )
    assert price(Usage(input_tokens=1, model="claude-opus-4-0")).priced_as == "claude-opus-4"
    assert priced_entry(model_spec("claude-haiku-4-5@20251001")) == "claude-haiku-4-5"
    # Opus 4 costs three times Opus 4.5: the name decides, not the closest prefix
    opus_4 = price(Usage(input_tokens=1_000_000, model="claude-opus-4-20250514"))
    assert opus_4.priced_as == "claude-opus-4" and opus_4.total_usd == pytest.approx(15.0)


def test_a_model_the_table_does_not_know_is_an_estimate() -> None:
    cost = price(Usage(input_tokens=1_000_000, output_tokens=1_000_000, model="claude-opus-4-9"))
    assert cost.estimated and cost.priced_as == ""
    assert cost.total_usd == pytest.approx(3.0 + 15.0)  # model_spec's conservative prices
    assert not price(Usage(model="claude-opus-4-9")).estimated  # no tokens: exactly $0
    assert (price(Usage(), "claude-haiku-4-5").total_usd, price(Usage()).total_usd) == (0.0, 0.0)


def test_an_explicit_model_overrides_the_one_the_usage_names() -> None:
    u = Usage(input_tokens=1_000_000, model="extractive")
    assert price(u).total_usd == pytest.approx(3.0)  # the offline model is priced as Sonnet
    assert price(u, "claude-haiku-4-5").total_usd == pytest.approx(1.0)


def test_costs_add_up_and_say_what_they_were_priced_as() -> None:
    a = price(usage(input_tokens=1_000))
    b = price(Usage(input_tokens=1_000, model="claude-haiku-4-5"))
    c = price(Usage(input_tokens=1_000, model="some-model"))
    total = a + b + c
    assert total.total_usd == pytest.approx(0.003 + 0.001 + 0.003)
    assert total.priced_as == "claude-sonnet-4-6,claude-haiku-4-5"
    assert total.estimated
    assert (Cost() + a).priced_as == "claude-sonnet-4-6" and not (Cost() + a).estimated


def test_usd_is_shown_with_four_decimals_and_estimates_with_a_tilde() -> None:
    assert format_usd(0.1125) == "$0.1125"
    assert format_usd(1234.5) == "$1,234.5000"
    assert format_usd(0.0) == "$0"
    assert format_usd(0.00001) == "<$0.0001"
    assert format_usd(-0.0075) == "-$0.0075"
    assert format_usd(0.5, estimated=True) == "~$0.5000"


def test_usage_with_fields_the_server_did_not_report_is_an_estimate() -> None:
    unknown = ["cache_read_tokens", "cache_write_1h_tokens", "cache_write_5m_tokens"]
    partial = Usage(input_tokens=1_000, model="claude-sonnet-4-6", unknown=unknown)
    cost = price(partial)
    assert cost.estimated and cost.priced_as == "claude-sonnet-4-6"
    assert cost.total_usd == pytest.approx(0.003)
    assert not price(Usage(input_tokens=1_000, model="claude-sonnet-4-6")).estimated
    total = Usage(input_tokens=1, unknown=["output_tokens", "cache_read_tokens"]) + partial
    assert total.unknown == sorted({*unknown, "output_tokens"})
    assert (Usage() + Usage()).unknown == []
