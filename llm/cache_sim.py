"""Prompt-cache accounting by the provider's rules, shared by the local server and bench.

Pure: no I/O, no asyncio, no clock reads; every time is an argument. A request
body is split into positions (tools -> system -> messages, one per content
block) whose keys are chained prefix hashes, so a key names the whole prefix
ending at its block. Reading looks up each ``cache_control`` mark and walks back
at most ``lookback`` positions (the mark included); the longest live hit wins
and has its expiry refreshed. Writing is two-step because an entry only becomes
readable once its response has begun: ``account`` returns a ``CachePlan`` with
the usage and the pending writes, ``commit`` makes the writes visible.

Hashing: the root hashes the model name; each position hashes the previous key,
a tag (tool, system, the role for a message's first block, block otherwise) and
the block's canonical JSON without its ``cache_control``; ``tool_choice`` and
``thinking`` are hashed in just before the first message block, so changing
them invalidates messages but keeps the tools and system entries. A string
system prompt or message content is the single text block it stands for.

Tokens per block: ``DEFAULT_COUNTER`` over the text (a tool definition over its
canonical JSON), 1600 for an image, base64 length // 8 for a document.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actline.timeline.tokens import (
    BINARY_B64_CHARS_PER_TOKEN,
    DEFAULT_COUNTER,
    IMAGE_TOKENS,
    TokenCounter,
)

from .config import CacheTtl, model_spec
from .errors import ModelRequestError

TTL_SECONDS: Mapping[str, float] = {"5m": 300.0, "1h": 3600.0}
LOOKBACK = 20
"""Positions searched per mark when its own prefix misses, the mark included."""
_SWEEP_EVERY = 256


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: equal values give equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _without_mark(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def block_tokens(block: Mapping[str, Any], counter: TokenCounter = DEFAULT_COUNTER) -> int:
    """Tokens of one content block (see the module docstring for the rules)."""
    kind = block.get("type")
    if kind == "text":
        return counter.count(str(block.get("text", "")))
    if kind == "image":
        return IMAGE_TOKENS
    if kind == "document":
        source = block.get("source")
        source = source if isinstance(source, Mapping) else {}
        if source.get("type") == "base64":
            return len(str(source.get("data", ""))) // BINARY_B64_CHARS_PER_TOKEN
        if source.get("type") == "text":
            return counter.count(str(source.get("data", "")))
    elif kind == "tool_use":
        return counter.count(str(block.get("name", ""))) + counter.count(
            canonical_json(block.get("input", {})).decode()
        )
    elif kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, str):
            return counter.count(content)
        if isinstance(content, Sequence):
            return sum(block_tokens(b, counter) for b in content if isinstance(b, Mapping))
    elif kind == "thinking":
        return counter.count(str(block.get("thinking", "")))
    return counter.count(canonical_json(_without_mark(block)).decode())


def mark_ttl(block: Mapping[str, Any]) -> CacheTtl | None:
    """The ttl of a block's ``cache_control`` mark, or None when it carries none."""
    mark = block.get("cache_control")
    if not mark:
        return None
    ttl = mark.get("ttl", "5m") if isinstance(mark, Mapping) else None
    if ttl == "5m":
        return "5m"
    if ttl == "1h":
        return "1h"
    raise ModelRequestError(
        400,
        "invalid_request_error",
        f"cache_control.ttl: Input should be '5m' or '1h', got {ttl!r}",
    )


