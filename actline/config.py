"""One settings object for the CLI and the Python API.

``Config.load()`` reads, lowest precedence first: the defaults, a TOML file, the environment
(``ACTLINE_*``, ``NATS_URL``, ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``) and explicit
overrides (command-line flags). Credentials: ``ACTLINE_NATS_CREDS`` (or ``--creds``, TOML
``nats_creds``) names a ``.creds`` file; ``ACTLINE_INSECURE=1`` (``--insecure``, TOML
``insecure = true``) runs without authentication. The TOML file is ``--config PATH``, else
``$ACTLINE_CONFIG``, else ``./actline.toml`` when it exists. Its keys are the node settings by
name (``home``, ``model``, ``docs``, ``workspace``, ``max_iterations``, ``profile``, ...),
``nats_url``, an ``[llm]`` table (``max_retries``, ``timeout``, ``cache_ttl``, ...) and
``[profiles.NAME]`` tables (custom runtime profiles: ``extends`` a built-in or custom one and
any keys of ``actors.profiles.KEYS``). API keys are never read from the file: they belong in
the environment.

Every problem is a ``ConfigError`` whose message names the setting and the fix.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from actors.settings import ENV_VARS, NodeSettings
from bus import AuthError, Authority, CredsInvalid, read_identity
from llm import LLMSettings, ModelConfigError
from messages import subjects

from .errors import ConfigError

__all__ = ["NATS_SCHEMES", "Config", "ConfigError", "check_nats_url"]

NATS_SCHEMES = ("nats://", "tls://", "ws://", "wss://")
ALIASES = {"docs": "knowledge_dir", "workspace": "workspace_mode", "sync": "storage_sync"}
"""Short TOML names of node settings."""
PATH_SETTINGS = frozenset({"home", "knowledge_dir", "mcp_config"})
LLM_KEYS = frozenset(
    {"max_retries", "backoff_base", "backoff_max", "timeout", "max_output_tokens"}
    | {"temperature", "cache_ttl", "system_cache_ttl", "cache_system", "base_url"}
)


def check_nats_url(url: str) -> str:
    """``url`` when it is a NATS URL (``nats://host:4222``), else ``ConfigError``."""
    text = url.strip()
    if not text.startswith(NATS_SCHEMES) or len(text.split("://", 1)[1]) == 0:
        raise ConfigError(
            f"NATS_URL {url!r} is not a NATS URL: write nats://host:4222 "
            "(or tls://, ws://, wss://), or unset NATS_URL to use an embedded nats-server"
        )
    return text


def _flag(value: str | None, name: str) -> bool | None:
    if value is None or value == "":
        return None
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r}: write 1 or 0")


def _config_path(path: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path | None:
    if path is not None:
        return Path(path)
    if env.get("ACTLINE_CONFIG"):
        return Path(env["ACTLINE_CONFIG"])
    default = Path("actline.toml")
    return default if default.is_file() else None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} does not exist; fix --config or ACTLINE_CONFIG"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    table = data.get("actline", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: [actline] must be a table")
    return dict(table)


