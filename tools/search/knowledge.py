"""The knowledge space: ranked search and safe reads over a folder of documents.

``KnowledgeSpace(root)`` loads every ``*.md`` and ``*.txt`` file under ``root``. Hidden files
and folders are skipped, so are symlinked folders, files that resolve outside the root and
files over ``max_file_bytes`` (the last with a warning). Each document is split into chunks
(``actline.tools.search.text``) and the chunks are indexed with BM25 (``K1``, ``B``) in an inverted
index; title terms count ``TITLE_WEIGHT`` times and tag terms ``TAG_WEIGHT`` times in every chunk of
their document.

``search`` is hybrid when a dense embedder is available (``actline.tools.embeddings``, the same
process-wide model memsearch uses; ``ACTLINE_EMBEDDINGS=off`` or ``embedder=None`` leaves BM25
alone): each chunk's cosine to the query and its BM25 are fused by
``actline.tools.search.fusion.fuse`` (the convex combination memsearch uses), so a paraphrase
("a private key leaked") finds the chunk that says it otherwise ("compromised keys"). A query
that shares no term with any chunk finds nothing, dense or not. Chunks are embedded on the
first search after they are indexed, through a vector cache on disk (``VECTOR_CACHE``, one
file per chunk text and model), so a document is embedded once per machine, not once per
process, and ``refresh`` embeds only what changed. ``search`` returns one ``Hit`` per document,
its best chunk, ordered by score (descending) then path. Documents are named by ``ks:``
logical paths (``ks:pricing/tiers.md``, built by ``actline.timeline.paths.ks_path``). ``read``
refuses a path that is not a ``ks:`` path, leaves the root (``..``, absolute, symlinks) or names no
document, with ``KnowledgeError``. ``refresh`` re-reads only files whose size or mtime changed;
a file rewritten with the same size within the filesystem's mtime resolution is not seen.

The space does blocking file I/O (call it through ``asyncio.to_thread`` from async code) and
is not thread-safe: one owner calls it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from actline.timeline.errors import PathError
from actline.timeline.paths import ks_path, parse_path
from actline.tools.errors import KnowledgeError

from .text import chunk_texts, snippet, split_document, tokenize

if TYPE_CHECKING:  # numpy comes with the embeddings extra: imported when a search is hybrid
    import numpy as np

    from .vectors import TextEmbedder, VectorCache

__all__ = ["Doc", "Hit", "IndexStats", "KnowledgeSpace", "RefreshCounts"]

log = logging.getLogger(__name__)

K1 = 1.5
B = 0.75
TITLE_WEIGHT = 3
TAG_WEIGHT = 2
MAX_FILE_BYTES = 1024 * 1024
SUFFIXES = (".md", ".txt")
VECTOR_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "actline"
"""Under it ``knowledge-vectors/``: one file per embedded chunk text and model."""
QUERY_VECTORS = 256
"""Query vectors kept per space (the oldest goes first): a repeated query is not embedded
again."""


class FileVectorCache:
    """A ``VectorCache`` on disk: one file per key, written atomically (tmp, then rename), so
    processes that share it never see half a vector."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _file(self, key: str) -> Path:
        return self.folder / key.replace(":", "-").replace("/", "_")

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for key in keys:
            try:
                out[key] = self._file(key).read_bytes()
            except OSError:
                continue
        return out

    def put_many(self, items: Mapping[str, bytes]) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for key, raw in items.items():
                target = self._file(key)
                tmp = target.with_name(f".{target.name}.{os.getpid()}")
                tmp.write_bytes(raw)
                os.replace(tmp, target)
        except OSError as exc:  # a read-only home: the vectors stay in memory
            log.warning("knowledge: cannot cache vectors in %s: %s", self.folder, exc)


@dataclass(frozen=True, slots=True)
class Hit:
    """One document found by ``search``: its ``ks:`` path, its best chunk and a snippet of it."""

    path: str
    title: str
    url: str | None
    score: float
    snippet: str
    chunk: int

    def to_dict(self) -> dict[str, Any]:
        # field by field (``__slots__`` lists them in order): ``asdict`` deep-copies every
        # field, and a search builds one per hit
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class Doc:
    """A knowledge-space document as ``read`` returns it: ``text`` has no front matter."""

    path: str
    title: str
    url: str | None
    tags: tuple[str, ...]
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tags": list(self.tags)}


