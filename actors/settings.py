"""The settings of one node: where it stores, how long it waits, how many it runs at once.

Every value has a documented default; ``NodeSettings.from_env`` reads the ``ACTLINE_*``
variables listed on each field (the facade's settings object builds on this one).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from messages import new_id
from tools.workspace import WORKSPACE_MODES

from .errors import McpConfigError, SettingsError


def _default_node_id() -> str:
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host[:32] or 'node'}-{new_id()[-8:].lower()}"


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """How a node runs. Durations in seconds."""

    home: Path = Path(".actline")
    """``ACTLINE_HOME``: the node's LMDB environment (timelines, turn records)."""
    node_id: str = field(default_factory=_default_node_id)
    """``ACTLINE_NODE_ID``: names the node in ``turn.accepted`` and its local subjects."""
    model: str = "extractive"
    """``ACTLINE_MODEL``: the model a turn uses unless its config names another."""
    knowledge_dir: Path | None = None
    """``ACTLINE_DOCS``: the folder behind ``ks:`` paths and react.search_knowledge."""
    max_iterations: int = 15
    """``ACTLINE_MAX_ITERATIONS``: model calls per turn."""
    token_budget: int = 0
    """``ACTLINE_TOKEN_BUDGET``: tokens per turn, 0 for none."""
    max_output_tokens: int = 4096
    max_context_tokens: int = 200_000
    """``ACTLINE_MAX_CONTEXT_TOKENS``: the render budget (compaction at 90 %)."""
    wait_timeout_s: float = 600.0
    """``ACTLINE_WAIT_TIMEOUT``: how long a turn waits for outside agents' DONE."""
    followup_grace_s: float = 0.75
    """``ACTLINE_FOLLOWUP_GRACE``: after a final answer, how long user input may still join."""
    tool_timeout_s: float = 60.0
    """``ACTLINE_TOOL_TIMEOUT``: one external tool call."""
    model_timeout_s: float = 600.0
    """``ACTLINE_MODEL_TIMEOUT``: one model call, first chunk to last."""
    ack_wait_s: float = 30.0
    """``ACTLINE_ACK_WAIT``: a turn request not marked in progress this long is redelivered."""
    max_active_turns: int = 64
    """``ACTLINE_MAX_TURNS``: turns (queued or running) one node takes at once."""
    streamers: int = 32
    """``ACTLINE_STREAMERS``: model calls this node runs at once (0: none, use the pool)."""
    tool_workers: int = 8
    """``ACTLINE_TOOL_WORKERS``: external tool calls this node runs at once (0: none)."""
    idle_evict_s: float = 900.0
    """A conversation idle this long leaves memory (it stays in LMDB)."""
    storage_sync: bool = True
    """``ACTLINE_SYNC``: fsync each commit (off only for throwaway benchmarks)."""
    workspace_mode: str = "custom"
    """``ACTLINE_WORKSPACE``: ``custom`` (file versions in LMDB) or ``git`` (a repository per
    conversation, one commit per turn)."""
    embeddings: bool = True
    """``ACTLINE_EMBEDDINGS``: hybrid memsearch when the ``embeddings`` extra is installed."""
    builtin_tools: bool = True
    """``ACTLINE_BUILTIN_TOOLS``: register code.exec_python, files.read/write and http.fetch."""
    exec_timeout_s: float = 30.0
    """``ACTLINE_EXEC_TIMEOUT``: wall-clock limit of one code.exec_python run."""
    exec_memory_mb: int = 512
    """``ACTLINE_EXEC_MEMORY_MB``: address-space limit of one code.exec_python run."""
    http_allowed_hosts: str = ""
    """``ACTLINE_HTTP_ALLOW``: comma-separated hosts http.fetch may reach ("" = any)."""
    cluster: bool = False
    """``ACTLINE_CLUSTER``: several nodes share this NATS: each conversation is leased to one
    node (a JetStream KV bucket) and every persisted round is copied to JetStream, so another
    node takes a conversation over when its node dies."""
    lease_ttl_s: float = 15.0
    """``ACTLINE_LEASE_TTL``: a conversation lease lapses this long after its node stops
    renewing it (renewed every third of it)."""
    mcp_config: Path | None = None
    """``ACTLINE_MCP_CONFIG``: a JSON file of MCP servers (``{"mcpServers": {name: {command,
    args, env}}}``) whose tools join the registry."""

    def __post_init__(self) -> None:
        if self.workspace_mode not in WORKSPACE_MODES:
            modes = " or ".join(WORKSPACE_MODES)
            raise SettingsError(
                "ACTLINE_WORKSPACE",
                self.workspace_mode,
                f"workspace mode {self.workspace_mode!r} is unknown: set ACTLINE_WORKSPACE={modes}",
            )

    @property
    def workspaces_dir(self) -> Path:
        """Where conversations' files live on disk (pulled refs, exec roots, git history)."""
        return self.home / "workspaces"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> NodeSettings:
        """Defaults, then ``ACTLINE_*`` variables, then ``overrides``."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, (var, kind) in _ENV.items():
            raw = source.get(var)
            if raw is None or raw == "":
                continue
            try:
                values[name] = _convert(kind, raw)
            except ValueError:
                raise SettingsError(
                    var, raw, f"{var}={raw!r} is not a valid {kind.__name__}; fix or unset it"
                ) from None
        values.update(overrides)
        return replace(cls(), **values)

    def with_(self, **changes: Any) -> NodeSettings:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _convert(kind: type, raw: str) -> Any:
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(raw)
    if kind is Path:
        return Path(raw).expanduser()
    return kind(raw)


_ENV: dict[str, tuple[str, type]] = {
    "home": ("ACTLINE_HOME", Path),
    "node_id": ("ACTLINE_NODE_ID", str),
    "model": ("ACTLINE_MODEL", str),
    "knowledge_dir": ("ACTLINE_DOCS", Path),
    "max_iterations": ("ACTLINE_MAX_ITERATIONS", int),
    "token_budget": ("ACTLINE_TOKEN_BUDGET", int),
    "max_context_tokens": ("ACTLINE_MAX_CONTEXT_TOKENS", int),
    "wait_timeout_s": ("ACTLINE_WAIT_TIMEOUT", float),
    "followup_grace_s": ("ACTLINE_FOLLOWUP_GRACE", float),
    "tool_timeout_s": ("ACTLINE_TOOL_TIMEOUT", float),
    "model_timeout_s": ("ACTLINE_MODEL_TIMEOUT", float),
    "ack_wait_s": ("ACTLINE_ACK_WAIT", float),
    "max_active_turns": ("ACTLINE_MAX_TURNS", int),
    "streamers": ("ACTLINE_STREAMERS", int),
    "tool_workers": ("ACTLINE_TOOL_WORKERS", int),
    "storage_sync": ("ACTLINE_SYNC", bool),
    "workspace_mode": ("ACTLINE_WORKSPACE", str),
    "embeddings": ("ACTLINE_EMBEDDINGS", bool),
    "builtin_tools": ("ACTLINE_BUILTIN_TOOLS", bool),
    "exec_timeout_s": ("ACTLINE_EXEC_TIMEOUT", float),
    "exec_memory_mb": ("ACTLINE_EXEC_MEMORY_MB", int),
    "http_allowed_hosts": ("ACTLINE_HTTP_ALLOW", str),
    "mcp_config": ("ACTLINE_MCP_CONFIG", Path),
    "cluster": ("ACTLINE_CLUSTER", bool),
    "lease_ttl_s": ("ACTLINE_LEASE_TTL", float),
}


ENV_VARS = _ENV
"""Each setting's environment variable and type (``ACTLINE_*``)."""


