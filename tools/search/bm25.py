"""The lexical side of the memsearch index: an incremental inverted index scored by BM25.

``Bm25Index`` keeps, by row id, each term's postings (row ids and term frequencies in
``array`` buffers), each row's length and their running total (``avgdl``), and the rows of
each speaker's name terms (the outside agent whose DONE a row is). Adding a row appends to
these; nothing is rebuilt. Scores are computed with numpy over the postings of the query terms
only. Terms come from ``actline.tools.search.text.tokenize``. ``MemIndex``
(``actline.tools.search.memindex``) owns the rows; ``actline.tools.search.fusion`` combines these
scores with the dense ones.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

from .text import tokenize

__all__ = ["K1", "B", "Bm25Index", "mass"]

K1: Final = 1.5
B: Final = 0.75
MAX_TF: Final = 65_535


class Bm25Index:
    """Postings, row lengths and speakers of the rows ``add`` was given, by row id."""

    def __init__(self) -> None:
        self.postings: dict[str, tuple[array[int], array[int]]] = {}
        self.speakers: dict[str, array[int]] = {}
        """Term of a speaker's name -> the rows of that speaker (a DONE's agent)."""
        self.total_length = 0
        self.length = np.zeros(0, dtype=np.float64)

    def grow(self, capacity: int) -> None:
        """Make room for ``capacity`` rows (the owner grows by doubling)."""
        length = np.zeros(capacity, dtype=self.length.dtype)
        length[: len(self.length)] = self.length
        self.length = length

    def add(self, rid: int, text: str, speaker: str) -> None:
        """Index row ``rid`` (the next one; room made by ``grow``)."""
        for term in set(tokenize(speaker)):
            self.speakers.setdefault(term, array("I")).append(rid)
        terms = Counter(tokenize(text))
        length = sum(terms.values())
        self.length[rid] = length
        self.total_length += length
        for term, tf in terms.items():
            postings = self.postings.get(term)
            if postings is None:
                postings = self.postings[term] = (array("I"), array("H"))
            postings[0].append(rid)
            postings[1].append(min(tf, MAX_TF))

    def scores(self, n: int, terms: list[str]) -> tuple[NDArray[np.float64], dict[str, float]]:
        """BM25 of every row (0 without a query term) and the idf of each query term."""
        scores = np.zeros(n, dtype=np.float64)
        idf: dict[str, float] = {}
        average = self.total_length / n or 1.0
        for term in terms:  # sorted: the same float sums every run
            postings = self.postings.get(term)
            if postings is None:
                continue
            ids = np.frombuffer(postings[0], dtype=np.uint32)
            tf = np.frombuffer(postings[1], dtype=np.uint16).astype(np.float64)
            weight = idf[term] = math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
            norm = K1 * (1 - B + B * self.length[ids] / average)
            scores[ids] += weight * tf * (K1 + 1) / (tf + norm)
        return scores, idf

    def speaking(self, n: int, terms: Sequence[str]) -> NDArray[np.float64] | None:
        """1 for the rows whose speaker a query term names ("what did the reviewer say?"),
        None when no query term names a speaker."""
        named = [self.speakers[t] for t in terms if t in self.speakers]
        if not named:
            return None
        out = np.zeros(n, dtype=np.float64)
        for rids in named:
            ids = np.frombuffer(rids, dtype=np.uint32)
            out[ids[ids < n]] = 1.0
        return out

    def exact(
        self, n: int, idents: Sequence[str], text_of: Callable[[int], str]
    ) -> NDArray[np.float64] | None:
        """Per row, the share of ``idents`` its text (``text_of(rid)``) holds exactly (case
        aside, not inside a longer word); None without identifiers. Only rows holding every
        part term of an identifier (the rarest one's postings) are read."""
        if not idents:
            return None
        share = np.zeros(n, dtype=np.float64)
        for ident in idents:
            terms = tokenize(ident)
            parts = terms[1:] if len(terms) > 1 else terms
            postings = [self.postings.get(t) for t in parts]
            if not parts or any(p is None for p in postings):
                continue
            rarest = min((p for p in postings if p is not None), key=lambda p: len(p[0]))
            pattern = re.compile(rf"(?<!\w){re.escape(ident)}(?!\w)", re.IGNORECASE)
            for rid in rarest[0]:
                if rid < n and pattern.search(text_of(rid)):
                    share[rid] += 1.0 / len(idents)
        return share if share.any() else None


def mass(n: int, terms: Sequence[str], idf: Mapping[str, float]) -> float:
    """The idf mass of the query: what a row with every query term once, at average length,
    scores (a term in no row counts with the idf of such a term)."""
    return sum(idf.get(t, math.log(1 + (n + 0.5) / 0.5)) for t in terms)
