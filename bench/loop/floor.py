"""Part 2 of the loop benchmark: the NATS floor and the durable floor.

``Floor``: plain nats-py, a card published to another connection and a request to a trivial
responder, with the byte sizes of the loop's card, model request and reply
(``floor_payloads``). ``CommitFloor``: one LMDB write transaction of the bytes a round
persists, measured after every turn by ``persisted_bytes``.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import nats
from nats.aio.msg import Msg

from actline.messages import (
    GenerateRequest,
    GenerateResult,
    ReActProgress,
    Subjects,
    Usage,
    encode,
)
from actline.storage import StorageError, Store
from actline.timeline import Timeline
from actline.timeline.snapshot import split
from actline.timeline.tokens import DEFAULT_COUNTER
from bench.loop.model import InstantModel, LoopCheckFailed, role

FLOOR_MODEL = "bench.loop.floor.model"
FLOOR_CARD = "bench.loop.floor.card"
COMMIT_MAP_SIZE = 1 << 30


@dataclass
class Floor:
    """Raw nats-py: a card published to another connection, a request to a trivial responder."""

    nc: Any
    peer: Any
    card: bytes
    request: bytes
    reply: bytes
    samples: list[float] = field(default_factory=list)

    @classmethod
    async def open(cls, url: str) -> Floor:
        card, request, reply = floor_payloads()
        auth = {"user_credentials": role(url, "admin", Subjects())} if role(url, "admin") else {}
        nc = await nats.connect(url, name="bench-loop-floor", **auth)
        peer = await nats.connect(url, name="bench-loop-floor-peer", **auth)

        async def respond(msg: Msg) -> None:
            await msg.respond(reply)

        async def ignore(msg: Msg) -> None:
            return None

        await nc.subscribe(FLOOR_MODEL, cb=respond)
        await peer.subscribe(FLOOR_CARD, cb=ignore)
        await nc.flush()
        await peer.flush()
        return cls(nc, peer, card, request, reply)

    async def once(self) -> float:
        t0 = time.perf_counter()
        await self.nc.publish(FLOOR_CARD, self.card)
        await self.nc.request(FLOOR_MODEL, self.request, timeout=5)
        return time.perf_counter() - t0

    async def sample(self, n: int, *, record: bool = True) -> None:
        for _ in range(n):
            elapsed = await self.once()
            if record:
                self.samples.append(elapsed)

    async def close(self) -> None:
        await self.nc.close()
        await self.peer.close()


@dataclass
class CommitFloor:
    """The commit of the durable floor: one write transaction putting ``nbytes`` under a new
    key, in an LMDB environment of its own, synced like the case's store."""

    env: Any
    sync: bool
    keys: Iterator[int] = field(default_factory=itertools.count)
    samples: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path, sync: bool) -> CommitFloor:
        path.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(str(path), map_size=COMMIT_MAP_SIZE, sync=sync, metasync=sync)
        return cls(env, sync)

    def sample(self, n: int, nbytes: int, *, record: bool = True) -> None:
        payload = os.urandom(nbytes)
        for _ in range(n):
            key = f"{next(self.keys):012d}".encode()
            t0 = time.perf_counter()
            with self.env.begin(write=True) as txn:
                txn.put(key, payload)
            elapsed = time.perf_counter() - t0
            if record:
                self.samples.append(elapsed)
                self.sizes.append(nbytes)

    def close(self) -> None:
        self.env.close()


_STORE_API_ERRORS = (AttributeError, TypeError, ValueError, LookupError, lmdb.Error, StorageError)
"""What a changed ``Store`` read API may raise here: the helpers below then fall back."""


def _packed(value: Any) -> int:
    return len(msgpack.packb(value, use_bin_type=True, default=str))


def stored_seq(store: Store, cid: str) -> int | None:
    """Where the stored block sequence of ``cid`` ends (``Store.cursor``), or None if unknown."""
    try:
        return int(store.cursor(cid)[1])
    except _STORE_API_ERRORS:
        return None