def load_mcp_config(path: Path) -> dict[str, dict[str, Any]]:
    """The MCP servers of a JSON config: ``{"mcpServers": {name: {command, args, env, cwd}}}``
    (``servers`` is accepted for the outer key). Raises ``McpConfigError`` (a
    ``ValueError``) naming what to fix."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpConfigError(
            str(path), f"cannot read the MCP config {path}: {exc.strerror}"
        ) from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(str(path), f"the MCP config {path} is not JSON: {exc}") from None
    servers = raw.get("mcpServers", raw.get("servers")) if isinstance(raw, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(
            str(path), f'the MCP config {path} needs {{"mcpServers": {{name: {{...}}}}}}'
        )
    out: dict[str, dict[str, Any]] = {}
    for name, spec in servers.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("command"), str):
            raise McpConfigError(
                str(path), f"MCP server {name!r} in {path} needs a command (a string)"
            )
        args = spec.get("args", [])
        env = spec.get("env")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpConfigError(
                str(path), f"MCP server {name!r} in {path}: args must be a list of strings"
            )
        if env is not None and not (
            isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
        ):
            raise McpConfigError(
                str(path), f"MCP server {name!r} in {path}: env must map names to strings"
            )
        out[str(name)] = {
            "command": spec["command"],
            "args": args,
            "env": env,
            "cwd": spec.get("cwd"),
        }
    return out
