"""The sources pool: rows the model can cite as ``[[S:n]]``, with SIDs that never change.

A row's identity is its key: ``local:<physical_path>`` for a local file, else the
normalised URL. SIDs are handed out 1, 2, 3, ... in order of arrival and are never
reused, never moved and never left with gaps: a proposed SID from a tool is only a
name for remapping, never kept. A row whose key is already in the pool merges into
the existing row (the richer title, text and content win) and keeps its SID.

Only eligible rows enter: anything with an http(s) URL (web search, fetch, skills),
and local files, attachments and produced files only when their MIME is ``image/*``.

Pure code: no I/O. Rows returned by the pool are its live objects; callers may read
them but must not change ``url`` or ``physical_path`` (the key) in place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from actline.timeline.errors import SourceError

__all__ = ["SourceRow", "SourcesPool", "is_eligible", "normalize_url", "pool_text"]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_PORT_LIKE_RE = re.compile(r"^\d*(?:[/?#]|$)")
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}
_TRACKING = frozenset({"gclid", "fbclid"})
_TRAILING_SLASHES = re.compile(r"[/\s]+$")
_PERCENT_RE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_FILE_PROVIDERS = frozenset({"file", "attachment", "output"})
TRUNCATED = "…(truncated)"


def normalize_url(url: str) -> str:
    """The canonical form of ``url`` used as a pool key; a fixed point of itself.

    http(s): scheme and host lower-cased, userinfo dropped, the default port (``:80``
    for http, ``:443`` for https) removed as a suffix, an empty path becomes ``/``,
    trailing slashes dropped except for the root, the fragment dropped, and query
    parameters named ``utm_*``, ``gclid`` or ``fbclid`` removed while the others keep
    their order and encoding. Percent-encoding is normalised in the host, path and
    query (RFC 3986 §6.2.2): an escaped unreserved character (``%7E``, ``%41``) is
    decoded and every other escape gets upper-case hex digits (``%2f`` -> ``%2F``), so
    ``/a%2fb`` and ``/a%2Fb`` are one source. Without a scheme, ``https://`` is
    assumed and the first segment is the host. Other schemes (``mailto:``, ``ftp://``)
    only get their scheme lower-cased. Raises ``SourceError`` for an empty or blank input.
    """
    text = url.strip()
    if not text:
        raise SourceError("empty url")
    match = _SCHEME_RE.match(text)
    if match and (match.group(2).startswith("//") or not _PORT_LIKE_RE.match(match.group(2))):
        scheme, rest = match.group(1).lower(), match.group(2)
        if scheme not in _DEFAULT_PORTS or not rest.startswith("//"):
            return f"{scheme}:{rest}"
        rest = rest[2:]
    else:  # "example.com/path", "localhost:8080/x", "//cdn.example.com/a"
        scheme, rest = "https", text.lstrip("/")
    return _normalize_http(scheme, rest)


def _normalize_http(scheme: str, rest: str) -> str:
    """Normalise what follows ``scheme://``."""
    rest = rest.partition("#")[0]
    cut = next((i for i, char in enumerate(rest) if char in "/?"), len(rest))
    netloc, rest = rest[:cut], rest[cut:]
    rest, _, query = rest.partition("?")
    rest, query = _normalize_percent(rest), _normalize_percent(query)
    host = netloc.rpartition("@")[2]
    host = _normalize_percent(_normalize_percent(host).strip().lower())  # hex upper again
    previous = None
    while host != previous:  # "a.com:443:" -> "a.com"; a loop keeps the result a fixed point
        previous = host
        host = host.removesuffix(_DEFAULT_PORTS[scheme]).rstrip().removesuffix(":")
    path = _TRAILING_SLASHES.sub("", rest) or "/"
    kept = [p for p in query.split("&") if p.strip() and not _is_tracking(p)]
    joined = "&".join(kept).rstrip()
    return f"{scheme}://{host}{path}" + (f"?{joined}" if joined else "")


def _normalize_percent(text: str) -> str:
    """RFC 3986 §6.2.2.1-2: decode escaped unreserved characters, upper-case other escapes.

    Repeated until nothing changes, so the result is a fixed point even for malformed
    input such as ``%%34%31`` (one pass would leave the new escape ``%41``).
    """
    previous = None
    while text != previous:
        previous = text
        text = _PERCENT_RE.sub(_percent_escape, text)
    return text


def _percent_escape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def _is_tracking(param: str) -> bool:
    name = param.partition("=")[0].strip().lower()
    return name.startswith("utm_") or name in _TRACKING


@dataclass(slots=True)
class SourceRow:
    """One source: a web page, a fetched document, a skill source or a local file.

    ``sid`` 0 means not assigned yet (a proposal from a tool); the pool assigns SIDs.
    """

    sid: int
    url: str = ""
    title: str = ""
    text: str = ""
    content: str = ""
    physical_path: str = ""
    mime: str = ""
    published_time_iso: str = ""
    favicon: str = ""
    provider: str = ""
    objective_relevance: float | None = None
    query_relevance: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def key(self) -> str:
        """``local:<physical_path>`` for a local file, else the normalised URL; "" for neither."""
        if self.physical_path:
            return f"local:{self.physical_path}"
        return normalize_url(self.url) if self.url.strip() else ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON/msgpack-safe dict without empty or None fields (``sid`` is always present)."""
        out: dict[str, Any] = {"sid": self.sid}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "sid" and value not in ("", None) and value != {}:
                out[f.name] = dict(value) if f.name == "extra" else value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SourceRow:
        """Read a row, accepting the original's aliases.

        ``url|href|value``, ``title|description``, ``text|body|value_preview`` and
        ``local_path`` for ``physical_path``; the first non-empty alias wins. Other
        unknown keys are ignored (put carried attributes under ``extra``). A value of the
        wrong type raises ``SourceError`` naming the key.
        """
        if not isinstance(d, Mapping):
            raise SourceError(f"a source row must be a mapping, not {type(d).__name__}")
        sid = d.get("sid") or 0
        if isinstance(sid, bool) or not isinstance(sid, int) or sid < 0:
            raise SourceError(f"field 'sid' must be an int >= 0, not {sid!r}")
        extra = d.get("extra") or {}
        if not isinstance(extra, Mapping) or not all(isinstance(k, str) for k in extra):
            raise SourceError("field 'extra' must be a mapping with str keys")
        return cls(
            sid=sid,
            url=_text(d, "url", "href", "value"),
            title=_text(d, "title", "description"),
            text=_text(d, "text", "body", "value_preview"),
            content=_text(d, "content"),
            physical_path=_text(d, "physical_path", "local_path"),
            mime=_text(d, "mime"),
            published_time_iso=_text(d, "published_time_iso"),
            favicon=_text(d, "favicon"),
            provider=_text(d, "provider"),
            objective_relevance=_number(d, "objective_relevance"),
            query_relevance=_number(d, "query_relevance"),
            extra=dict(extra),
        )

    def compact(self, limit: int = 500) -> dict[str, Any]:
        """The rendering row: sid, title, url, text cut to ``limit`` characters.

        The text (``content`` when there is no snippet) keeps at most ``limit`` characters
        followed by the ``…(truncated)`` marker; ``published_time_iso`` and ``favicon``
        appear only when set.
        """
        limit = max(limit, 0)
        text = self.text or self.content
        if len(text) > limit:
            text = text[:limit] + TRUNCATED
        out: dict[str, Any] = {"sid": self.sid, "title": self.title, "url": self.url, "text": text}
        if self.published_time_iso:
            out["published_time_iso"] = self.published_time_iso
        if self.favicon:
            out["favicon"] = self.favicon
        return out


def _text(d: Mapping[str, Any], *names: str) -> str:
    for name in names:
        value = d.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise SourceError(f"field {name!r} must be a string, not {type(value).__name__}")
        if value:
            return value
    return ""


def _number(d: Mapping[str, Any], name: str) -> float | None:
    value = d.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SourceError(f"field {name!r} must be a number, not {type(value).__name__}")
    return float(value)


def is_eligible(row: SourceRow) -> bool:
    """Whether ``row`` may enter the pool: http(s) rows always, files only as ``image/*``."""
    if row.physical_path or row.provider in _FILE_PROVIDERS:
        return row.mime.strip().lower().startswith("image/")
    return bool(row.url.strip()) and normalize_url(row.url).startswith(("http://", "https://"))


def _merge(into: SourceRow, new: SourceRow) -> bool:
    """Merge ``new`` into ``into`` (same key); return whether anything changed."""
    before = into.to_dict()
    for name in ("title", "text", "content"):
        if len(getattr(new, name)) > len(getattr(into, name)):
            setattr(into, name, getattr(new, name))
    # physical_path is never filled: it would change the key the SID points to.
    for name in ("url", "mime", "published_time_iso", "favicon", "provider"):
        if not getattr(into, name):
            setattr(into, name, getattr(new, name))
    for name in ("objective_relevance", "query_relevance"):
        values = [v for v in (getattr(into, name), getattr(new, name)) if v is not None]
        setattr(into, name, max(values) if values else None)
    for k, v in new.extra.items():
        into.extra.setdefault(k, v)
    return into.to_dict() != before


def _copy(row: SourceRow, sid: int) -> SourceRow:
    return replace(row, sid=sid, extra=dict(row.extra))


class SourcesPool:
    """The sources of one conversation, keyed by ``SourceRow.key()``, with stable SIDs.

    Invariants: every row has a key and a SID > 0; keys and SIDs are unique; a SID,
    once given, always points to the same key; new rows get ``next_sid`` and it grows.
    """

    __slots__ = ("_by_key", "_by_sid", "_dirty", "_next_sid", "_revision")

    def __init__(self, rows: Iterable[SourceRow] = (), next_sid: int = 1) -> None:
        """Restore a pool from rows that already have SIDs (copies are stored).

        Raises ``SourceError`` for a row without a key or SID, or a repeated key or SID.
        ``next_sid`` is raised past the highest SID, so gaps are never refilled.
        """
        self._by_sid: dict[int, SourceRow] = {}
        self._by_key: dict[str, int] = {}
        self._revision = 0
        self._dirty: set[int] = set()
        for row in rows:
            key = row.key()
            if not key or row.sid <= 0:
                raise SourceError(f"a restored row needs a key and a sid > 0: {row.sid} {key!r}")
            if row.sid in self._by_sid or key in self._by_key:
                raise SourceError(f"a restored row repeats sid {row.sid} or key {key!r}")
            self._by_sid[row.sid] = _copy(row, row.sid)
            self._by_key[key] = row.sid
        self._next_sid = max(next_sid, 1, max(self._by_sid, default=0) + 1)

    def add_rows(self, rows: Iterable[SourceRow]) -> list[SourceRow | None]:
        """Add ``rows``; return, for each input in order, the pool row it became or None.

        None means skipped: no key, or not eligible. A known key merges into the existing
        row (no new SID); a new key gets a copy of the row with the next SID. The input
        rows are never modified.
        """
        result: list[SourceRow | None] = []
        for row in rows:
            key = row.key()
            if not key or not is_eligible(row):
                result.append(None)
                continue
            sid = self._by_key.get(key)
            if sid is not None:
                existing = self._by_sid[sid]
                if _merge(existing, row):
                    self._revision += 1
                    self._dirty.add(sid)
                result.append(existing)
                continue
            added = _copy(row, self._next_sid)
            self._by_sid[added.sid] = added
            self._by_key[key] = added.sid
            self._next_sid += 1
            self._revision += 1
            self._dirty.add(added.sid)
            result.append(added)
        return result

    def add(self, rows: Iterable[SourceRow]) -> dict[int, int]:
        """Add ``rows``; return {proposed sid: final sid} for accepted rows that proposed one.

        Rows proposing sid 0 and skipped rows have no entry (use ``add_rows`` for a
        per-row answer). When two accepted rows propose the same SID, the later one wins.
        """
        rows = list(rows)
        return {
            row.sid: final.sid
            for row, final in zip(rows, self.add_rows(rows), strict=True)
            if final is not None and row.sid > 0
        }

    def get(self, sid: int) -> SourceRow | None:
        return self._by_sid.get(sid)

    def select(self, sids: Iterable[int]) -> list[SourceRow]:
        """The rows with ``sids`` in the given order; missing SIDs are skipped."""
        return [self._by_sid[s] for s in sids if s in self._by_sid]

    def find(self, url_or_path: str) -> SourceRow | None:
        """The row for a physical path, a ``local:`` key or a URL (normalised), or None."""
        if not url_or_path.strip():
            return None
        for key in (f"local:{url_or_path}", url_or_path):
            if key in self._by_key:
                return self._by_sid[self._by_key[key]]
        sid = self._by_key.get(normalize_url(url_or_path))
        return None if sid is None else self._by_sid[sid]

    def rows(self) -> list[SourceRow]:
        """The rows sorted by SID: a new list of the pool's live row objects."""
        return [self._by_sid[s] for s in sorted(self._by_sid)]

    def __len__(self) -> int:
        return len(self._by_sid)

    @property
    def revision(self) -> int:
        """A counter that grows on every change, so a renderer can cache the pool text."""
        return self._revision

    @property
    def next_sid(self) -> int:
        return self._next_sid

    def take_dirty(self) -> list[SourceRow]:
        """Rows added or changed since the last take, sorted by SID (storage writes them).

        A restored pool starts clean: its rows are stored already.
        """
        sids, self._dirty = sorted(self._dirty), set()
        return [self._by_sid[s] for s in sids]

    def mark_dirty(self, sids: Iterable[int] | None = None) -> None:
        """Report ``sids`` (every row when None) again on the next ``take_dirty``.

        For a write that failed after its take; unknown SIDs are ignored.
        """
        self._dirty.update(self._by_sid if sids is None else (s for s in sids if s in self._by_sid))

    def to_dict(self) -> dict[str, Any]:
        """``{"next_sid": n, "rows": [...]}``, JSON/msgpack-safe."""
        return {"next_sid": self._next_sid, "rows": [r.to_dict() for r in self.rows()]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SourcesPool:
        """Restore a pool from ``to_dict`` output (or the original's ``sources_pool`` list)."""
        if not isinstance(d, Mapping):
            raise SourceError(f"a sources pool must be a mapping, not {type(d).__name__}")
        rows = d.get("rows", d.get("sources_pool", []))
        if not isinstance(rows, list | tuple):
            raise SourceError("field 'rows' must be a list")
        next_sid = d.get("next_sid", 1)
        if isinstance(next_sid, bool) or not isinstance(next_sid, int):
            raise SourceError("field 'next_sid' must be an int")
        return cls((SourceRow.from_dict(r) for r in rows), next_sid)

    def compact_rows(self, limit: int = 500) -> list[dict[str, Any]]:
        """``SourceRow.compact`` of every row, sorted by SID."""
        return [r.compact(limit) for r in self.rows()]


def pool_text(pool: SourcesPool, limit: int = 500) -> str:
    """The pool as the uncached tail text block; the same pool gives the same bytes."""
    n = len(pool)
    if not n:
        return "SOURCES POOL (0 sources)"
    lines = [
        f"SOURCES POOL ({n} source{'' if n == 1 else 's'}): cite as [[S:n]]; "
        'reopen with react.read(["so:sources_pool[...]"])'
    ]
    for row in pool.rows():
        title = " ".join(row.title.split()) or "(untitled)"
        lines.append(f"[S:{row.sid}] {title} — {row.url or row.physical_path}")
        preview = row.compact(limit)["text"]
        lines.extend(f"    {line}" for line in preview.splitlines() if line.strip())
    return "\n".join(lines)