def packed_rows(store: Store, tl: Timeline, cid: str) -> dict[str, bytes]:
    """Every header row of ``cid`` (sources pool, plans: ``Store.header_rows``), packed.

    From the timeline (its rows as ``Timeline.full_snapshot`` holds them) if the store's
    read API no longer fits.
    """
    try:
        rows: Mapping[str, Any] = store.header_rows(cid)
    except _STORE_API_ERRORS:
        rows = split(tl.full_snapshot())[1]
    return {
        str(key): msgpack.packb(value, use_bin_type=True, default=str)
        for key, value in rows.items()
    }


def changed_rows(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> dict[str, bytes]:
    """The rows of ``after`` that are new or differ from ``before`` (what a turn wrote)."""
    return {key: value for key, value in after.items() if before.get(key) != value}


def persisted_bytes(
    store: Store,
    tl: Timeline,
    cid: str,
    turn_id: str,
    *,
    since: int,
    rounds: int,
    rows_before: Mapping[str, bytes] | None = None,
) -> dict[str, Any]:
    """The bytes a round of turn ``turn_id`` persisted: the msgpack of the block dicts the
    turn appended (seq >= ``since``) and of the header rows it added or changed (against
    ``rows_before``, from ``packed_rows`` before the turn; None: every row counts), each
    over its ``rounds``, plus the header row and the turn record that every round rewrites.

    Read back from the store; if its read API no longer fits, from the node's timeline
    (blocks, snapshot and rows, no turn record) -- ``source`` says which.
    """
    try:
        try:
            stored = list(store.iter_blocks(cid, since))
        except TypeError:
            stored = list(store.iter_blocks(cid))
        blocks = [b for b in stored if int(b["seq"]) >= since]
        header: Any = store.header(cid) or {}
        record: Any = store.turn_record(cid, turn_id) or {}
        source = "store"
    except _STORE_API_ERRORS:
        blocks = [b.to_dict() for b in tl.blocks_since(since)]
        header, record, source = tl.snapshot(), {}, "timeline"
    if not blocks:
        raise LoopCheckFailed(cid, f"turn {turn_id} persisted no blocks above seq {since}")
    block_bytes = sum(_packed(b) for b in blocks)
    per_round = round(block_bytes / max(1, rounds))
    rows = changed_rows(rows_before or {}, packed_rows(store, tl, cid))
    row_bytes = sum(len(value) for value in rows.values())
    rows_per_round = round(row_bytes / max(1, rounds))
    header_bytes, record_bytes = _packed(header), _packed(record)
    return {
        "source": source,
        "turn_blocks": len(blocks),
        "turn_block_bytes": block_bytes,
        "blocks_per_round_bytes": per_round,
        "turn_rows": len(rows),
        "turn_row_bytes": row_bytes,
        "rows_per_round_bytes": rows_per_round,
        "header_bytes": header_bytes,
        "turn_record_bytes": record_bytes,
        "bytes": per_round + rows_per_round + header_bytes + record_bytes,
    }


def floor_payloads() -> tuple[bytes, bytes, bytes]:
    """The loop's encoded card, a small model request and the model reply of a tool round
    (today's main sent a request by reference to the node's own streamer; a node now calls
    its own streamer in process, so this request/reply is a hop the round no longer makes)."""
    cid, tid = "c-loop", "t-loop-1"
    card = ReActProgress(
        conversation_id=cid, turn_id=tid, phase="thinking", round=2, detail="round 2"
    )
    request = GenerateRequest(conversation_id=cid, turn_id=tid, round=2, model="instant-x")
    text = InstantModel().output(request)
    call = text.split("<channel:decision>")[1].split("</channel:decision>")[0]
    reply = GenerateResult(
        conversation_id=cid,
        turn_id=tid,
        round=2,
        channels={"thinking": "Round 2: checking the docs.", "decision": call},
        usage=Usage(model=InstantModel.name, output_tokens=DEFAULT_COUNTER.count(text)),
        seq_end=4,
    )
    return encode(card), encode(request), encode(reply)
