"""A turn's trace read back from the JSONL trace sink: its session and spans as one tree.
``actline trace`` and the web console show it. The cost attributes are named here for the
displays (``actline.actors.tracing.attributes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actline.actors.tracing.attributes import COST, ESTIMATED, UNCACHED
from actline.config import ConfigError

__all__ = ["COST", "ESTIMATED", "UNCACHED", "turn_trace"]


def turn_trace(records: Sequence[dict[str, Any]], turn_id: str | None) -> dict[str, Any]:
    """The session of ``turn_id`` (None: the latest) and every span of its trace."""
    sessions = [r for r in records if r.get("type") == "session"]
    if turn_id is None:
        if not sessions:
            raise ConfigError("no traced turn yet: the trace files under the home are empty")
        session = max(sessions, key=lambda s: float(s.get("end") or 0.0))
    else:
        found = [s for s in sessions if s.get("turn_id") == turn_id]
        if not found:
            raise ConfigError(
                f"no trace of turn {turn_id!r} under the home: tracing was off "
                "(ACTLINE_TRACE=0), the turn ran on a node whose home was not given "
                "(--home is repeatable; a Ray job's: --home .actline-cluster), or the id is "
                "wrong (actline trace --last shows the latest)"
            )
        session = found[-1]
    trace_id = session["trace_id"]
    spans = [r for r in records if r.get("type") == "span" and r.get("trace_id") == trace_id]
    spans.sort(key=lambda s: float(s.get("start") or 0.0))
    return {"session": session, "spans": spans}
