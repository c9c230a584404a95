"""The node and model settings of a deployment: defaults < ``actline.toml`` < environment < flags.

``load_settings`` is the one reading of the settings file shared by ``actline serve``
(``actline.config.Config.load`` adds the NATS connection on top) and the Ray job
(``python -m actline.actors.cluster.ray_job --config``), so a node actor runs with exactly the
settings
``actline serve`` would. It lives here, below the facade, because ``actors`` may not import
``actline``.

The TOML file is ``path``, else ``$ACTLINE_CONFIG``, else ``./actline.toml`` when it exists.
Its keys are the node settings by name (``home``, ``model``, ``docs``, ``workspace``, ...),
``nats_url``, ``nats_creds``, ``insecure``, an ``[llm]`` table (``api``, ``base_url``,
``max_retries``, ``timeout``, ``cache_ttl``, ...), ``[models.NAME]`` tables (a model by name:
its API, base URL, window, prices and caching; ``actline.actors.configuration.model_tables``)
and ``[profiles.NAME]`` tables. API keys are never read from the file: they belong in the
environment (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``).

The model settings: the ``[llm]`` table, then the default model's ``[models.NAME]`` ``api``
and ``base_url``, then the environment (``ACTLINE_API``, ``ACTLINE_BASE_URL``, ...), then the
flags (``api``, ``base_url`` among the overrides). The configured models are registered
(``actline.llm.register_models``) and carried in ``LLMSettings.models``.

Every problem is a ``SettingsFileError`` whose message names the setting and the fix.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from actline.actors.errors import SettingsFileError
from actline.llm import LLMSettings, ModelConfigError, register_models

from .model_tables import model_table_specs
from .settings import ENV_VARS, NodeSettings

__all__ = [
    "ALIASES",
    "LLM_FLAGS",
    "LLM_KEYS",
    "PATH_SETTINGS",
    "LoadedSettings",
    "load_settings",
]

ALIASES = {"docs": "knowledge_dir", "workspace": "workspace_mode", "sync": "storage_sync"}
"""Short TOML names of node settings."""
PATH_SETTINGS = frozenset({"home", "knowledge_dir", "mcp_config", "skills"})
LLM_KEYS = frozenset(
    {"max_retries", "backoff_base", "backoff_max", "timeout", "max_output_tokens"}
    | {"temperature", "cache_ttl", "system_cache_ttl", "cache_system", "base_url", "api"}
)
LLM_FLAGS = ("api", "base_url")
"""Overrides of ``load_settings`` that are model settings, not node settings."""


@dataclass(frozen=True, slots=True)
class LoadedSettings:
    """What ``load_settings`` resolved."""

    node: NodeSettings
    llm: LLMSettings
    source: Path | None = None
    """The TOML file that was read, if any."""
    connection: dict[str, Any] = field(default_factory=dict)
    """The file's ``nats_url``, ``nats_creds`` and ``insecure`` (those it sets)."""


def config_path(path: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path | None:
    """``path``, else ``$ACTLINE_CONFIG``, else ``./actline.toml`` when it exists."""
    if path is not None:
        return Path(path)
    if env.get("ACTLINE_CONFIG"):
        return Path(env["ACTLINE_CONFIG"])
    default = Path("actline.toml")
    return default if default.is_file() else None


def read_table(path: Path) -> dict[str, Any]:
    """The ``[actline]`` table of ``path`` (or its top level)."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise SettingsFileError(
            f"config file {path} does not exist; fix --config or ACTLINE_CONFIG"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsFileError(f"config file {path} is not valid TOML: {exc}") from None
    table = data.get("actline", data)
    if not isinstance(table, dict):
        raise SettingsFileError(f"config file {path}: [actline] must be a table")
    return dict(table)


def node_values(table: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The node settings of a file's table, by their field names, checked by type."""
    names = {f.name: f.type for f in fields(NodeSettings)}
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = ALIASES.get(key, key)
        if name not in names:
            known = ", ".join(sorted({*names, *ALIASES, "nats_url", "llm", "models"}))
            raise SettingsFileError(f"config file {path}: unknown setting {key!r}; known: {known}")
        default = getattr(NodeSettings(), name)
        if name in PATH_SETTINGS:
            if not isinstance(value, str):
                raise SettingsFileError(f"config file {path}: {key} must be a path (a string)")
            value = Path(value).expanduser()
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise SettingsFileError(f"config file {path}: {key} must be true or false")
        elif isinstance(default, int | float) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SettingsFileError(f"config file {path}: {key} must be a number")
            value = type(default)(value)
        elif isinstance(default, str) and not isinstance(value, str):
            raise SettingsFileError(f"config file {path}: {key} must be a string")
        out[name] = value
    return out


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> LoadedSettings:
    """Defaults < TOML file < environment < ``overrides`` (node setting names, and ``api``
    and ``base_url``; None skipped)."""
    source_env = os.environ if env is None else env
    overrides = dict(overrides or {})
    llm_flags = {k: overrides.pop(k) for k in LLM_FLAGS if overrides.get(k) is not None}
    file = config_path(path, source_env)
    table = read_table(file) if file is not None else {}
    keys = ("nats_url", "nats_creds", "insecure")
    connection: dict[str, Any] = {k: table.pop(k) for k in keys if k in table}
    if not isinstance(connection.get("insecure", False), bool):
        raise SettingsFileError(f"config file {file}: insecure must be true or false")
    llm_table = table.pop("llm", {})
    if not isinstance(llm_table, dict) or set(llm_table) - LLM_KEYS:
        bad = sorted(set(llm_table) - LLM_KEYS) if isinstance(llm_table, dict) else "llm"
        raise SettingsFileError(
            f"config file {file}: [llm] takes {', '.join(sorted(LLM_KEYS))}; got {bad}"
            " (API keys belong in the environment: ANTHROPIC_API_KEY)"
        )
    models = model_table_specs(table.pop("models", {}), file)
    profiles = table.pop("profiles", {})
    if not isinstance(profiles, dict):
        raise SettingsFileError(f"config file {file}: [profiles.NAME] must be tables")
    from_file = node_values(table, file) if file is not None else {}
    if profiles:
        from_file["profiles"] = profiles
    in_env = {name for name, (var, _) in ENV_VARS.items() if source_env.get(var)}
    values = {k: v for k, v in from_file.items() if k not in in_env}
    for key, value in overrides.items():
        if value is None:
            continue
        name = ALIASES.get(key, key)
        if name in PATH_SETTINGS and isinstance(value, str):
            value = Path(value).expanduser()
        values[name] = value
    try:
        node = NodeSettings.from_env(source_env, **values)
    except ValueError as exc:
        where = f"config file {file}: " if file is not None and profiles else ""
        raise SettingsFileError(f"{where}{exc}") from None
    defaults: dict[str, Any] = dict(llm_table)
    own = next((spec for spec in models if spec.name == node.model), None)
    if own is not None:
        defaults.update({k: getattr(own, k) for k in LLM_FLAGS if getattr(own, k) is not None})
    try:
        llm = LLMSettings.from_env(
            source_env, defaults=defaults, model=node.model, models=models, **llm_flags
        )
    except ModelConfigError as exc:
        raise SettingsFileError(f"model setting {exc}") from None
    register_models(models)
    return LoadedSettings(node, llm, file, connection)
