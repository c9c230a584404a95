"""Which dense model memsearch uses (``ACTLINE_EMBED_MODEL``) and the process-wide instances.

``minilm`` is all-MiniLM-L6-v2 (``actline.tools.embeddings.minilm``, the default: 384 wide, 130
to 230 short rows a second on this project's 2 cores); ``mpnet`` is all-mpnet-base-v2
(``actline.tools.embeddings.mpnet``: 768 wide, 11 to 50 short rows a second, about 10 times
slower, and recall@3 0.92 to 0.97 where MiniLM has 0.89 to 0.92 on
``tests/tools/search/test_memsearch_unseen.py``' first three sets). Loaded and used (64 rows
embedded), MiniLM adds about 100 MB to a process, mpnet about 510 MB. Each model's vectors are
cached under its own ``model_id``, so switching models never mixes vectors: rows cached by the
other model are embedded again.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Final

from .minilm import Embedder, EmbeddingsUnavailable, default_model_cache, embeddings_disabled
from .minilm import embeddings_status as minilm_status
from .mpnet import MPNetEmbedder, mpnet_status

__all__ = [
    "DEFAULT_EMBED_MODEL",
    "EMBED_MODELS",
    "default_embedder",
    "embedder_class",
    "embeddings_status",
    "loaded_embedder",
]

log = logging.getLogger(__name__)

EMBED_MODELS: Final = ("minilm", "mpnet")
"""The models ``ACTLINE_EMBED_MODEL`` may name."""
DEFAULT_EMBED_MODEL: Final = "minilm"
"""Without it installed memsearch ranks by keywords and says so in every result; a model
chosen by name that is not installed is a ``SettingsError`` when the node's settings are
made."""


def embedder_class(model: str) -> type[Embedder]:
    """The class of ``model`` (one of ``EMBED_MODELS``); ``ValueError`` for another name."""
    if model == "minilm":
        return Embedder
    if model == "mpnet":
        return MPNetEmbedder
    raise ValueError(f"unknown embedding model {model!r}: use {' or '.join(EMBED_MODELS)}")


def embeddings_status(model: str = DEFAULT_EMBED_MODEL) -> dict[str, Any]:
    """Whether ``default_embedder(model)`` can give a model, and why not; cheap (no load).

    ``{"available": bool, "model": model id, "reason": str, "model_dir": str | None}``, for
    ``actline doctor``; for mpnet ``model_dir`` is the folder of the first part's zip file.
    """
    embedder_class(model)
    return minilm_status() if model == "minilm" else mpnet_status()


_lock = threading.Lock()
_loaded: dict[str, Embedder] = {}
_failed: dict[str, str] = {}


def loaded_embedder(model: str = DEFAULT_EMBED_MODEL) -> Embedder | None:
    """``model``'s process-wide embedder if it is loaded already (never loads: the event
    loop may call it), else None; ``default_embedder`` loads it."""
    if embeddings_disabled():
        return None
    with _lock:
        return _loaded.get(model)


def default_embedder(
    model: str = DEFAULT_EMBED_MODEL, cache_dir: Path | None = None
) -> Embedder | None:
    """The process-wide embedder of ``model``, loaded on first use; None when unavailable or
    turned off. ``cache_dir`` is where a split model is unpacked (default
    ``$ACTLINE_HOME/models``); the first load decides it.

    ``ACTLINE_EMBEDDINGS=off`` turns it off. A failed load is logged once and not retried.
    """
    cls = embedder_class(model)
    if embeddings_disabled():
        return None
    with _lock:
        if model not in _loaded and model not in _failed:
            try:
                _loaded[model] = cls.load(cache_dir=cache_dir or default_model_cache())
            except EmbeddingsUnavailable as exc:
                _failed[model] = str(exc)
                log.warning("embeddings: %s; memsearch falls back to BM25", exc)
        return _loaded.get(model)
