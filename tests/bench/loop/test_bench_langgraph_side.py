"""The LangGraph side-by-side says how to install LangGraph when it is missing (it is a
comparison-only library, not in the test install: ``pip install 'actline[compare]'``),
before it starts anything."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from bench.loop import langgraph_side


def test_the_benchmark_checks_for_langgraph_before_it_runs_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.import_module

    def without_langgraph(name: str, package: str | None = None) -> ModuleType:
        if name.startswith("langgraph"):
            raise ImportError(f"No module named {name!r}")
        return real(name, package)

    def must_not_run(**kwargs: object) -> dict[str, object]:
        raise AssertionError("the benchmark ran without LangGraph")

    monkeypatch.setattr(importlib, "import_module", without_langgraph)
    monkeypatch.setattr(langgraph_side, "run", must_not_run)
    with pytest.raises(SystemExit, match=r"langgraph is missing: .*actline\[compare\]"):
        langgraph_side.main(["--quick"])
