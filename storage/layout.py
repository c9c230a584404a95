"""The store's named databases, their keys and the msgpack codec of their values.

One LMDB environment per node with named databases (keys are bytes)::

    blocks     <cid>/<seq:012d>            -> msgpack block dict (append-only; hide/unhide
                                              rewrite the same key)
    paths      <cid>/<path>\\x00<seq:012d>  -> b""      (every block by logical path)
    snapshots  <cid>                       -> msgpack header: Timeline.snapshot() plus
                                              revision, stored_seq, boundary_seq (small:
                                              its size does not grow with the conversation)
               <cid>\\x00cursor            -> msgpack [revision, stored_seq] (what a commit
                                              reads; the header is only written)
    hrows      <cid>/<row_key>             -> msgpack header row: the state that grows
                                              (``src/<sid>`` pool rows, ``plan/<id>`` plans;
                                              see ``actline.timeline.snapshot``), written when
                                              changed
    turnlog    <cid>/<turn_id>             -> msgpack {turn_id, seqs, ts, end_ts, blocks_count,
                                              tokens}
    turns      <cid>/<turn_id>             -> msgpack record of the decision loop: its
                                              checkpoint while it runs, its result after
    index      <cid>/<revision>/<i:06d>    -> msgpack memsearch row, written with its blocks
    vectors    <model>:<sha256 of a text>  -> float16 embedding of that text (a cache shared
                                              by every conversation of the node)
    usage      <cid>                       -> msgpack per-conversation counters, written with
                                              what they count (see ``actline.storage.quota``)
    ufacts     <sha256(user_id)[:32]>/<row> -> msgpack memory fact row (``fact/<hash>``,
                                              ``actline.timeline.editing.facts``) shared by a
                                              user's conversations (memory scope ``user``)
    convmeta   <cid>                       -> msgpack {title, renamed, forked_from: [cid, turn_id],
                                              fork_seq, created}: what management set (a
                                              title of the user's own, a fork's origin; see
                                              ``actline.storage.manage``)
    artifacts, artrefs, workspace: see their modules.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack

from actline.messages.ids import is_valid_id

DATABASES = (
    "blocks",
    "paths",
    "snapshots",
    "turnlog",
    "artifacts",
    "artrefs",
    "workspace",
    "index",
    "hrows",
    "turns",
    "vectors",
    "usage",
    "ufacts",
    "convmeta",
)
SEQ_DIGITS = 12
MAX_PATH_KEY = 400
CURSOR_SUFFIX = b"\x00cursor"
"""Next to each header a tiny row (revision, stored_seq): a commit never reads the header."""


def check_id(cid: str) -> str:
    """Conversation ids go into keys: the id grammar keeps ``/`` and NUL out of them."""
    if not is_valid_id(cid):
        raise ValueError(f"not a valid conversation id: {cid!r}")
    return cid


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def block_key(cid: str, seq: int) -> bytes:
    return f"{cid}/{seq:0{SEQ_DIGITS}d}".encode()


def path_key(cid: str, path: str, seq: int | None = None) -> bytes:
    """The path-index key; paths too long for an LMDB key (511 bytes) go by their sha256."""
    head = f"{cid}/{path}\x00".encode()
    if len(head) > MAX_PATH_KEY:
        head = f"{cid}/#{hashlib.sha256(path.encode()).hexdigest()}\x00".encode()
    return head if seq is None else head + f"{seq:0{SEQ_DIGITS}d}".encode()
