"""What a long run cost, per request and per turn, and the least it could have cost.

Cost, in base-price input tokens: uncached input + 1.25 x 5-minute cache writes + 2 x
1-hour cache writes + 0.1 x cache reads, from the usage the Messages API server reported.

The floor of a run, for the contexts the run chose to send: every token that enters the
context is written to the cache once (1.25x) and read (0.1x) by each later request that
keeps it. The decision requests are taken in order and each is split into content blocks
(tools, system blocks, then each message's blocks; a string is one text block). A block
whose canonical JSON without ``cache_control`` was in an earlier decision request is kept
(0.1x of its tokens), any other is new (1.25x). Blocks after the request's last
``cache_control`` mark are the uncached tail and cost 1.0x under any policy, and so does a
whole request whose marked prefix is below the model's minimum cacheable size. Summary
requests count at their actual cost in both the cost and the floor. Tokens are counted as
the server accounts them (``actline.llm.cache_sim.block_tokens``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actline.llm.cache_sim import block_tokens, canonical_json
from actline.llm.fake_anthropic.server import RequestRecord
from actline.messages import Usage
from actline.timeline.tokens import DEFAULT_COUNTER, TokenCounter
from bench.longrun.scenario import is_summary

UNCACHED, WRITE_5M, WRITE_1H, READ = 1.0, 1.25, 2.0, 0.1
"""Prices of input tokens, as multiples of the model's base input price."""


def usage_cost(usage: Usage | None) -> float:
    """The input cost of one call (or a sum of calls) in base-price tokens (0 without usage)."""
    if usage is None:
        return 0.0
    return (
        UNCACHED * usage.input_tokens
        + WRITE_5M * usage.cache_write_5m_tokens
        + WRITE_1H * usage.cache_write_1h_tokens
        + READ * usage.cache_read_tokens
    )


def content_blocks(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A Messages API body's blocks in cache order: tools, system, then message blocks."""
    out: list[Mapping[str, Any]] = list(body.get("tools") or ())
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}] if system else []
    out.extend(system or ())
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        out.extend(content or ())
    return out


def _key(block: Mapping[str, Any]) -> bytes:
    return canonical_json({k: v for k, v in block.items() if k != "cache_control"})


def floor_tokens(
    bodies: Iterable[Mapping[str, Any]],
    *,
    min_cache_tokens: int = 0,
    counter: TokenCounter = DEFAULT_COUNTER,
) -> float:
    """The floor of a sequence of decision requests, in base-price tokens (see the module)."""
    seen: set[bytes] = set()
    total = 0.0
    for body in bodies:
        blocks = content_blocks(body)
        keys = [_key(b) for b in blocks]
        tokens = [block_tokens(b, counter) for b in blocks]
        marks = [i for i, b in enumerate(blocks) if b.get("cache_control")]
        last = marks[-1] if marks else -1
        if sum(tokens[: last + 1]) < min_cache_tokens:
            last = -1  # nothing is cacheable: the whole request is uncached input
        for i, (key, n) in enumerate(zip(keys, tokens, strict=True)):
            if i > last:
                total += UNCACHED * n
            else:
                total += (READ if key in seen else WRITE_5M) * n
        seen.update(keys)
    return total


def answered(requests: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The requests the server answered and accounted (a refused one has no usage)."""
    return [r for r in requests if r.usage is not None and isinstance(r.body, Mapping)]


def run_floor(requests: Sequence[RequestRecord], *, min_cache_tokens: int = 0) -> float:
    """The floor of a run's requests: decision requests by ``floor_tokens``, summary
    requests at their actual cost."""
    records = answered(requests)
    decisions = [r.body for r in records if not is_summary(r.body)]
    summaries = sum(usage_cost(r.usage) for r in records if is_summary(r.body))
    return floor_tokens(decisions, min_cache_tokens=min_cache_tokens) + summaries


def turn_costs(
    requests: Sequence[RequestRecord], windows: Sequence[tuple[int, int]]
) -> list[float]:
    """The cost of each turn: of the requests recorded between its ``(before, after)``
    indexes into ``requests`` (every request made while the turn ran, summaries included)."""
    return [sum(usage_cost(r.usage) for r in requests[a:b]) for a, b in windows]
