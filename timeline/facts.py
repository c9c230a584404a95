"""Structured summaries and memory facts.

A compaction summary is a ``StructuredSummary``: stable facts with confidence,
active goals, open questions and discarded (obsolete) facts. It is stored on
its ``su:`` block (``meta["summary_record"]``) so the next compaction finds the
previous one, also after a reload. ``check_integrity`` compares a new summary
with the previous one: previous facts the new one lost (and did not discard)
are re-added, facts the new one lists as discarded are removed.

Facts come from the model's JSON (``parse_summary``), from tool output lines
such as ``PROJECT|code=ALPHA|budget=100`` (``canonical_facts``, confidence
0.98) and from ``[K] key: value`` notes (``note_facts``).

``FactBook`` is a conversation's (or a user's) memory: ``upsert`` supersedes an
active fact whose key gets a new value (the old one is kept, obsolete, with the
turn that superseded it); ``relevant`` ranks active facts against a query by
key/value token overlap plus recency; ``hotset`` is what ANNOUNCE shows. Its
rows persist like the sources pool (``fact/<hash>``).

Pure: no I/O, no clocks.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final, Literal

FACT_PREFIX: Final = "fact/"
CANONICAL_CONFIDENCE: Final = 0.98
NOTE_CONFIDENCE: Final = 0.9
DEFAULT_CONFIDENCE: Final = 0.7
IDENTIFIER_KEYS: Final = ("code", "id", "project", "name", "key")
CANONICAL_LINE: Final = re.compile(r"^[A-Z0-9_]+\|")
NOTE_FACT: Final = re.compile(r"\[K\]\s*([^:=\n]{1,80}?)\s*[:=]\s*(\S[^\n]*)")
_TOKEN: Final = re.compile(r"[a-z0-9]+")
_STOP: Final = frozenset(
    "a an and are as at be by do does for from has have how i in is it its me my of on or "
    "our so that the their this to was we what when where which who why will with you your".split()
)


def normalize_segment(text: str) -> str:
    """Lower case, non-alphanumerics to ``_``, trimmed; ``item`` when empty."""
    return re.sub(r"[^a-z0-9]+", "_", text.strip().lower()).strip("_") or "item"


def fact_key(text: str) -> str:
    """The comparable form of a fact key: lower case, spaces, ``-`` and ``_`` as one ``_``."""
    return re.sub(r"[\s_\-]+", "_", str(text).strip().lower()).strip("_")


@dataclass(frozen=True, slots=True)
class Fact:
    """One stable fact; ``turn_id``, ``path`` and ``ts`` say where and when it was stated."""

    key: str
    value: str
    confidence: float = DEFAULT_CONFIDENCE
    source: str = ""
    turn_id: str = ""
    path: str = ""
    ts: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fact:
        return cls(
            fact_key(data.get("key", "")) or "unknown",
            str(data.get("value", "")),
            _confidence(data.get("confidence")),
            str(data.get("source") or ""),
            str(data.get("turn_id") or ""),
            str(data.get("path") or ""),
            float(data.get("ts") or 0.0),
        )


def _confidence(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return DEFAULT_CONFIDENCE
    return min(1.0, max(0.0, float(value)))


@dataclass(frozen=True, slots=True)
class IntegrityReport:
    """What the integrity check repaired (keys); ``passed`` holds after the repair."""

    lost_readded: tuple[str, ...] = ()
    revived_removed: tuple[str, ...] = ()

    @property
    def repaired(self) -> bool:
        return bool(self.lost_readded or self.revived_removed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": True,
            "lost_readded": list(self.lost_readded),
            "revived_removed": list(self.revived_removed),
        }


@dataclass(frozen=True, slots=True)
class StructuredSummary:
    """A compaction summary as data; ``render`` is what the model reads."""

    stable_facts: tuple[Fact, ...] = ()
    active_goals: tuple[str, ...] = ()
    open_questions: tuple[str, ...] = ()
    discarded: tuple[str, ...] = ()
    """Obsolete facts: ``key`` (any value) or ``key: value`` (that value only)."""
    raw_summary: str = ""

    def render(self) -> str:
        """ "Context summary:" and its sections (empty ones omitted), then the narrative."""
        sections = [
            ("Stable facts:", [f"- {f.key}: {f.value}" for f in self.stable_facts]),
            ("Active goals:", [f"- {g}" for g in self.active_goals]),
            ("Open questions:", [f"- {q}" for q in self.open_questions]),
            ("Discarded obsolete:", [f"- {d}" for d in self.discarded]),
        ]
        out = ["Context summary:"]
        for title, lines in sections:
            if lines:
                out.append(title)
                out.extend(lines)
        if self.raw_summary.strip():
            out.append("Narrative:")
            out.append(self.raw_summary.strip())
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stable_facts": [f.to_dict() for f in self.stable_facts],
            "active_goals": list(self.active_goals),
            "open_questions": list(self.open_questions),
            "discarded_obsolete": list(self.discarded),
            "raw_summary": self.raw_summary,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StructuredSummary:
        facts = data.get("stable_facts") or ()
        return cls(
            tuple(Fact.from_dict(f) for f in facts if isinstance(f, Mapping)),
            _strings(data.get("active_goals")),
            _strings(data.get("open_questions")),
            _strings(data.get("discarded_obsolete", data.get("obsolete_discarded"))),
            str(data.get("raw_summary") or data.get("rawSummary") or ""),
        )


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return ()
    return tuple(str(v).strip() for v in value if str(v).strip())


# -- parsing the model's answer ---------------------------------------------------------------


def extract_json(text: str) -> str | None:
    """The first fenced JSON block, else ``{`` to the last ``}``, else None."""
    fenced = re.search(r"```(?:json)?\s*([\s\S]*?)```", text, re.IGNORECASE)
    if fenced and fenced.group(1).strip():
        return fenced.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else None


def parse_summary(text: str) -> StructuredSummary | None:
    """The model's structured summary, or None when ``text`` holds no JSON object.

    Aliases: ``obsolete_discarded`` for ``discarded_obsolete``, ``rawSummary`` for
    ``raw_summary``; a fact without a confidence gets 0.7. Unlike the original, a
    summary without facts gets none (no ``fact_i`` lines made from the raw text).
    """
    raw = extract_json(text)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    facts = []
    for item in data.get("stable_facts") or ():
        if isinstance(item, Mapping) and str(item.get("key") or "").strip():
            facts.append(replace(Fact.from_dict(item), source="model", turn_id="", ts=0.0))
    parsed = StructuredSummary.from_dict(data)
    return replace(parsed, stable_facts=tuple(facts))


def merge_facts(summary: StructuredSummary, extra: Iterable[Fact]) -> StructuredSummary:
    """Add ``extra`` facts: for the same key, higher or equal confidence wins."""
    merged = {fact_key(f.key): f for f in summary.stable_facts}
    for f in extra:
        existing = merged.get(fact_key(f.key))
        if existing is None or f.confidence >= existing.confidence:
            merged[fact_key(f.key)] = f
    return replace(summary, stable_facts=tuple(merged.values()))


def result_text(block: Any) -> str:
    """A tool result's text as the tool wrote it (a ``Block``): the string fields of its
    data (a JSON result's content keeps its own lines), else its content."""
    data = block.data
    if isinstance(data, dict):
        texts = [v for v in data.values() if isinstance(v, str)]
        if texts:
            return "\n".join(texts)
    return str(block.content)


def canonical_facts(text: str, *, turn_id: str = "", path: str = "", ts: float = 0.0) -> list[Fact]:
    """Facts from ``LABEL|k=v|...`` lines of tool output (confidence 0.98)."""
    out: dict[str, Fact] = {}
    for line in text.splitlines():
        line = line.strip()
        if not CANONICAL_LINE.match(line) or "=" not in line:
            continue
        segments = [s.strip() for s in line.split("|") if s.strip()]
        entries = []
        for segment in segments[1:]:
            name, eq, value = segment.partition("=")
            if eq and name.strip():
                entries.append((name.strip(), value.strip()))
        if not entries:
            continue
        label = normalize_segment(segments[0])
        ident = next((v for k, v in entries if k.lower() in IDENTIFIER_KEYS), None)
        prefix = f"{label}.{normalize_segment(ident)}" if ident else label
        for name, value in entries:
            key = f"{prefix}.{normalize_segment(name)}"
            out[key] = Fact(
                key, value, CANONICAL_CONFIDENCE, "canonical_tool_output", turn_id, path, ts
            )
    return list(out.values())


def note_facts(text: str, *, turn_id: str = "", path: str = "", ts: float = 0.0) -> list[Fact]:
    """Facts from ``[K] key: value`` (or ``key = value``) lines of a note, in order (a key
    given twice is there twice: the later value is the newer)."""
    out: list[Fact] = []
    for m in NOTE_FACT.finditer(text):
        key, value = fact_key(m.group(1)), m.group(2).strip()
        if key and value:
            out.append(Fact(key, value, NOTE_CONFIDENCE, "note", turn_id, path, ts))
    return out


# -- the integrity check ----------------------------------------------------------------------


def _discarded(entries: Iterable[str], *, with_value_only: bool = False) -> list[tuple[str, str]]:
    out = []
    for entry in entries:
        parts = re.split(r"\s*[:=]\s*", entry, maxsplit=1)
        key, value = (parts[0], parts[1]) if len(parts) == 2 else (entry, "")
        if with_value_only and not value.strip():
            continue
        out.append((fact_key(key), value.strip()))
    return out


def _matches(fact: Fact, entries: Sequence[tuple[str, str]]) -> bool:
    key = fact_key(fact.key)
    return any(k == key and (not v or v == fact.value.strip()) for k, v in entries)


def check_integrity(
    new: StructuredSummary, previous: StructuredSummary | None
) -> tuple[StructuredSummary, IntegrityReport]:
    """Repair ``new`` against ``previous`` and report what was repaired.

    Revived: a new fact matched by a discarded entry of ``new`` (``key`` matches any
    value, ``key: value`` that value), or by a ``key: value`` entry of ``previous``,
    is removed. Lost: a previous fact whose key ``new`` does not have and does not
    discard is re-added. A key with a new value is an update, not a loss.
    """
    discarded = _discarded(new.discarded)
    if previous is not None:
        discarded += _discarded(previous.discarded, with_value_only=True)
    kept: list[Fact] = []
    revived: list[Fact] = []
    for f in new.stable_facts:
        (revived if _matches(f, discarded) else kept).append(f)
    lost: list[Fact] = []
    if previous is not None:
        keys = {fact_key(f.key) for f in kept}
        own = _discarded(new.discarded)
        for f in previous.stable_facts:
            if fact_key(f.key) not in keys and not _matches(f, own):
                lost.append(f)
                keys.add(fact_key(f.key))
    report = IntegrityReport(
        tuple(f.key for f in lost), tuple(dict.fromkeys(f.key for f in revived))
    )
    return replace(new, stable_facts=(*kept, *lost)), report


# -- the fact book -----------------------------------------------------------------------------

Scope = Literal["conversation", "user"]
SCOPES: Final = ("conversation", "user")


@dataclass(slots=True)
class MemoryFact:
    """A fact in a ``FactBook``: active, or obsolete (superseded by ``superseded_by``)."""

    key: str
    value: str
    confidence: float
    source: str
    turn_id: str
    path: str
    ts: float
    """When the fact was stated (what decides which value is newer)."""
    updated_at: float
    status: Literal["active", "obsolete"] = "active"
    superseded_by: str = ""
    """The turn whose value replaced this one."""
    conversation_id: str = ""

    @property
    def row_key(self) -> str:
        return row_key(self.key, self.value)

    def line(self) -> str:
        """``key: value (turn t3)``: how ANNOUNCE shows it."""
        turn = f" (turn {self.turn_id})" if self.turn_id else ""
        return f"{self.key}: {self.value}{turn}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryFact:
        status: Literal["active", "obsolete"] = (
            "obsolete" if data.get("status") == "obsolete" else "active"
        )
        return cls(
            fact_key(data.get("key", "")),
            str(data.get("value", "")),
            _confidence(data.get("confidence")),
            str(data.get("source") or ""),
            str(data.get("turn_id") or ""),
            str(data.get("path") or ""),
            float(data.get("ts") or 0.0),
            float(data.get("updated_at") or 0.0),
            status,
            str(data.get("superseded_by") or ""),
            str(data.get("conversation_id") or ""),
        )


def row_key(key: str, value: str) -> str:
    digest = hashlib.sha256(f"{fact_key(key)}\x00{value.strip()}".encode()).hexdigest()
    return f"{FACT_PREFIX}{digest[:24]}"


@functools.lru_cache(maxsize=4096)
def tokens(text: str) -> frozenset[str]:
    """Lower-case word tokens without stop words; a plural ``s`` is dropped.

    Remembered: every round scores the same facts (and often the same query) again.
    """
    out = set()
    for t in _TOKEN.findall(text.lower().replace("_", " ")):
        if t in _STOP:
            continue
        out.add(t[:-1] if len(t) > 3 and t.endswith("s") and not t.endswith("ss") else t)
    return frozenset(out)


@dataclass(slots=True)
class FactBook:
    """Memory facts by ``(key, value)``; at most one active fact per key."""

    facts: dict[str, MemoryFact] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)
    revision: int = 0

    def upsert(self, fact: Fact, *, now: float, conversation_id: str = "") -> MemoryFact:
        """Record ``fact``, in time order.

        Same key and value: confidence is the max, turn, path and times are refreshed.
        A new value stated at or after the active one's time makes the active one
        obsolete (``superseded_by`` the new fact's turn); an older one is kept obsolete.
        """
        key, value = fact_key(fact.key), fact.value.strip()
        stated = fact.ts or now
        rk = row_key(key, value)
        active = self.current(key)
        existing = self.facts.get(rk)
        if existing is not None and existing is active:
            existing.confidence = max(existing.confidence, fact.confidence)
            if stated >= existing.ts:
                existing.ts, existing.turn_id = stated, fact.turn_id or existing.turn_id
                existing.path = fact.path or existing.path
            existing.updated_at = max(existing.updated_at, now)
            self._changed(rk)
            return existing
        newer = active is None or stated >= active.ts
        record = existing or MemoryFact(
            key,
            value,
            fact.confidence,
            fact.source,
            fact.turn_id,
            fact.path,
            stated,
            now,
            conversation_id=conversation_id,
        )
        if existing is not None:
            record.confidence = max(record.confidence, fact.confidence)
            if stated >= record.ts:
                record.ts, record.turn_id = stated, fact.turn_id or record.turn_id
                record.path = fact.path or record.path
            record.updated_at = now
        if newer:
            if active is not None:
                active.status, active.superseded_by = "obsolete", fact.turn_id or "?"
                active.updated_at = now
                self._changed(active.row_key)
            record.status, record.superseded_by = "active", ""
        else:
            assert active is not None
            record.status = "obsolete"
            record.superseded_by = record.superseded_by or active.turn_id or "?"
        self.facts[rk] = record
        self._changed(rk)
        return record

    def _changed(self, rk: str) -> None:
        self.dirty.add(rk)
        self.revision += 1

    def current(self, key: str) -> MemoryFact | None:
        """The active fact of ``key`` (the newest when a merge left two)."""
        key = fact_key(key)
        found = [f for f in self.facts.values() if f.key == key and f.status == "active"]
        return max(found, key=lambda f: (f.ts, f.updated_at)) if found else None

    def active(self) -> list[MemoryFact]:
        """One active fact per key, most recently updated first."""
        best: dict[str, MemoryFact] = {}
        for f in self.facts.values():
            if f.status != "active":
                continue
            old = best.get(f.key)
            if old is None or (f.ts, f.updated_at) > (old.ts, old.updated_at):
                best[f.key] = f
        return sorted(best.values(), key=lambda f: (f.updated_at, f.ts), reverse=True)

    def history(self, key: str) -> list[MemoryFact]:
        """Every value ``key`` had, oldest first."""
        key = fact_key(key)
        return sorted((f for f in self.facts.values() if f.key == key), key=lambda f: f.ts)

    def _scored(self, query: str) -> list[tuple[float, float, MemoryFact]]:
        wanted = tokens(query)
        active = self.active()
        out = []
        for rank, f in enumerate(active):
            key_hits = len(wanted & tokens(f.key))
            value_hits = len(wanted & tokens(f.value))
            overlap = (2.0 * key_hits + value_hits) / (2.0 * len(wanted)) if wanted else 0.0
            recency = 1.0 / (1.0 + rank)
            out.append((overlap, overlap + 0.2 * recency + 0.05 * f.confidence, f))
        return out

    def relevant(self, query: str, k: int) -> list[MemoryFact]:
        """The ``k`` active facts that best match ``query``: key tokens count twice as
        much as value tokens, then recency and confidence break ties."""
        if k <= 0:
            return []
        scored = sorted(self._scored(query), key=lambda s: s[1], reverse=True)
        return [f for _, _, f in scored[:k]]

    def search(self, query: str, k: int) -> list[tuple[float, MemoryFact]]:
        """Active facts sharing at least one token with ``query``, best first, scored."""
        scored = [(score, f) for overlap, score, f in self._scored(query) if overlap > 0]
        scored.sort(key=lambda s: s[0], reverse=True)
        return scored[:k]

    def hotset(self, query: str, k: int) -> list[str]:
        """ANNOUNCE's lines: the ``k`` most relevant active facts."""
        return [f.line() for f in self.relevant(query, k)]

    # -- rows ---------------------------------------------------------------------------------

    def take_dirty(self) -> dict[str, Any]:
        """Rows (``fact/<hash>`` -> dict) changed since the last call."""
        rows = {rk: self.facts[rk].to_dict() for rk in sorted(self.dirty) if rk in self.facts}
        self.dirty.clear()
        return rows

    def mark_dirty(self, keys: Iterable[str] | None = None) -> None:
        """Report these rows again (all of them when ``keys`` is None)."""
        self.dirty.update(self.facts if keys is None else (k for k in keys if k in self.facts))

    def rows(self) -> dict[str, Any]:
        return {rk: f.to_dict() for rk, f in self.facts.items()}

    @classmethod
    def from_rows(cls, rows: Mapping[str, Any]) -> FactBook:
        """The book of stored rows (other rows are ignored)."""
        facts = {
            key: MemoryFact.from_dict(value)
            for key, value in rows.items()
            if key.startswith(FACT_PREFIX) and isinstance(value, Mapping)
        }
        return cls(facts)

    def __len__(self) -> int:
        return len(self.facts)