def _node_values(table: Mapping[str, Any], path: Path) -> dict[str, Any]:
    names = {f.name: f.type for f in fields(NodeSettings)}
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = ALIASES.get(key, key)
        if name not in names:
            known = ", ".join(sorted({*names, *ALIASES, "nats_url", "llm"}))
            raise ConfigError(f"config file {path}: unknown setting {key!r}; known: {known}")
        default = getattr(NodeSettings(), name)
        if name in PATH_SETTINGS:
            if not isinstance(value, str):
                raise ConfigError(f"config file {path}: {key} must be a path (a string)")
            value = Path(value).expanduser()
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"config file {path}: {key} must be true or false")
        elif isinstance(default, int | float) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"config file {path}: {key} must be a number")
            value = type(default)(value)
        elif isinstance(default, str) and not isinstance(value, str):
            raise ConfigError(f"config file {path}: {key} must be a string")
        out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the runtime needs to start; ``load()`` builds it."""

    node: NodeSettings
    llm: LLMSettings
    nats_url: str | None = None
    """None: start an embedded nats-server."""
    source: Path | None = None
    """The TOML file that was read, if any."""
    nats_creds: Path | None = None
    """A ``.creds`` file to connect with (None: the embedded server's, made under home)."""
    insecure: bool = False
    """Run without authentication (an explicit choice; a warning says so)."""

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        nats_url: str | None = None,
        **overrides: Any,
    ) -> Config:
        """Defaults < TOML file < environment < ``overrides`` (node setting names)."""
        source_env = dict(os.environ if env is None else env)
        file = _config_path(path, source_env)
        table = _read_toml(file) if file is not None else {}
        url = table.pop("nats_url", None)
        creds_file = table.pop("nats_creds", None)
        insecure_file = table.pop("insecure", False)
        if not isinstance(insecure_file, bool):
            raise ConfigError(f"config file {file}: insecure must be true or false")
        llm_table = table.pop("llm", {})
        if not isinstance(llm_table, dict) or set(llm_table) - LLM_KEYS:
            bad = sorted(set(llm_table) - LLM_KEYS) if isinstance(llm_table, dict) else "llm"
            raise ConfigError(
                f"config file {file}: [llm] takes {', '.join(sorted(LLM_KEYS))}; got {bad}"
                " (API keys belong in the environment: ANTHROPIC_API_KEY)"
            )
        profiles = table.pop("profiles", {})
        if not isinstance(profiles, dict):
            raise ConfigError(f"config file {file}: [profiles.NAME] must be tables")
        assert file is not None or not table
        from_file = _node_values(table, file) if file is not None else {}
        if profiles:
            from_file["profiles"] = profiles
        in_env = {name for name, (var, _) in ENV_VARS.items() if source_env.get(var)}
        node_values = {k: v for k, v in from_file.items() if k not in in_env}
        creds = overrides.pop("nats_creds", None) or source_env.get("ACTLINE_NATS_CREDS")
        insecure = overrides.pop("insecure", None)
        if insecure is None:
            insecure = _flag(source_env.get("ACTLINE_INSECURE"), "ACTLINE_INSECURE")
            insecure = insecure if insecure is not None else insecure_file
        for key, value in overrides.items():
            if value is None:
                continue
            name = ALIASES.get(key, key)
            if name in PATH_SETTINGS and isinstance(value, str):
                value = Path(value).expanduser()
            node_values[name] = value
        try:
            node = NodeSettings.from_env(source_env, **node_values)
        except ValueError as exc:
            where = f"config file {file}: " if file is not None and profiles else ""
            raise ConfigError(f"{where}{exc}") from None
        try:
            llm = LLMSettings.from_env(source_env, model=node.model, **llm_table)
        except ModelConfigError as exc:
            raise ConfigError(f"model setting {exc}") from None
        chosen = nats_url or source_env.get("NATS_URL") or url
        if chosen is not None and not isinstance(chosen, str):
            raise ConfigError(f"config file {file}: nats_url must be a string")
        creds = creds or creds_file
        if creds is not None and not isinstance(creds, str | Path):
            raise ConfigError(f"config file {file}: nats_creds must be a path (a string)")
        if creds and insecure:
            raise ConfigError(
                "both credentials (ACTLINE_NATS_CREDS / --creds) and --insecure are set: choose one"
            )
        return cls(
            node,
            llm,
            check_nats_url(chosen) if chosen else None,
            file,
            Path(creds).expanduser() if creds else None,
            bool(insecure),
        )

    def creds_for(self, role: str, name: str = "") -> Path | None:
        """The credentials to connect with as ``role``; None when running insecure.

        ``nats_creds`` when set (checked readable); else the ones made for ``role`` from
        the keys under ``home/auth`` (made there for the embedded server; with ``NATS_URL``
        when that folder holds keys already: a server this home started); else
        ``ConfigError`` naming the fix.
        """
        if self.insecure:
            return None
        if self.nats_creds is not None:
            try:
                read_identity(self.nats_creds)
            except CredsInvalid as exc:
                raise ConfigError(f"ACTLINE_NATS_CREDS / --creds: {exc}") from None
            return self.nats_creds
        if self.nats_url is None or (self.node.home / "auth" / "account.nk").is_file():
            try:
                authority = self.authority()
                return authority.creds_path(role, name=name, prefix=subjects.current().prefix)
            except AuthError as exc:
                raise ConfigError(str(exc)) from None
        raise ConfigError(
            f"NATS at {self.nats_url} needs credentials: pass --creds FILE or set "
            "ACTLINE_NATS_CREDS (make them with `actline creds client` where the deployment's "
            "keys are), or --insecure for a server without authentication"
        )

    def authority(self) -> Authority:
        """The keys of the embedded server, under ``home/auth`` (made on first use)."""
        try:
            return Authority.open(self.node.home / "auth")
        except OSError as exc:
            raise ConfigError(
                f"cannot keep credentials under {self.node.home / 'auth'}: {exc}; fix ACTLINE_HOME"
            ) from None

    def with_node(self, **changes: Any) -> Config:
        node = self.node.with_(**changes)
        return replace(self, node=node, llm=replace(self.llm, model=node.model))

    def check_model(self) -> None:
        """``ConfigError`` when the model cannot run here (a claude model without a key)."""
        model = self.node.model
        if model.startswith("claude") and not self.llm.api_key:
            raise ConfigError(
                f"model {model} needs an Anthropic API key: export ANTHROPIC_API_KEY=... "
                "or use the offline model (--model extractive)"
            )
        if not (model.startswith("claude") or model in ("extractive",)):
            raise ConfigError(
                f"model {model!r} is unknown: use extractive (offline) or a claude-* model"
            )
