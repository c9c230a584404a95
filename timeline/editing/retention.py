"""Tool-response retention: old tool results shown by a short view, kept whole in storage.

Nothing is rewritten. A retained result stays stored whole at its path; it is hidden
(``Timeline.set_hidden``, like TTL pruning and react.hide) and the rendered view shows a
replacement that names the path that reopens it (``react.read``).

- ``classify``: ``critical`` (the tool matches ``retention_critical_tools``),
  ``verbose`` (at least ``retention_max_tokens`` tokens or ``retention_max_chars``
  characters), ``redundant`` (exactly ok / true / null / empty), else ``informative``.
- ``policy_for``: the first ``retention_by_tool`` pattern that matches the tool
  wins; otherwise the policy of the class (``retention_<class>``).
- Policies (``replacement``): ``keep_full`` leaves the result alone;
  ``keep_structured`` shows a structured preview (the original's
  ``summarizeObject``); ``summarize_archive`` shows ``ARCHIVED tool result <path>
  (<N> tokens): <summary> — react.read <path> for the full result``; ``drop`` a
  one-line marker with the path. A view that would not be shorter than the
  result is not applied.
- The recency window: the results of the newest ``retention_recent_results``
  tool calls stay whole whatever their policy, and so do results the model has
  not seen yet (appended since the previous render, i.e. the round being rendered
  now). The original archived the freshest results and the model looped on
  fetching them again; here a result reopened by react.read (or un-hidden) is
  never retained again, nor is one hidden by the model or by TTL pruning.
- Cache: changing a result inside the cached prefix costs a cache write of
  everything after it. Results that leave the window in one round go together;
  ``retention_batch`` makes them wait until that many are out (``force`` skips
  the wait when the cache is cold anyway: the render after TTL pruning, and around
  a compaction). The renderer's restore point (``actline.timeline.cache``) then reads the
  prefix up to the oldest changed result, so a later batch only moves the change
  further back: bench/cache.py measured batches of 4 at +7 % cost over 1, the
  default.

A retained block carries ``meta["retention"] = {"class", "policy", "tokens", "tool"}``
(persisted with its restyle, read by the summary and by telemetry).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT, Block
from actline.timeline.cache import call_of, round_key
from actline.timeline.config import RETENTION_POLICIES, TimelineConfig
from actline.timeline.facts import canonical_facts, result_text
from actline.timeline.timeline import DirtyMark, Timeline
from actline.timeline.tokens import TokenCounter, block_tokens
from actline.timeline.view import preview

Classification = Literal["critical", "verbose", "redundant", "informative"]
Policy = Literal["keep_full", "keep_structured", "summarize_archive", "drop"]
RetentionStatus = Literal["disabled", "none", "waiting", "retained"]
CLASSIFICATIONS: tuple[Classification, ...] = ("critical", "verbose", "redundant", "informative")
POLICIES: tuple[str, ...] = RETENTION_POLICIES
MAX_VIEW_FACTS = 12
"""Canonical facts a retained result keeps in its view."""
META_KEY = "retention"

_REDUNDANT = frozenset({"", "ok", '"ok"', "true", "null", "none", "{}", "[]", '""'})


def classify(tool: str, text: str, tokens: int, cfg: TimelineConfig) -> Classification:
    """The class of one tool result (see the module docstring)."""
    if tool and any(fnmatchcase(tool, p) for p in cfg.retention_critical_tools):
        return "critical"
    if (cfg.retention_max_tokens and tokens >= cfg.retention_max_tokens) or (
        cfg.retention_max_chars and len(text) >= cfg.retention_max_chars
    ):
        return "verbose"
    if _redundant(text):
        return "redundant"
    return "informative"


def _redundant(text: str) -> bool:
    if len(text) > 64:
        return False
    flat = "".join(text.split()).lower()
    return flat in _REDUNDANT or flat == '{"status":"ok"}'


def policy_for(tool: str, classification: Classification, cfg: TimelineConfig) -> Policy:
    """A per-tool override (first matching pattern) wins; else the class's policy."""
    for pattern, policy in cfg.retention_by_tool:
        if tool and fnmatchcase(tool, pattern):
            return policy  # type: ignore[return-value]  # validated by TimelineConfig
    chosen: str = getattr(cfg, f"retention_{classification}")
    return chosen  # type: ignore[return-value]


def summarize_object(value: Any) -> str:
    """The original's ``summarizeObject``: a structured one-line preview of a value.

    Strings are cut at 240 characters; arrays show ``array(length=N)`` and their first
    three elements (120 characters each); objects ``object(keys=N)`` and their first six
    ``key=value`` pairs (values cut to 80 characters).
    """
    if isinstance(value, str):
        return _cut(" ".join(value[:1000].split()), 240)
    if isinstance(value, list):
        items = " | ".join(_cut(_flat(v), 120) for v in value[:3])
        return f"array(length={len(value)}) {items}".rstrip()
    if isinstance(value, dict):
        pairs = "; ".join(f"{k}={_cut(_flat(v), 80)}" for k, v in list(value.items())[:6])
        return f"object(keys={len(value)}) {pairs}".rstrip()
    return _flat(value)


