"""Shared fixtures of the tools tests: all-mpnet-base-v2, unpacked once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from actline.tools.embeddings.mpnet import MPNetEmbedder


@pytest.fixture(scope="session")
def model_cache() -> Path:
    """Where the tests unpack all-mpnet-base-v2 (438 MB, 2 to 5 s): beside the packages, in the
    environment that runs the tests, so that it is unpacked once and not once per session."""
    return Path(sys.prefix) / "actline-test-models"


@pytest.fixture(scope="session")
def mpnet(model_cache: Path) -> MPNetEmbedder:
    # `make` installs the five part packages; without them this raises EmbeddingsUnavailable,
    # whose message names the missing part and the pip command.
    return MPNetEmbedder.load(cache_dir=model_cache)
