"""The ``[models.NAME]`` tables of ``actline.toml``: a model by name, where and how it is served.

::

    [models.qwen-local]
    api = "openai"                  # or "messages" (the Anthropic Messages API)
    base_url = "http://127.0.0.1:8080/v1"
    context_window = 32768
    max_output_tokens = 4096
    input_price = 0.0               # USD per million tokens
    output_price = 0.0
    cache = "automatic"             # anthropic (cache_control marks), automatic, none
    stop_sequences = ["<|im_end|>"] # where the server stops a reply (at most 4)

Each table becomes a ``ModelSpec`` (``model_table_specs``) that ``actline.llm.model_spec``
returns once registered. Unset keys take the built-in model's values when the name is one
(a claude model behind a gateway), else a 200,000-token window, 8,192 output tokens, price 0
(a local server) and ``cache = "automatic"`` (``anthropic`` for a ``claude*`` name). Every
key is checked; a wrong or unknown one is a ``SettingsFileError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from actline.actors.errors import SettingsFileError
from actline.llm import APIS, CACHE_MODES, ModelSpec
from actline.llm.config import MODELS, UNKNOWN_MIN_CACHE_TOKENS, CacheMode, builtin_spec

__all__ = ["MODEL_KEYS", "model_table_specs"]

MODEL_KEYS = frozenset(
    {"api", "base_url", "context_window", "max_output_tokens", "input_price", "output_price"}
    | {"cache", "stop_sequences"}
)
_CHOICES: Mapping[str, tuple[str, ...]] = {"api": APIS, "cache": CACHE_MODES}
_COUNTS = ("context_window", "max_output_tokens")
_PRICES = ("input_price", "output_price")
MAX_STOP_SEQUENCES = 4
"""The most stop sequences the APIs take (Chat Completions' limit)."""


def _base(name: str) -> ModelSpec:
    """The built-in constants ``name`` resolves to, else those of an unnamed local model."""
    if name in MODELS or name.startswith("claude"):
        spec = replace(builtin_spec(name), name=name)
        if spec.known:
            return spec
    cache: CacheMode = "anthropic" if name.startswith("claude") else "automatic"
    return ModelSpec(name, 200_000, UNKNOWN_MIN_CACHE_TOKENS, 0.0, 0.0, 8192, cache=cache)


def _checked(name: str, key: str, value: Any, where: str) -> Any:
    setting = f"{where}[models.{name}] {key}"
    if key in _CHOICES:
        if value not in _CHOICES[key]:
            raise SettingsFileError(
                f"{setting} = {value!r} is unknown: use one of {', '.join(_CHOICES[key])}"
            )
    elif key == "base_url":
        if not isinstance(value, str) or not value.startswith(("http://", "https://")):
            raise SettingsFileError(f"{setting} must be an http:// or https:// URL, got {value!r}")
    elif key in _COUNTS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SettingsFileError(f"{setting} must be a whole number >= 1, got {value!r}")
    elif key in _PRICES:
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise SettingsFileError(f"{setting} must be a number >= 0 (USD per million tokens)")
        value = float(value)
    elif key == "stop_sequences":
        if (
            not isinstance(value, list)
            or len(value) > MAX_STOP_SEQUENCES
            or not all(isinstance(s, str) and s.strip() for s in value)
        ):
            raise SettingsFileError(
                f"{setting} must be a list of at most {MAX_STOP_SEQUENCES} non-blank strings, "
                f"got {value!r}"
            )
        value = tuple(value)
    return value


def model_table_specs(tables: Any, path: Path | None = None) -> tuple[ModelSpec, ...]:
    """The ``ModelSpec`` of every ``[models.NAME]`` table, each key checked."""
    where = f"config file {path}: " if path is not None else ""
    if not isinstance(tables, dict):
        raise SettingsFileError(f"{where}[models.NAME] must be tables")
    specs: list[ModelSpec] = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise SettingsFileError(f"{where}[models.{name}] must be a table")
        unknown = sorted(set(table) - MODEL_KEYS)
        if unknown:
            raise SettingsFileError(
                f"{where}[models.{name}]: unknown key {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(MODEL_KEYS))}"
            )
        values = {key: _checked(name, key, value, where) for key, value in table.items()}
        specs.append(replace(_base(name), **values))
    return tuple(specs)
