"""A ``Usage`` priced into a ``Cost``, by the prices of the model table.

The input price (USD per million tokens) applies to uncached input at 1x, to cache reads at
0.1x, to 5-minute cache writes at 1.25x and to 1-hour cache writes at 2x; output tokens
are at the output price. The same rule as ``ModelSpec.cost``, kept part by part here so a
display can say what caching saved. Nothing is rounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from actline.messages import Cost, Usage

from ..config import ALIASES, MODELS, ModelSpec, model_spec

__all__ = [
    "CACHE_READ",
    "CACHE_WRITE_1H",
    "CACHE_WRITE_5M",
    "format_usd",
    "price",
    "priced_entry",
    "result_cost",
]

CACHE_READ = 0.1
CACHE_WRITE_5M = 1.25
CACHE_WRITE_1H = 2.0
"""Multipliers of the input price."""
PER_TOKEN = 1e-6
"""Prices are per million tokens."""


def priced_entry(spec: ModelSpec) -> str:
    """The name of the model table's entry whose prices ``spec`` has: ``claude-opus-4-5``
    for ``claude-opus-4-5-20251101``; "" for a model the table does not know."""
    if not spec.known:
        return ""
    if spec.name in MODELS:
        return spec.name
    if spec.name in ALIASES:
        return ALIASES[spec.name]
    entries = [k for k, v in MODELS.items() if replace(v, name=spec.name) == spec]
    prefixed = [k for k in entries if spec.name.startswith(k)]
    return max(prefixed or entries, key=len, default=spec.name)


def price(usage: Usage, model: str = "") -> Cost:
    """What ``usage`` cost, priced as ``model`` (default: the model the usage names).

    A model the table does not know is priced with ``model_spec``'s conservative prices
    and the cost says ``estimated``, as it does when the usage has fields the server did
    not report (``Usage.unknown``); no tokens at all cost exactly nothing.
    """
    spec = model_spec(model or usage.model)
    unit_in = spec.input_price * PER_TOKEN
    input_usd = usage.input_tokens * unit_in
    read_usd = usage.cache_read_tokens * unit_in * CACHE_READ
    write_5m_usd = usage.cache_write_5m_tokens * unit_in * CACHE_WRITE_5M
    write_1h_usd = usage.cache_write_1h_tokens * unit_in * CACHE_WRITE_1H
    output_usd = usage.output_tokens * spec.output_price * PER_TOKEN
    tokens = usage.total_input_tokens + usage.output_tokens
    return Cost(
        input_usd=input_usd,
        cache_write_5m_usd=write_5m_usd,
        cache_write_1h_usd=write_1h_usd,
        cache_read_usd=read_usd,
        output_usd=output_usd,
        total_usd=input_usd + read_usd + write_5m_usd + write_1h_usd + output_usd,
        uncached_usd=usage.total_input_tokens * unit_in + output_usd,
        priced_as=priced_entry(spec),
        estimated=bool(usage.unknown) or (not spec.known and tokens > 0),
    )


def format_usd(value: float, *, estimated: bool = False) -> str:
    """USD as a display shows it: ``$0.0123`` (four decimals; ``<$0.0001`` for less but
    not nothing, ``-$0.0040`` below zero), with ``~`` in front when ``estimated``."""
    sign = "-" if value < 0 else ""
    size = abs(value)
    if size == 0:
        text = "$0"
    elif size < 0.00005:
        text = f"{sign}<$0.0001"
    else:
        text = f"{sign}${size:,.4f}"
    return f"~{text}" if estimated else text


def result_cost(result: Mapping[str, Any]) -> tuple[Usage, Cost] | None:
    """A stored turn result's usage and cost (its stored cost, else priced now); None when
    it does not read as one."""
    try:
        usage = Usage.model_validate(result.get("usage") or {}, strict=False)
        stored = result.get("cost")
        cost = price(usage) if stored is None else Cost.model_validate(stored, strict=False)
    except ValidationError:
        return None
    return usage, cost
