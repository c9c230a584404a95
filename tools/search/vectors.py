"""Dense vectors of the memsearch index: encoding, the vector cache and embedding through it.

Index rows and caches carry a vector as the little-endian float16 bytes of its L2-normalised
embedding (``encode_vector``, ``decode_vector``). A ``VectorCache`` maps ``vector_key`` (the
model and a digest of the text) to those bytes; ``cache_vectors`` gives texts their vectors
from the cache, else from the ``TextEmbedder`` (and puts them in the cache). ``MemIndex``
(``actline.tools.search.memindex``) uses them; the store's cache is
``actline.actors.services.memory``'s.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DictVectorCache",
    "TextEmbedder",
    "VectorCache",
    "cache_vectors",
    "decode_vector",
    "encode_vector",
    "usable_vector",
    "vector_key",
]

log = logging.getLogger(__name__)

EMBED_BATCH: Final = 32


class TextEmbedder(Protocol):
    """What the index needs of an embedder (``actline.tools.embeddings.minilm.Embedder`` is one)."""

    dim: int
    model_id: str

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> NDArray[np.float32]: ...


class VectorCache(Protocol):
    """A persistent text-embedding cache: ``vector_key`` -> float16 little-endian bytes."""

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]: ...

    def put_many(self, items: Mapping[str, bytes]) -> None: ...


class DictVectorCache:
    """An in-memory ``VectorCache``."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        return {k: self.data[k] for k in keys if k in self.data}

    def put_many(self, items: Mapping[str, bytes]) -> None:
        self.data.update(items)

    def __len__(self) -> int:
        return len(self.data)


def vector_key(model_id: str, text: str) -> str:
    """The cache key of ``text`` embedded by ``model_id``."""
    return f"{model_id}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


def encode_vector(vector: Sequence[float] | NDArray[Any]) -> bytes:
    """A vector as the little-endian float16 bytes index rows and caches carry."""
    return np.asarray(vector, dtype="<f2").tobytes()


def decode_vector(raw: bytes | bytearray | memoryview | Sequence[float]) -> NDArray[np.float32]:
    """float16 bytes (or a list of numbers) as an L2-normalised float32 vector."""
    if isinstance(raw, bytes | bytearray | memoryview):
        vector = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    else:
        vector = np.asarray(raw, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def cache_vectors(
    embedder: TextEmbedder, cache: VectorCache | None, texts: Sequence[str]
) -> tuple[list[bytes], int]:
    """The float16 vector of each text, from ``cache`` or else from ``embedder`` (and then put
    in ``cache``), and how many went through the model. Blocking (the model): a worker
    thread's work."""
    dim = int(embedder.dim)
    keys = [vector_key(embedder.model_id, text) for text in texts]
    found: dict[str, bytes] = {}
    if cache is not None:
        for key, raw in cache.get_many(sorted(set(keys))).items():
            if usable_vector(raw, dim) is not None:
                found[key] = raw
    missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in found}
    if missing:
        order = list(missing)
        vectors = embedder.embed([missing[k] for k in order], batch_size=EMBED_BATCH)
        fresh = {key: encode_vector(vector) for key, vector in zip(order, vectors, strict=True)}
        if cache is not None:
            cache.put_many(fresh)
        found.update(fresh)
    log.debug("memindex: %d vectors (%d embedded)", len(keys), len(missing))
    return [found[key] for key in keys], len(missing)


def usable_vector(vector: Any, dim: int) -> NDArray[np.float32] | None:
    """``vector`` decoded when it has the model's width and finite values, else None (a row's
    or a cache entry's vector: what ``add`` and ``cache_vectors`` accept)."""
    if vector is None:
        return None
    try:
        decoded = decode_vector(vector)
    except (TypeError, ValueError):
        return None
    if decoded.shape != (dim,) or not np.isfinite(decoded).all():
        return None
    return decoded
