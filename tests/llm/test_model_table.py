"""The per-model constants: every current and legacy Claude model has its minimum
cacheable prefix (Anthropic's prompt-caching docs), dated and aliased names resolve to
their family, and an unknown model gets the most conservative minimum."""

from __future__ import annotations

import pytest

from actline.llm.cache_sim import CacheSim
from actline.llm.config import MODELS, UNKNOWN_MIN_CACHE_TOKENS, model_spec

MINIMUMS = [
    # current
    ("claude-opus-4-8", 1024),
    ("claude-opus-4-7", 1024),
    ("claude-opus-4-6", 1024),
    ("claude-opus-4-5", 1024),
    ("claude-opus-4-5-20251101", 1024),
    ("claude-opus-4-5@20251101", 1024),
    ("claude-sonnet-4-6", 1024),
    ("claude-sonnet-4-5", 1024),
    ("claude-sonnet-4-5-20250929", 1024),
    ("claude-haiku-4-5", 4096),
    ("claude-haiku-4-5-20251001", 4096),
    # legacy
    ("claude-opus-4-1-20250805", 1024),
    ("claude-opus-4-20250514", 1024),
    ("claude-opus-4-0", 1024),
    ("claude-sonnet-4-20250514", 1024),
    ("claude-sonnet-4-0", 1024),
    ("claude-3-7-sonnet-20250219", 1024),
    ("claude-3-7-sonnet-latest", 1024),
    ("claude-3-5-sonnet-20241022", 1024),
    ("claude-3-5-sonnet-20240620", 1024),
    ("claude-3-5-haiku-20241022", 2048),
    ("claude-3-5-haiku-latest", 2048),
    ("claude-3-opus-20240229", 1024),
    ("claude-3-sonnet-20240229", 1024),
    ("claude-3-haiku-20240307", 2048),
]


@pytest.mark.parametrize(("name", "minimum"), MINIMUMS)
def test_each_claude_model_has_its_minimum_cacheable_prefix(name: str, minimum: int) -> None:
    spec = model_spec(name)
    assert spec.known and spec.name == name
    assert spec.min_cache_tokens == minimum


@pytest.mark.parametrize(
    "name",
    [
        "claude-future-9",
        "claude-opus-4-9",  # not Opus 4 with a suffix: a model the table does not know
        "claude-sonnet-4-7-20270101",
        "claude-3-haiku-x",
        "m",
        "",
    ],
)
def test_an_unknown_model_uses_the_largest_minimum(name: str) -> None:
    spec = model_spec(name)
    assert not spec.known
    assert spec.min_cache_tokens == UNKNOWN_MIN_CACHE_TOKENS == 4096
    assert UNKNOWN_MIN_CACHE_TOKENS == max(s.min_cache_tokens for s in MODELS.values())


def test_the_cache_simulator_follows_the_table() -> None:
    """A 3,000-token prefix is cached for Sonnet 4.6 and not for Haiku 4.5 or an unknown model."""
    marked = {"type": "text", "text": "x" * 4 * 3000, "cache_control": {"type": "ephemeral"}}

    def written(model: str) -> int:
        body = {
            "model": model,
            "max_tokens": 10,
            "messages": [{"role": "user", "content": [marked]}],
        }
        return CacheSim().run(body, 1_800_000_000.0).cache_creation_input_tokens

    assert written("claude-sonnet-4-6") > 0
    assert written("claude-haiku-4-5-20251001") == 0
    assert written("claude-unknown-1") == 0
