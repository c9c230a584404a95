"""Citation tokens ``[[S:1]]``, ``[[S:1,3]]``, ``[[S:2-4]]`` and their rendering.

Grammar (bounded, so a token is never longer than 64 characters): two opening
brackets (ASCII or full-width), ``S`` (either case), a colon (ASCII or a
full-width variant), a body of digits, commas, spaces, hyphens, en or em
dashes, and two closing brackets; up to three spaces or tabs between parts.

The streaming ``CitationReplacer`` never emits part of a token: it holds back
the shortest tail that could still grow into a token, and at the end emits a
dangling tail as written. Replacement happens only in emitted text; callers
keep the raw text untouched.

A SID with no source in the map is never passed through silently: it renders as
the marker ``[?<sid>]`` (markdown and text; in html a ``<sup class="cite
unresolved">``), after the sources of the same token that did resolve, and the
replacer lists it in ``unresolved`` (the streamer tells the model, see
``actline.actors.pools.streamer``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

_OPEN = "[\\[\uff3b]"
_CLOSE = "[\\]\uff3d]"
_COLON = "[:\uff1a\ufe55\ufe30]"
_WS = "[ \\t]{0,3}"
_BODY = "[0-9][0-9 ,\\-\u2013\u2014]{0,40}"

TOKEN_RE = re.compile(
    f"{_OPEN}{_WS}{_OPEN}{_WS}[Ss]{_WS}{_COLON}{_WS}({_BODY}){_WS}{_CLOSE}{_WS}{_CLOSE}"
)


def _prefix_pattern(parts: list[str]) -> str:
    """A pattern matching every non-empty prefix of the concatenation of ``parts``."""
    pattern = ""
    for part in reversed(parts[1:]):
        pattern = f"(?:{part}{pattern})?"
    return parts[0] + pattern


PARTIAL_RE = re.compile(
    _prefix_pattern([_OPEN, _WS, _OPEN, _WS, "[Ss]", _WS, _COLON, _WS, _BODY, _WS, _CLOSE, _WS])
    + r"\Z"
)
MAX_TOKEN = 64
_HOLD_WINDOW = MAX_TOKEN + 8
_MAX_RANGE = 256
_MAX_CACHED = 4096
_SPLIT_RE = re.compile("[,]")
_RANGE_RE = re.compile("^\\s*(\\d+)\\s*[-\u2013\u2014]\\s*(\\d+)\\s*$")


@dataclass(frozen=True, slots=True)
class CitationSource:
    """What a citation renders to: a source's stable id, title and URL."""

    sid: int
    title: str = ""
    url: str = ""


CitationMap = Mapping[int, CitationSource]


def citation_map(sources: Iterable[Any] | Mapping[int, Any] | None) -> dict[int, CitationSource]:
    """Build a map from sources given as ``CitationSource``, dicts or objects.

    Dicts and objects may use ``sid``, ``title``, and ``url`` (or ``href``);
    a missing ``sid`` is the 1-based position in the list.
    """
    if sources is None:
        return {}
    items: Iterable[tuple[int | None, Any]]
    if isinstance(sources, Mapping):
        items = sources.items()
    else:
        items = ((None, s) for s in sources)
    result: dict[int, CitationSource] = {}
    for position, (key, src) in enumerate(items, start=1):
        if isinstance(src, CitationSource):
            result[src.sid] = src
            continue
        get = src.get if isinstance(src, Mapping) else lambda n, d=None, s=src: getattr(s, n, d)
        sid = get("sid", None)
        sid = int(sid) if sid is not None else (int(key) if key is not None else position)
        url = get("url", None) or get("href", None) or ""
        result[sid] = CitationSource(sid, str(get("title", "") or ""), str(url))
    return result


class LazyCitationMap(Mapping[int, CitationSource]):
    """``citation_map(sources)`` built on first use: a model call whose channels cite
    nothing (most tool rounds) never pays for indexing a large pool."""

    __slots__ = ("_built", "_sources")

    def __init__(self, sources: Iterable[Any] | Mapping[int, Any] | None) -> None:
        self._sources = sources
        self._built: dict[int, CitationSource] | None = None

    def _map(self) -> dict[int, CitationSource]:
        if self._built is None:
            self._built = citation_map(self._sources)
            self._sources = None
        return self._built

    def __getitem__(self, sid: int) -> CitationSource:
        return self._map()[sid]

    def __iter__(self) -> Iterator[int]:
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())

    def __contains__(self, sid: object) -> bool:
        return sid in self._map()