def _flat(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value[:1000].split())
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _value(block: Block) -> Any:
    """The result as a value: its data, or its text parsed as JSON when it is JSON."""
    if block.data is not None and not block.text:
        return block.data
    text = block.content.strip()
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def replacement(
    policy: str, *, path: str, tokens: int, block: Block, cfg: TimelineConfig
) -> str | None:
    """The text shown instead of a result under ``policy`` (None for ``keep_full``)."""
    where = path or f"the result of call {block.call_id or '?'}"
    hint = f"react.read {where} for the full result" if path else "its full text is stored"
    if policy == "keep_full":
        return None
    facts = _facts_line(block)
    if policy == "keep_structured":
        return f"STRUCTURED tool result {where} ({tokens:,} tokens): " + (
            f"{summarize_object(_value(block))}{facts} — {hint}"
        )
    if policy == "summarize_archive":
        summary = preview(summarize_object(_value(block)), cfg.replacement_preview_chars)
        return f"ARCHIVED tool result {where} ({tokens:,} tokens): {summary}{facts} — {hint}"
    if policy == "drop":
        return f"DROPPED tool result {where} ({tokens:,} tokens) — {hint}"
    raise ValueError(f"unknown retention policy {policy!r}")


def _facts_line(block: Block) -> str:
    """The canonical facts (``LABEL|k=v`` lines, ``canonical_facts``) of a result, kept in its
    retained view: a verbose result's facts are what the model must not lose."""
    facts = canonical_facts(result_text(block))[:MAX_VIEW_FACTS]
    if not facts:
        return ""
    return " · facts: " + "; ".join(f"{f.key}={f.value}" for f in facts)


def tool_of(tl: Timeline, block: Block) -> str:
    """The tool whose result ``block`` is: ``meta.tool``, else its call block's ``tool``."""
    tool = block.meta.get("tool")
    if isinstance(tool, str) and tool:
        return tool
    call_id = call_of(block)
    if not call_id:
        return ""
    for call in tl.blocks_at(f"tc:{block.turn_id}.{call_id}.call"):  # canonical, as tc_path
        if call.type == TOOL_CALL and isinstance(call.data, dict):
            name = call.data.get("tool")
            if isinstance(name, str):
                return name
    return ""


@dataclass(frozen=True, slots=True)
class RetentionOutcome:
    """What one retention pass did: the paths retained and the tokens they no longer cost."""

    status: RetentionStatus
    retained: tuple[str, ...] = ()
    tokens_saved: int = 0
    pending: int = 0
    """Results outside the window waiting for a batch (after this pass)."""
    policies: tuple[tuple[str, int], ...] = ()
    """(policy, results) applied by this pass."""

    def merge(self, other: RetentionOutcome) -> RetentionOutcome:
        """This pass followed by ``other`` (in one render)."""
        if not self.retained:
            return other if other.status != "disabled" else self
        counts = dict(self.policies)
        for policy, n in other.policies:
            counts[policy] = counts.get(policy, 0) + n
        return RetentionOutcome(
            "retained",
            self.retained + other.retained,
            self.tokens_saved + other.tokens_saved,
            other.pending,
            tuple(sorted(counts.items())),
        )


DISABLED = RetentionOutcome("disabled")


@dataclass(slots=True)
class Pending:
    """A result outside the recency window, with the view that would show it."""

    block: Block
    text: str
    saved: int
    meta: dict[str, Any]


class RetentionState:
    """What retention remembers between renders so that a pass costs O(new results).

    The tool results of the visible window in order, how many of them have been
    decided (retained, pending or never to be retained) and the pending ones. A
    change before the scanned end (an insert, a hide) rescans from there.
    """

    def __init__(self, tl: Timeline) -> None:
        self.timeline = tl
        self._mark: DirtyMark = tl.watch()
        self._mark.position = 0
        self._start = -1
        self._scanned: Block | None = None
        self.results: list[Block] = []
        self.decided = 0
        self.pending: list[Pending] = []

    def refresh(self) -> None:
        tl = self.timeline
        dirty = tl.take_dirty(self._mark)
        start = tl.visible_start
        if start != self._start:
            self._start, self.results, self.decided, self.pending = start, [], 0, []
            resume = start
        else:
            last = self._scanned
            resume = start if last is None else tl.index_of(last) + 1
            if dirty < resume:
                while self.results and tl.index_of(self.results[-1]) >= dirty:
                    self.results.pop()
                self.pending = [p for p in self.pending if tl.index_of(p.block) < dirty]
                self.decided = min(self.decided, len(self.results))
                resume = max(start, dirty)
        blocks = tl.blocks
        for i in range(resume, len(blocks)):
            if blocks[i].type == TOOL_RESULT:
                self.results.append(blocks[i])
        self._scanned = blocks[-1] if blocks else None


