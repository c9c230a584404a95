"""Text handling for the knowledge space: index terms, markdown documents and snippets.

``tokenize`` turns text into index terms the same way for documents and queries: lower-cased
unicode word runs, a small English stop-word list, the Snowball English stemmer (the
``snowballstemmer`` package), and compounds such as ``storage.retention`` or ``LR-1042`` kept whole
next to their parts. ``split_document`` reads the front matter (a small YAML subset between
``---`` lines), ``chunk_texts`` cuts a body at markdown headings outside code fences into
pieces of at most ``CHUNK_WORDS`` words, and ``snippet`` picks the sentences of a chunk that
best match a query. Pure functions, no I/O.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import NamedTuple

import snowballstemmer

__all__ = [
    "CHUNK_WORDS",
    "SNIPPET_CHARS",
    "STOP_WORDS",
    "DocParts",
    "chunk_texts",
    "identifiers",
    "snippet",
    "split_document",
    "tokenize",
]  # fmt: skip

CHUNK_WORDS = 200
SNIPPET_CHARS = 300

STOP_WORDS = frozenset(
    "a about after all also an and any are as at be been but by can could did do does doing "
    "for from had has have how i if in into is it its me much my no not of on or our out "
    "should so than that the their them then there these they this those to too us was we "
    "were what when where which while who whom why will with would you your".split()
)

_WORD_RE = re.compile(r"\w+(?:[.\-/]\w+)*")
_PART_RE = re.compile(r"[._\-/]+")
_NON_SPACE_RE = re.compile(r"\S+")
_HEADING_RE = re.compile(r" {0,3}#{1,6}\s+(.*)")
_FENCE_RE = re.compile(r" {0,3}(```|~~~)")
_BLOCK_RE = re.compile(r"(#{1,6}\s|[-*+]\s|\d+\.\s|>|\|)")
_MARKER_RE = re.compile(r"^(#{1,6}\s+|[-*+]\s+|\d+\.\s+|>\s*)")
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`*(\"'])")
_META_RE = re.compile(r"([A-Za-z_][\w-]*)\s*:\s*(.*)")


_SNOWBALL = snowballstemmer.stemmer("english")
_SNOWBALL_LOCK = threading.Lock()  # a Snowball stemmer object keeps state between calls


def _stem(word: str) -> str:
    """Snowball English (Porter 2) for alphabetic words longer than three letters, the same
    for docs and queries: ``encryption`` and ``encrypted`` give ``encrypt``, ``policies``
    ``polici``, ``says`` ``say``. Chosen over the former light suffix stemmer by measurement
    (``bench/memsearch_libs.py``)."""
    if len(word) <= 3 or not word.isalpha():
        return word
    with _SNOWBALL_LOCK:
        return str(_SNOWBALL.stemWord(word))


def _plain_terms(word: str) -> tuple[str, ...]:
    return () if len(word) < 2 or word in STOP_WORDS else (_stem(word),)


@lru_cache(maxsize=1 << 16)
def _word_terms(word: str) -> tuple[str, ...]:
    parts = [p for p in _PART_RE.split(word) if p]
    if len(parts) == 1 and parts[0] == word:
        return _plain_terms(word)
    if all(p in STOP_WORDS for p in parts):
        return ()
    return (word, *(t for p in parts for t in _plain_terms(p)))


def tokenize(text: str) -> list[str]:
    """Index terms of ``text``: lower-cased word runs, stop words dropped, lightly stemmed.

    A compound such as ``storage.retention`` or ``LR-1042`` gives itself and its parts, so both
    ``retention`` and the whole key match.
    """
    terms: list[str] = []
    for word in _WORD_RE.findall(text.casefold()):
        terms.extend(_word_terms(word))
    return terms


def identifiers(text: str) -> list[str]:
    """The identifier-looking words of ``text``, lower-cased, once each, in order.

    A word run with a digit and a letter or an inner separator: ticket keys, host names,
    versions (``OPS-2291``, ``cache-stg-04``, ``3.11.9``, ``m6i.2xlarge``). Plain numbers and
    words are not identifiers.
    """
    found: dict[str, None] = {}
    for word in _WORD_RE.findall(text.casefold()):
        if any(c.isdigit() for c in word) and (
            any(c.isalpha() for c in word) or _PART_RE.search(word)
        ):
            found.setdefault(word, None)
    return list(found)


class DocParts(NamedTuple):
    """What ``split_document`` reads from a raw document: the body has no front matter."""

    title: str
    url: str | None
    tags: tuple[str, ...]
    body: str


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _parse_meta(lines: list[str]) -> dict[str, str | list[str]]:
    """The small YAML subset front matter uses: ``key: value``, ``[a, b]`` and ``- item`` lists."""
    meta: dict[str, str | list[str]] = {}
    key: str | None = None
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- ") and key is not None:
            items = meta.setdefault(key, [])
            if isinstance(items, list):
                items.append(_unquote(stripped[2:]))
            continue
        match = _META_RE.fullmatch(stripped)
        if match is None:
            continue
        key, value = match.group(1).lower(), match.group(2).strip()
        if value.startswith("[") and value.endswith("]"):
            meta[key] = [_unquote(v) for v in value[1:-1].split(",") if v.strip()]
        elif value:
            meta[key] = _unquote(value)
    return meta


def _split_front_matter(text: str) -> tuple[dict[str, str | list[str]], str]:
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return {}, text
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            return _parse_meta(lines[1:i]), "\n".join(lines[i + 1 :])
    return {}, text


def _first_heading(body: str) -> str | None:
    fenced = False
    for line in body.split("\n"):
        if _FENCE_RE.match(line):
            fenced = not fenced
        elif not fenced and (match := _HEADING_RE.fullmatch(line)) and match.group(1).strip():
            return match.group(1).strip().strip("#").strip()
    return None


def split_document(raw: str, fallback_title: str) -> DocParts:
    """Front matter ``title``, ``url`` and ``tags`` of ``raw`` and its body.

    Without a front-matter title the first heading is the title, else ``fallback_title``.
    """
    meta, body = _split_front_matter(raw.lstrip("\ufeff").replace("\r\n", "\n"))
    title = meta.get("title")
    url = meta.get("url")
    tags = meta.get("tags", [])
    if isinstance(tags, str):
        tags = tags.split(",")
    return DocParts(
        title=title if isinstance(title, str) and title else _first_heading(body) or fallback_title,
        url=url if isinstance(url, str) and url else None,
        tags=tuple(t.strip() for t in tags if t.strip()),
        body=body.lstrip("\n"),
    )


def _sections(body: str) -> list[str]:
    """``body`` cut before each heading outside code fences; a heading-only part joins the next."""
    sections: list[str] = []
    current: list[str] = []
    has_text = False
    fenced = False
    for line in body.splitlines(keepends=True):
        if _FENCE_RE.match(line):
            fenced = not fenced
        elif not fenced and _HEADING_RE.match(line):
            if has_text:
                sections.append("".join(current))
                current, has_text = [], False
            current.append(line)
            continue
        current.append(line)
        has_text = has_text or bool(line.strip())
    if current:
        sections.append("".join(current))
    return sections


def chunk_texts(body: str) -> list[str]:
    """``body`` as chunks: its sections, each cut into runs of at most ``CHUNK_WORDS`` words."""
    chunks: list[str] = []
    for section in _sections(body):
        words = list(_NON_SPACE_RE.finditer(section))
        for i in range(0, len(words), CHUNK_WORDS):
            last = words[min(i + CHUNK_WORDS, len(words)) - 1]
            chunks.append(section[words[i].start() : last.end()])
    return chunks


def _clean(unit: str) -> str:
    text = _MARKER_RE.sub("", unit.strip()).replace("**", "")
    if text.startswith("|"):
        if not text.strip("|-: "):
            return ""
        text = " | ".join(cell.strip() for cell in text.strip("|").split("|"))
    return " ".join(text.split())


def _sentences(text: str) -> list[tuple[str, bool]]:
    """Display units of a chunk and whether each is a heading.

    Units are headings, sentences of paragraphs, list items, table rows and code lines.
    """
    units: list[tuple[str, bool]] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            units.extend((u, False) for u in _SENTENCE_END_RE.split(" ".join(paragraph)))
            paragraph.clear()

    fenced = False
    for raw in text.splitlines():
        line = raw.strip()
        if _FENCE_RE.match(raw):
            flush()
            fenced = not fenced
        elif fenced:
            units.append((line, False))
        elif not line:
            flush()
        elif _HEADING_RE.match(line):
            flush()
            units.append((line, True))
        else:
            if _BLOCK_RE.match(line):
                flush()
            paragraph.append(line)
    flush()
    return [(cleaned, heading) for unit, heading in units if (cleaned := _clean(unit))]


def _trim(sentence: str, terms: set[str], limit: int) -> str:
    """A ``limit``-character window of a long sentence, starting a little before its first term."""
    first = next(
        (m.start() for m in _WORD_RE.finditer(sentence) if terms & set(tokenize(m.group()))), 0
    )
    start = max(0, first - 60)
    if start:
        start = sentence.find(" ", start) + 1 or start
    prefix = "…" if start else ""
    body = sentence[start:]
    if len(prefix) + len(body) <= limit:
        return prefix + body
    cut = body[: limit - len(prefix) - 1]
    cut = cut[: cut.rfind(" ")] if " " in cut else cut
    return f"{prefix}{cut}…"


def _render(units: list[tuple[str, bool]], picked: list[int]) -> str:
    """The picked units in order; a heading is followed by a dash, a gap in the run by "…"."""
    out = ""
    for n, i in enumerate(picked):
        if n:
            gap = i != picked[n - 1] + 1
            out += " … " if gap else (" — " if units[picked[n - 1]][1] else " ")
        out += units[i][0]
    return out


def snippet(text: str, terms: set[str], idf: dict[str, float]) -> str:
    """The best sentence of a chunk for ``terms``, under its section heading when that fits,
    followed by the next sentences up to ``SNIPPET_CHARS`` characters."""
    units = _sentences(text)
    if not units:
        return ""
    weights = [sum(idf.get(t, 0.0) for t in terms & set(tokenize(u))) for u, _ in units]
    best = max(range(len(units)), key=lambda i: (weights[i], -i))
    if len(units[best][0]) > SNIPPET_CHARS:
        return _trim(units[best][0], terms, SNIPPET_CHARS)
    picked = [best]
    heading = next((i for i in range(best - 1, -1, -1) if units[i][1]), None)
    if heading is not None and len(_render(units, [heading, best])) <= SNIPPET_CHARS:
        picked.insert(0, heading)
    while picked[-1] + 1 < len(units):
        wider = _render(units, [*picked, picked[-1] + 1])
        if len(wider) > SNIPPET_CHARS:
            break
        picked.append(picked[-1] + 1)
    return _render(units, picked)