@dataclass(frozen=True, slots=True)
class IndexStats:
    """Size of the index: documents, chunks, distinct terms, and files skipped by the scan."""

    documents: int
    chunks: int
    terms: int
    skipped: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RefreshCounts(NamedTuple):
    """What ``refresh`` changed, in documents."""

    added: int
    updated: int
    removed: int


@dataclass(slots=True)
class _Chunk:
    rel: str
    index: int
    text: str
    terms: Counter[str]
    length: int


@dataclass(slots=True)
class _Entry:
    doc: Doc
    signature: tuple[int, int]
    chunk_ids: list[int]


def _parse_doc(rel: str, raw: str) -> Doc:
    parts = split_document(raw, fallback_title=Path(rel).stem)
    return Doc(ks_path(rel), parts.title, parts.url, parts.tags, parts.body)


class KnowledgeSpace:
    """Ranked BM25 search and safe ``ks:`` reads over the ``*.md``/``*.txt`` files of ``root``.

    Raises ``KnowledgeError(reason="missing_root")`` when ``root`` is not a folder.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_file_bytes: int = MAX_FILE_BYTES,
        embedder: TextEmbedder | Literal["default"] | None = "default",
        vector_cache: VectorCache | None = None,
    ) -> None:
        root = Path(root)
        if not root.is_dir():
            raise KnowledgeError(str(root), "missing_root")
        self._root = root.resolve()
        self._max_file_bytes = max_file_bytes
        self._entries: dict[str, _Entry] = {}
        self._chunks: dict[int, _Chunk] = {}
        self._postings: dict[str, dict[int, int]] = defaultdict(dict)
        self._total_length = 0
        self._next_id = 0
        self._norms: dict[int, float] | None = None
        self._skipped: dict[str, str] = {}
        self._embedder = embedder
        self._vector_cache = vector_cache
        self._vectors: dict[int, np.ndarray[Any, np.dtype[np.float32]]] = {}
        self._matrix: tuple[list[int], np.ndarray[Any, np.dtype[np.float32]]] | None = None
        self._queries: dict[str, np.ndarray[Any, np.dtype[np.float32]]] = {}
        started = time.perf_counter()
        self.refresh()
        log.info(
            "knowledge: %d documents, %d chunks indexed in %.1f ms",
            len(self._entries),
            len(self._chunks),
            (time.perf_counter() - started) * 1000,
        )

    @property
    def root(self) -> Path:
        """The resolved root folder."""
        return self._root

    def search(self, query: str, top_k: int = 5, *, question: str | None = None) -> list[Hit]:
        """The ``top_k`` best documents for ``query`` by score, then path; ``[]`` if none match.

        ``question``, the question in its own words, is what the dense side embeds when given
        (a sentence embeds better than a list of keywords); ``query`` otherwise."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        terms = set(tokenize(query))
        if not terms or not self._chunks:
            return []
        norms = self._chunk_norms()
        count = len(self._chunks)
        idf: dict[str, float] = {}
        scores: dict[int, float] = defaultdict(float)
        for term in sorted(terms):  # a fixed order keeps float sums identical run to run
            postings = self._postings.get(term)
            if not postings:
                continue
            weight = idf[term] = math.log(1 + (count - len(postings) + 0.5) / (len(postings) + 0.5))
            for cid, tf in postings.items():
                scores[cid] += weight * tf * (K1 + 1) / (tf + norms[cid])
        if not scores:
            return []
        embedder = self._dense()
        if embedder is not None:
            scores = self._fused(embedder, question or query, scores, idf, terms)
        best: dict[str, tuple[float, int]] = {}
        for cid, score in scores.items():
            rel = self._chunks[cid].rel
            if rel not in best or (score, -cid) > (best[rel][0], -best[rel][1]):
                best[rel] = (score, cid)
        ranked = sorted(
            (
                (round(score, 4), self._entries[rel].doc.path, cid)
                for rel, (score, cid) in best.items()
            ),
            key=lambda row: (-row[0], row[1]),
        )
        hits: list[Hit] = []
        for score, path, cid in ranked[:top_k]:
            chunk = self._chunks[cid]
            doc = self._entries[chunk.rel].doc
            text = snippet(chunk.text, terms, idf)
            hits.append(Hit(path, doc.title, doc.url, score, text, chunk.index))
        return hits

    @property
    def mode(self) -> str:
        """``hybrid`` when searches fuse dense and BM25 scores, else ``bm25``."""
        return "hybrid" if self._dense() is not None else "bm25"

    def _dense(self) -> TextEmbedder | None:
        """The embedder, the process-wide one loaded on first use for ``"default"``."""
        if self._embedder == "default":
            from actline.tools.embeddings.embedders import default_embedder

            self._embedder = default_embedder()
            if self._embedder is not None and self._vector_cache is None:
                self._vector_cache = FileVectorCache(VECTOR_CACHE / "knowledge-vectors")
        return self._embedder

    def _fused(
        self,
        embedder: TextEmbedder,
        query: str,
        bm25: dict[int, float],
        idf: dict[str, float],
        terms: set[str],
    ) -> dict[int, float]:
        """Every chunk's hybrid score for ``query`` (``actline.tools.search.fusion.fuse``)."""
        import numpy as np

        from .fusion import fuse
        from .vectors import cache_vectors, decode_vector

        pending = [cid for cid in self._chunks if cid not in self._vectors]
        if pending:
            texts = [self._embed_text(cid) for cid in pending]
            raw, _ = cache_vectors(embedder, self._vector_cache, texts)
            for cid, vector in zip(pending, raw, strict=True):
                self._vectors[cid] = decode_vector(vector)
            self._matrix = None
        if self._matrix is None:
            ids = sorted(self._chunks)
            self._matrix = (ids, np.stack([self._vectors[cid] for cid in ids]))
        ids, matrix = self._matrix
        wanted = self._queries.get(query)
        if wanted is None:
            wanted = np.asarray(embedder.embed([query])[0], dtype=np.float32)
            wanted /= float(np.linalg.norm(wanted)) or 1.0
            if len(self._queries) >= QUERY_VECTORS:
                self._queries.pop(next(iter(self._queries)))
            self._queries[query] = wanted
        dense = (matrix @ wanted).astype(np.float32)
        count = len(self._chunks)
        unseen = math.log(1 + (count + 0.5) / 0.5)  # a term in no chunk
        mass = sum(idf.get(t, unseen) for t in terms)
        lexical = np.asarray([bm25.get(cid, 0.0) for cid in ids], dtype=np.float64)
        everyone = np.ones(len(ids), dtype=bool)
        rows, fused = fuse(
            dense, everyone, everyone, lexical, mass, np.zeros(len(ids)), 0.0, len(ids)
        )
        return {ids[int(r)]: float(f) for r, f in zip(rows, fused, strict=True)}

    def _embed_text(self, cid: int) -> str:
        """What is embedded for a chunk: its document's title, then its text."""
        chunk = self._chunks[cid]
        return f"{self._entries[chunk.rel].doc.title}\n{chunk.text}"

    def read(self, path: str) -> Doc:
        """The document at ``ks:<rel>``, read from disk now; ``KnowledgeError`` when refused."""
        try:
            logical = parse_path(path)
        except PathError as exc:
            raise KnowledgeError(path, "bad_path", exc.detail) from exc
        if logical.prefix != "ks":
            raise KnowledgeError(path, "bad_path", "write ks:<relative path>, e.g. ks:faq.md")
        rel = logical.name
        try:
            resolved = (self._root / rel).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
            raise KnowledgeError(path, "not_found") from exc
        if not resolved.is_relative_to(self._root):
            raise KnowledgeError(path, "outside_root")
        if not resolved.exists():
            raise KnowledgeError(path, "not_found")
        if (
            not resolved.is_file()
            or resolved.suffix.lower() not in SUFFIXES
            or any(part.startswith(".") for part in Path(rel).parts)
        ):
            raise KnowledgeError(path, "not_a_document")
        try:
            if resolved.stat().st_size > self._max_file_bytes:
                raise KnowledgeError(path, "too_large")
            return _parse_doc(rel, resolved.read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:
            raise KnowledgeError(path, "not_found", f"cannot read the file: {exc}") from exc

    def refresh(self) -> RefreshCounts:
        """Re-index files whose size or mtime changed, add new files, drop deleted ones.

        A file that can no longer be indexed (now too large, unreadable, a symlink out of the
        root) counts as removed.
        """
        found = self._scan()
        gone = [rel for rel in self._entries if rel not in found]
        for rel in gone:
            self._drop(rel)
        added = updated = removed = 0
        for rel, (file, signature) in found.items():
            entry = self._entries.get(rel)
            if entry is not None and entry.signature == signature:
                continue
            if entry is not None:
                self._drop(rel)
            try:
                raw = file.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                log.warning("knowledge: cannot read %s: %s", rel, exc)
                removed += entry is not None
                continue
            self._add(rel, _parse_doc(rel, raw), signature)
            added += entry is None
            updated += entry is not None
        counts = RefreshCounts(added, updated, removed + len(gone))
        if any(counts):
            log.info("knowledge: refresh added %d, updated %d, removed %d documents", *counts)
        return counts

    def stats(self) -> IndexStats:
        """Documents, chunks and distinct terms in the index, and files skipped (logged)."""
        return IndexStats(
            len(self._entries), len(self._chunks), len(self._postings), len(self._skipped)
        )

    def _scan(self) -> dict[str, tuple[Path, tuple[int, int]]]:
        """Indexable files by relative path, with their resolved path and (mtime_ns, size).

        A file skipped for a reason is logged once, not on every refresh.
        """
        found: dict[str, tuple[Path, tuple[int, int]]] = {}
        skipped: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(self._root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith(".") or os.path.splitext(name)[1].lower() not in SUFFIXES:
                    continue
                file = Path(dirpath, name)
                rel = file.relative_to(self._root).as_posix()
                try:
                    ks_path(rel)
                    resolved = file.resolve()
                    stat = resolved.stat()
                except (PathError, OSError, RuntimeError) as exc:  # RuntimeError: symlink loop
                    skipped[rel] = str(exc)
                    continue
                if not resolved.is_relative_to(self._root):
                    skipped[rel] = "it resolves outside the root"
                elif stat.st_size > self._max_file_bytes:
                    skipped[rel] = f"{stat.st_size} bytes > {self._max_file_bytes}"
                elif resolved.is_file():
                    found[rel] = (resolved, (stat.st_mtime_ns, stat.st_size))
        for rel, reason in skipped.items():
            if self._skipped.get(rel) != reason:
                log.warning("knowledge: skipping %s: %s", rel, reason)
        self._skipped = skipped
        return found

    def _add(self, rel: str, doc: Doc, signature: tuple[int, int]) -> None:
        boost: Counter[str] = Counter()
        for term in tokenize(doc.title):
            boost[term] += TITLE_WEIGHT
        for term in tokenize(" ".join(doc.tags)):
            boost[term] += TAG_WEIGHT
        chunk_ids: list[int] = []
        for index, text in enumerate(chunk_texts(doc.text) or [""]):
            terms = Counter(tokenize(text))
            terms.update(boost)
            length = sum(terms.values())
            if not length:
                continue
            cid = self._next_id
            self._next_id += 1
            self._chunks[cid] = _Chunk(rel, index, text, terms, length)
            for term, tf in terms.items():
                self._postings[term][cid] = tf
            self._total_length += length
            chunk_ids.append(cid)
        self._entries[rel] = _Entry(doc, signature, chunk_ids)
        self._norms = None

    def _drop(self, rel: str) -> None:
        entry = self._entries.pop(rel)
        for cid in entry.chunk_ids:
            chunk = self._chunks.pop(cid)
            self._vectors.pop(cid, None)
            self._matrix = None
            for term in chunk.terms:
                postings = self._postings[term]
                del postings[cid]
                if not postings:
                    del self._postings[term]
            self._total_length -= chunk.length
        self._norms = None

    def _chunk_norms(self) -> dict[int, float]:
        """``K1 * (1 - B + B * length / avgdl)`` per chunk, cached until the index changes."""
        if self._norms is None:
            average = self._total_length / len(self._chunks)
            self._norms = {
                cid: K1 * (1 - B + B * chunk.length / average)
                for cid, chunk in self._chunks.items()
            }
        return self._norms