def _boundary(
    results: Sequence[Block], recent: int, fresh_since: float | None, turn_id: str | None = None
) -> int:
    """Index of the first result inside the recency window (results before it may go).
    With ``turn_id``, the window holds only that turn's results (and fresh ones)."""
    keys: set[str] = set()
    i = len(results)
    while i > 0:
        block = results[i - 1]
        key = round_key(block) or block.id
        fresh = fresh_since is not None and block.ts >= fresh_since
        if turn_id is not None and block.turn_id != turn_id and not fresh:
            break
        if key not in keys:
            if len(keys) >= max(1, recent) and not fresh:
                break
            keys.add(key)
        i -= 1
    return i


def apply(
    tl: Timeline,
    cfg: TimelineConfig,
    *,
    counter: TokenCounter,
    state: RetentionState | None = None,
    fresh_since: float | None = None,
    force: bool = False,
) -> RetentionOutcome:
    """Retain the tool results outside the recency window by policy (module docstring).

    ``fresh_since``: results stamped at or after it are new to the model (the time of the
    previous render) and stay whole. ``force`` applies what waits without a full batch
    (the cache is cold anyway). ``state`` (from the renderer) makes a pass incremental;
    without it the whole window is scanned.
    """
    if not cfg.retention:
        return DISABLED
    waiting = collect(tl, cfg, counter=counter, state=state, fresh_since=fresh_since)
    if not waiting:
        return RetentionOutcome("none")
    if not force and len(waiting) < max(1, cfg.retention_batch):
        return RetentionOutcome("waiting", pending=len(waiting))
    return retain(tl, waiting, state)


def collect(
    tl: Timeline,
    cfg: TimelineConfig,
    *,
    counter: TokenCounter,
    state: RetentionState | None = None,
    fresh_since: float | None = None,
    turn_id: str | None = None,
) -> list[Pending]:
    """The results outside the recency window that wait to be retained, oldest first (see
    ``apply``; with ``turn_id`` the window holds only that turn's results)."""
    state = state if state is not None else RetentionState(tl)
    state.refresh()
    results = state.results
    end = _boundary(results, cfg.retention_recent_results, fresh_since, turn_id)
    for block in results[state.decided : end]:
        pending = _decide(tl, block, cfg, counter)
        if pending is not None:
            state.pending.append(pending)
    state.decided = max(state.decided, end)
    waiting = [p for p in state.pending if not (p.block.hidden or p.block.replacement)]
    state.pending = waiting
    return list(waiting)


def retain(
    tl: Timeline, items: Sequence[Pending], state: RetentionState | None = None
) -> RetentionOutcome:
    """Show each of ``items`` by its short view (hidden, kept whole by path)."""
    counts: dict[str, int] = {}
    for item in items:
        item.block.meta[META_KEY] = item.meta
        tl.set_hidden([item.block], item.text)
        policy = str(item.meta["policy"])
        counts[policy] = counts.get(policy, 0) + 1
    if state is not None:
        done = {id(item) for item in items}
        state.pending = [p for p in state.pending if id(p) not in done]
    return RetentionOutcome(
        "retained",
        tuple(p.block.path for p in items),
        sum(p.saved for p in items),
        0 if state is None else len(state.pending),
        tuple(sorted(counts.items())),
    )


def _decide(
    tl: Timeline, block: Block, cfg: TimelineConfig, counter: TokenCounter
) -> Pending | None:
    """The pending retention of one result outside the window, or None to keep it."""
    if block.hidden or block.replacement or block.base64 or META_KEY in block.meta:
        return None
    tool = tool_of(tl, block)
    tokens = block_tokens(block, counter)
    text = block.content
    kind = classify(tool, text, tokens, cfg)
    policy = policy_for(tool, kind, cfg)
    view = replacement(policy, path=block.path, tokens=tokens, block=block, cfg=cfg)
    if view is None:
        return None
    saved = tokens - counter.count(view)
    if saved <= 0:
        return None
    meta = {"class": kind, "policy": policy, "tokens": tokens, "tool": tool}
    return Pending(block, view, saved, meta)


def retained_info(block: Block) -> dict[str, Any] | None:
    """``meta["retention"]`` of a block retention handled (None otherwise)."""
    info = block.meta.get(META_KEY)
    return info if isinstance(info, dict) else None
