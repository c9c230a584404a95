"""Fixtures of the react.* tool tests: the examples/kb knowledge space and a store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.storage import Store
from actline.tools import KnowledgeSpace

KB = Path(__file__).parents[3] / "examples" / "kb"


@pytest.fixture(scope="module")
def kb() -> KnowledgeSpace:
    return KnowledgeSpace(KB)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "db") as opened:
        yield opened