@dataclass(frozen=True, slots=True)
class Position:
    """One content block in cache order: the key of the prefix ending here and its size."""

    key: bytes
    tokens: int
    end: int
    """Tokens of the whole prefix, this block included."""
    ttl: CacheTtl | None
    """The block's mark, None when it carries no ``cache_control``."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """A request body split into positions; computed once, accounted by ``CacheSim``."""

    model: str
    positions: tuple[Position, ...]

    @property
    def total_tokens(self) -> int:
        return self.positions[-1].end if self.positions else 0

    @property
    def marks(self) -> tuple[int, ...]:
        return tuple(i for i, p in enumerate(self.positions) if p.ttl is not None)


def _step(prev: bytes, tag: bytes, payload: bytes) -> bytes:
    return hashlib.sha256(prev + tag + b"\0" + payload).digest()


def split_prompt(body: Mapping[str, Any], counter: TokenCounter = DEFAULT_COUNTER) -> Prompt:
    """The positions of a Messages API body: tools, then system, then message blocks."""
    model = str(body.get("model", ""))
    key = hashlib.sha256(b"actline-cache-sim/1\0" + model.encode()).digest()
    out: list[Position] = []
    end = 0

    def add(tag: bytes, block: Mapping[str, Any], tokens: int) -> None:
        nonlocal key, end
        key = _step(key, tag, canonical_json(_without_mark(block)))
        end += tokens
        out.append(Position(key, tokens, end, mark_ttl(block)))

    for tool in body.get("tools") or ():
        add(b"tool", tool, counter.count(canonical_json(_without_mark(tool)).decode()))
    system = body.get("system")
    if isinstance(system, str):
        system = [_text_block(system)] if system else []
    for block in system or ():
        add(b"system", block, block_tokens(block, counter))
    settings = {k: body[k] for k in ("tool_choice", "thinking") if k in body}
    key = _step(key, b"settings", canonical_json(settings))
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            content = [_text_block(content)] if content else []
        blocks = content or ()
        for i, block in enumerate(blocks):
            tag = b"role:" + str(message.get("role")).encode() if i == 0 else b"block"
            add(tag, block, block_tokens(block, counter))
    return Prompt(model, tuple(out))


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """The input side of one call's usage, or a sum of them."""

    input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0

    @property
    def total(self) -> int:
        """All prompt tokens: read + creation + uncached input."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def cost_ratio(self) -> float:
        """Input cost relative to no caching (the provider's prices); 1.0 for an empty prompt."""
        if not self.total:
            return 1.0
        weighted = (
            self.input_tokens
            + 1.25 * self.ephemeral_5m_input_tokens
            + 2 * self.ephemeral_1h_input_tokens
            + 0.1 * self.cache_read_input_tokens
        )
        return weighted / self.total

    def __add__(self, other: CacheUsage) -> CacheUsage:
        return CacheUsage(
            self.input_tokens + other.input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.ephemeral_5m_input_tokens + other.ephemeral_5m_input_tokens,
            self.ephemeral_1h_input_tokens + other.ephemeral_1h_input_tokens,
        )


@dataclass(frozen=True, slots=True)
class CacheWrite:
    """An entry a request will write once its response begins."""

    key: bytes
    position: int
    ttl: CacheTtl
    expires: float


@dataclass(frozen=True, slots=True)
class CachePlan:
    """What ``account`` decided: the usage to report and the writes ``commit`` applies."""

    usage: CacheUsage
    writes: tuple[CacheWrite, ...]
    hit: int | None
    """Position of the longest prefix read from the cache, None on a miss."""


class CacheSim:
    """The cache of one API account: entries by prefix key, each with its expiry.

    ``min_cache_tokens`` overrides the per-model minimum of ``actline.llm.config``.
    Not thread-safe; one instance per server or benchmark run.
    """

    def __init__(
        self,
        *,
        min_cache_tokens: int | None = None,
        counter: TokenCounter = DEFAULT_COUNTER,
        lookback: int = LOOKBACK,
    ) -> None:
        self._min_override = min_cache_tokens
        self._counter = counter
        self._lookback = lookback
        self._entries: dict[bytes, tuple[float, float]] = {}  # key -> (expires, ttl seconds)
        self._commits = 0
        self.totals = CacheUsage()
        """Sum of the usage of every accounted request."""
        self.requests = 0

    def min_tokens(self, model: str) -> int:
        """The smallest prefix, in tokens, that a mark may write for ``model``."""
        if self._min_override is not None:
            return self._min_override
        return model_spec(model).min_cache_tokens

    @property
    def entry_count(self) -> int:
        """Entries held, including any expired ones not swept yet."""
        return len(self._entries)

    def expire_all(self) -> None:
        """Forget every entry, as if all had expired."""
        self._entries.clear()

    def split(self, body: Mapping[str, Any]) -> Prompt:
        """``split_prompt`` with this simulator's counter (to size a prompt before accounting)."""
        return split_prompt(body, self._counter)

    def _live(self, key: bytes, now: float) -> tuple[float, float] | None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] <= now:
            del self._entries[key]
            return None
        return entry

    def account(self, request: Mapping[str, Any] | Prompt, now: float) -> CachePlan:
        """The usage of ``request`` at ``now``; applies read refreshes, not writes."""
        prompt = request if isinstance(request, Prompt) else self.split(request)
        positions = prompt.positions
        marks = prompt.marks
        minimum = self.min_tokens(prompt.model)
        if not marks or positions[marks[-1]].end < minimum:
            return self._plan(CacheUsage(input_tokens=prompt.total_tokens), (), None)
        hit: int | None = None
        for mark in marks:
            for j in range(mark, max(mark - self._lookback, -1), -1):
                if self._live(positions[j].key, now) is not None:
                    if hit is None or j > hit:
                        hit = j
                    break
        read = 0
        if hit is not None:
            key = positions[hit].key
            expires, seconds = self._entries[key]
            self._entries[key] = (max(expires, now + seconds), seconds)
            read = positions[hit].end
        eligible = [m for m in marks if positions[m].end >= minimum]
        by_ttl = {"5m": 0, "1h": 0}
        covered = read
        writes: list[CacheWrite] = []
        for mark in eligible:
            position = positions[mark]
            ttl: CacheTtl = position.ttl or "5m"
            if position.end > covered:
                by_ttl[ttl] += position.end - covered
                covered = position.end
            writes.append(CacheWrite(position.key, mark, ttl, now + TTL_SECONDS[ttl]))
        last = positions[eligible[-1]].end
        usage = CacheUsage(
            input_tokens=prompt.total_tokens - last,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=last - read,
            ephemeral_5m_input_tokens=by_ttl["5m"],
            ephemeral_1h_input_tokens=by_ttl["1h"],
        )
        return self._plan(usage, tuple(writes), hit)

    def _plan(
        self, usage: CacheUsage, writes: tuple[CacheWrite, ...], hit: int | None
    ) -> CachePlan:
        self.totals += usage
        self.requests += 1
        return CachePlan(usage, writes, hit)

    def commit(self, plan: CachePlan, now: float) -> None:
        """Make the plan's writes readable (its response has begun at ``now``).

        An entry never loses time: a write keeps the later of the old and new expiry.
        """
        for write in plan.writes:
            old = self._entries.get(write.key)
            ttl = TTL_SECONDS[write.ttl]
            if old is not None and old[0] > now:
                self._entries[write.key] = (max(old[0], write.expires), max(old[1], ttl))
            elif write.expires > now:
                self._entries[write.key] = (write.expires, ttl)
        self._commits += 1
        if self._commits % _SWEEP_EVERY == 0:
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}

    def run(self, request: Mapping[str, Any] | Prompt, now: float) -> CacheUsage:
        """``account`` then ``commit`` at the same time: a call whose response began at once."""
        plan = self.account(request, now)
        self.commit(plan, now)
        return plan.usage
