"""The cost model's prices for a conversation's model: by the model's price table, and a
model configured without prices (a local server) priced at nothing without failing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actline.actors.conversation.compactor import prices_of
from actline.llm.config import ModelSpec, register_models
from actline.timeline.editing.cost import DEFAULT_PRICES


@pytest.fixture
def local_model() -> Iterator[str]:
    register_models([ModelSpec("my-local", 32_768, 0, 0.0, 0.0, 4096, cache="automatic")])
    try:
        yield "my-local"
    finally:
        register_models(())


def test_a_claude_model_weighs_output_by_its_prices() -> None:
    prices = prices_of("claude-sonnet-4-6")
    assert (prices.read, prices.write, prices.output) == (0.1, 1.25, 5.0)


def test_a_model_priced_at_nothing_gets_the_default_output_weight(local_model: str) -> None:
    assert prices_of(local_model).output == DEFAULT_PRICES.output


def test_the_cache_mode_sets_what_reads_and_writes_cost() -> None:
    specs = [
        ModelSpec(f"m-{mode}", 32_768, 0, 1.0, 4.0, 4096, cache=mode)
        for mode in ("anthropic", "automatic", "none")
    ]
    register_models(specs)
    try:
        weights = [(prices_of(s.name).read, prices_of(s.name).write) for s in specs]
        assert weights == [(0.1, 1.25), (0.1, 1.0), (1.0, 1.0)]
        assert prices_of("m-none").output == 4.0
    finally:
        register_models(())
