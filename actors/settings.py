"""The settings of one node: where it stores, how long it waits, how many it runs at once.

Every value has a documented default; ``NodeSettings.from_env`` reads the ``ACTLINE_*``
variables listed on each field (the facade's settings object builds on this one).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from messages import new_id


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
                raise ValueError(
                    f"{var}={raw!r} is not a valid {kind.__name__}; fix or unset it"
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
}