def expand_ids(body: str) -> list[int]:
    """SIDs of a token body: ``"1, 3"`` -> [1, 3]; ``"2-4"`` -> [2, 3, 4]; no repeats."""
    seen: dict[int, None] = {}
    for part in _SPLIT_RE.split(body):
        ranged = _RANGE_RE.match(part)
        if ranged:
            lo, hi = int(ranged.group(1)), int(ranged.group(2))
            if lo > hi:
                lo, hi = hi, lo
            for sid in range(lo, min(hi, lo + _MAX_RANGE - 1) + 1):
                seen.setdefault(sid, None)
            continue
        digits = part.strip()
        if digits.isdigit():
            seen.setdefault(int(digits), None)
    return list(seen)


def sids_in_text(text: str) -> list[int]:
    """Every SID cited in ``text``, sorted and unique."""
    found: set[int] = set()
    for match in TOKEN_RE.finditer(text):
        found.update(expand_ids(match.group(1)))
    return sorted(found)


_MD_ESCAPE = re.compile(r"([\\\[\]|])")


def _md_title(title: str) -> str:
    return _MD_ESCAPE.sub(r"\\\1", " ".join(title.split()))


def _md_url(url: str) -> str:
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def _attr(value: str) -> str:
    return html.escape(value, quote=True)


def unresolved_marker(sids: Iterable[int], fmt: str) -> str:
    """The marker of SIDs that match no source: ``[?9] [?12]``, or an html ``<sup>``."""
    sids = list(sids)
    if fmt == "html":
        data = ",".join(str(s) for s in sids)
        marks = ", ".join(f"?{s}" for s in sids)
        return f'<sup class="cite unresolved" data-sids="{data}">{marks}</sup>'
    return " ".join(f"[?{s}]" for s in sids)


def render(sources: list[CitationSource], fmt: str) -> str:
    """Render resolved sources for one token in a channel format."""
    if fmt == "html":
        sids = ",".join(str(s.sid) for s in sources)
        links = ", ".join(
            f'<a href="{_attr(s.url)}" title="{_attr(s.title)}">{s.sid}</a>'
            if s.url
            else str(s.sid)
            for s in sources
        )
        return f'<sup class="cite" data-sids="{sids}">{links}</sup>'
    if fmt == "markdown":
        parts = []
        for s in sources:
            title = _md_title(s.title) or str(s.sid)
            parts.append(f"[{title}]({_md_url(s.url)})" if s.url else title)
        return " ".join(parts)
    return "[" + ", ".join(str(s.sid) for s in sources) + "]"


class CitationReplacer:
    """Replaces citation tokens in a stream of text pieces, never splitting a token."""

    __slots__ = ("_fmt", "_map", "_pending", "_rendered", "unresolved", "used")

    def __init__(self, cmap: CitationMap, fmt: str) -> None:
        self._map = cmap
        self._fmt = fmt
        self._pending = ""
        self._rendered: dict[str, str] = {}
        self.used: dict[int, None] = {}
        self.unresolved: dict[int, None] = {}

    def _replace(self, match: re.Match[str]) -> str:
        token = match.group(0)
        rendered = self._rendered.get(token)
        if rendered is not None:
            return rendered  # answers cite the same few sources again and again
        ids = expand_ids(match.group(1))
        found = [self._map[i] for i in ids if i in self._map]
        missing = [i for i in ids if i not in self._map]
        for i in ids:
            if i in self._map:
                self.used.setdefault(i, None)
            else:
                self.unresolved.setdefault(i, None)
        parts = [render(found, self._fmt)] if found else []
        if missing:
            parts.append(unresolved_marker(missing, self._fmt))
        rendered = " ".join(parts)
        if len(self._rendered) < _MAX_CACHED:
            self._rendered[token] = rendered
        return rendered

    def replace_all(self, text: str) -> str:
        """Replace every complete token in ``text`` (no holdback)."""
        if "[" not in text and "\uff3b" not in text:
            return text
        return TOKEN_RE.sub(self._replace, text)

    def feed(self, text: str) -> str:
        """Return what can be emitted now; a possible token start at the end is held."""
        if self._pending:
            text = self._pending + text
            self._pending = ""
        elif "[" not in text and "\uff3b" not in text:
            return text
        start = len(text) - _HOLD_WINDOW
        if start < 0:
            start = 0
        first = text.find("[", start)
        wide = text.find("\uff3b", start)
        if wide >= 0 and (first < 0 or wide < first):
            first = wide
        if first >= 0:
            partial = PARTIAL_RE.search(text, first)
            if partial is not None:
                self._pending = text[partial.start() :]
                text = text[: partial.start()]
        return self.replace_all(text)

    def flush(self) -> str:
        """End of the channel: a dangling partial token is emitted as written."""
        tail, self._pending = self._pending, ""
        return tail

    @property
    def pending(self) -> str:
        """Text held back because it may still become a token."""
        return self._pending


def replace_citations(text: str, sources: CitationMap, fmt: str = "markdown") -> str:
    """Replace every citation token in a complete text."""
    return CitationReplacer(sources, fmt).replace_all(text)
