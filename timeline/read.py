"""Reopening by logical path: what ``react.read(path)`` finds on a timeline.

Everything stays reachable: hidden blocks, pruned blocks and blocks before the
latest summary are all still on the timeline under their paths. Besides stored
blocks a path can name the newest snapshot of a plan (``ar:plan.latest:<id>``),
rows of the sources pool (``so:sources_pool[...]``) or a turn index built on
demand (``ar:<turn>.react.turn.index``). ``fi:``, ``ks:`` and ``sk:`` content
that is not on the timeline is served by storage and the tools, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .blocks import Block
from .errors import PathError
from .paths import LogicalPath, parse_path
from .sources import SourceRow
from .timeline import Timeline
from .turn_index import turn_index, turn_index_text

ReadKind = Literal["blocks", "plan", "sources", "turn_index", "missing", "invalid"]


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What a path resolved to on the timeline."""

    path: str
    kind: ReadKind
    blocks: tuple[Block, ...] = ()
    rows: tuple[SourceRow, ...] = ()
    text: str = ""
    error: str = ""
    missing_sids: tuple[int, ...] = field(default=())

    @property
    def found(self) -> bool:
        return self.kind not in ("missing", "invalid")


def resolve(tl: Timeline, path: str) -> ReadResult:
    """Resolve ``path``; never raises for a bad or unknown path (see ``kind`` and ``error``)."""
    try:
        parsed: LogicalPath = parse_path(path)
    except PathError as exc:
        return ReadResult(path, "invalid", error=str(exc))
    canonical = str(parsed)
    if parsed.plan_id is not None and parsed.turn_id is None:
        block = tl.latest_plan_block(parsed.plan_id)
        if block is None:
            return ReadResult(canonical, "missing", error=f"no plan {parsed.plan_id}")
        return ReadResult(canonical, "plan", blocks=(block,), text=block.content)
    if parsed.prefix == "so":
        wanted = parsed.sids or tuple(row.sid for row in tl.sources.rows())
        rows = tuple(tl.sources.select(wanted))
        got = {row.sid for row in rows}
        missing = tuple(sid for sid in wanted if sid not in got)
        kind: ReadKind = "sources" if rows else "missing"
        return ReadResult(canonical, kind, rows=rows, missing_sids=missing)
    if parsed.prefix == "ar" and parsed.name == "react.turn.index" and parsed.turn_id:
        if parsed.turn_id not in tl.turn_ids():
            return ReadResult(canonical, "missing", error=f"no turn {parsed.turn_id}")
        index = turn_index(tl, parsed.turn_id)
        return ReadResult(canonical, "turn_index", text=turn_index_text(index))
    blocks = tuple(tl.blocks_at(canonical))
    if not blocks:
        return ReadResult(canonical, "missing", error="nothing stored at this path")
    text = "\n\n".join(b.content for b in blocks)
    return ReadResult(canonical, "blocks", blocks=blocks, text=text)
