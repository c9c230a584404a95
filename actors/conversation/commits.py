"""A conversation's commits: packed on the event loop, written by the node's group commit.

``start`` packs what changed on the timeline since the last commit (new and restyled
blocks, header rows, memsearch rows, turn records) and queues it on the node's
``Committer``; the timeline is free again at once (a render may run while the disk
syncs). ``finish`` awaits durability, then hands the round to the ownership seam (in
cluster mode it is kept for the durable copy in JetStream, copied at the turn's next copy
point; a copy may raise ``ConversationLost``). A
commit that fails gives its row and restyle changes back to the timeline, so the next
one writes them. Commits of one conversation never overlap: its actor awaits one before
starting the next.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actline.actors.services.shared import Services
from actline.messages import diag
from actline.storage.rounds import PreparedRound
from actline.timeline import Block, Timeline
from actline.tools.react.memsearch import index_rows


@dataclass(frozen=True, slots=True)
class Started:
    """A commit on its way: what it writes, its future, the memsearch rows it adds."""

    prepared: PreparedRound
    future: asyncio.Future[int]
    index_rows: list[dict[str, Any]]
    started: float = field(default_factory=time.monotonic)


def start(services: Services, tl: Timeline, records: Mapping[str, Mapping[str, Any]]) -> Started:
    """Pack what changed since the last commit and queue it on the group commit."""
    rows: list[dict[str, Any]] = []

    def index(blocks: Sequence[Block]) -> list[dict[str, Any]]:
        rows.extend(index_rows(blocks))
        return rows

    records = {k: v for k, v in records.items() if v}
    prepared = services.store.prepare_round(tl, turn_records=records, index=index)
    try:
        future = services.commits.submit(prepared.write)
    except BaseException:
        prepared.undo()
        raise
    return Started(prepared, future, rows)


async def finish(services: Services, conversation_id: str, started: Started) -> int:
    """The store revision once the commit is durable and the ownership seam has it."""
    try:
        revision = await started.future
    except BaseException:
        started.prepared.undo()
        raise
    written = started.prepared.done(revision)
    await services.ownership.committed(conversation_id, written)
    diag.info(
        diag.STORE,
        conv=conversation_id,
        revision=revision,
        blocks=len(written.blocks),
        updated=len(written.updated),
        records=len(written.turn_records or {}),
        rows=len(written.rows),
        index_rows=len(started.index_rows),
        ms=diag.ms_since(started.started),
    )
    return revision
