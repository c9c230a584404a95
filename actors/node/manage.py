"""The node's side of conversation management: ``conv.manage`` requests on
``<prefix>.conv.manage`` (queue group ``manage``: one node of the tenant answers each), and
the same handler called in process by a ``Runtime`` whose node lives here (the local
shortcut).

Each operation works on this node's store (``actline.storage.manage``,
``actline.storage.forks``, ``actline.actors.conversation.archive``), off the event loop.
What a running turn means for each: ``rename`` and ``delete`` are refused while a turn of
the conversation runs or waits here (``conversation_busy``, naming the turn); a ``delete``
first stops the conversation's idle actor and holds new turns and feedback of it back
until the rows are gone (``Holds.releasing``), so nothing reloads it half-deleted; a
``fork`` reads one MVCC snapshot and may run while a later turn of the original runs (the
fork turn must be finished). A delete also removes the conversation's folder under the
workspaces folder (materialised files); its turn results stay in the results stream until
their retention ends, and its trace spans stay in the daily trace files. An answer larger
than the server's payload limit is refused (``too_large``, saying how to get it otherwise).

Cancellation: a store operation runs in a worker thread as one LMDB transaction; cancelling
the request (the asker gave up) does not stop it: it commits whole or not at all.

Cluster mode (``ACTLINE_CLUSTER``): every request is refused (``cluster_mode``). There the
durable copy in JetStream is the conversation, and a node's LMDB may be behind it or not
hold the conversation at all; management would have to run on the lease holder and change
the durable copy too. Refusing is better than acting on a stale local copy.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path

from actline import messages
from actline.actors.configuration.settings import NodeSettings
from actline.actors.conversation import archive
from actline.actors.conversation.actor import ConversationActor
from actline.bus import Bus, Envelope, Subscription
from actline.messages import (
    ConversationManage,
    ConversationManaged,
    ConversationRemoved,
    ConversationSummary,
    ErrorReply,
    encode,
    new_id,
)
from actline.storage import NotStored, StorageError, Store
from actline.storage.forks import ForkRefused, fork_conversation
from actline.storage.manage import conversation_ids, delete_conversation, set_title

from .holding import Holds

log = logging.getLogger(__name__)

QUEUE = "manage"
MAX_TITLE = 200
EXPORT_FORMATS = ("json", "markdown")
PAYLOAD_HEADROOM = 4 * 1024
"""Room left under the server's payload limit for a reply's headers."""


class Management:
    """Answers ``conv.manage`` for the conversations of one node's store."""

    def __init__(
        self,
        bus: Bus,
        store: Store,
        settings: NodeSettings,
        *,
        actors: MutableMapping[str, ConversationActor],
        loading: Mapping[str, object],
        holds: Holds,
        release: Callable[[str], Awaitable[None]],
    ) -> None:
        self.bus = bus
        self.store = store
        self.settings = settings
        self._actors = actors
        self._loading = loading
        self._holds = holds
        self._release = release

    async def start(self) -> Subscription:
        return await self.bus.subscribe(
            self.bus.subjects.conv_manage, self._on_request, queue=QUEUE
        )

    async def _on_request(self, msg: messages.Message, env: Envelope) -> messages.Message:
        if not isinstance(msg, ConversationManage):
            return ErrorReply(
                code="unexpected_message", message=f"expected conv.manage, got {msg.kind}"
            )
        reply = await self.handle(msg)
        size = len(encode(reply, max_size=1 << 62))
        if size > self.bus.max_payload - PAYLOAD_HEADROOM:
            what = "the export" if msg.op == "export" else f"the {msg.op} answer"
            fix = (
                "export it where its store is, with no server running for that home "
                "(actline conversations export CID --home DIR --out FILE)"
                if msg.op == "export"
                else "ask for fewer (a limit, or search words)"
            )
            return _error(
                "too_large",
                f"{what} is {size:,} bytes, over what NATS carries here "
                f"({self.bus.max_payload:,}): {fix}",
                msg.conversation_id or "",
            )
        return reply

    async def handle(self, msg: ConversationManage) -> ConversationManaged | ErrorReply:
        """One operation (module docstring); a refusal is an ``ErrorReply``."""
        cid = msg.conversation_id or ""
        if self.settings.cluster:
            return _error(
                "cluster_mode",
                "conversation management in cluster mode: not supported yet (a node's store "
                "may be behind the durable copy in JetStream); stop the cluster and run one "
                "node (ACTLINE_CLUSTER=0) over the store to rename, delete, export or fork",
                cid,
            )
        started = time.perf_counter()
        try:
            reply = await self._dispatch(msg)
        except NotStored:
            return _error(
                "conversation_not_found",
                f"conversation {cid!r} not found on node {self.settings.node_id}: list them "
                "with actline conversations list",
                cid,
            )
        except ForkRefused as exc:
            if exc.reason == "turn_running":
                return _error("conversation_busy", exc.message, cid)
            return _error("invalid_input", exc.message, cid, reason=exc.reason)
        except ValueError as exc:
            return _error("invalid_input", str(exc), cid)
        except StorageError as exc:
            log.warning("conv.manage %s of %s failed: %s", msg.op, cid, exc)
            return _error("storage_error", f"{msg.op} of {cid} failed in the store: {exc}", cid)
        log.info(
            "conv.manage %s %s in %.1f ms",
            msg.op,
            cid or "-",
            (time.perf_counter() - started) * 1e3,
        )
        return reply

    async def _dispatch(self, msg: ConversationManage) -> ConversationManaged | ErrorReply:
        cid = msg.conversation_id or ""
        if msg.op == "list":
            if msg.limit is not None and msg.limit < 1:
                return _error("invalid_input", f"limit={msg.limit}: give at least 1", "")
            found = await asyncio.to_thread(self._list, msg.search or "", msg.limit)
            return ConversationManaged(op="list", conversations=found)
        if not cid:
            return _error("invalid_input", f"{msg.op} needs a conversation id", "")
        if msg.op == "get":
            return ConversationManaged(op="get", conversations=[await self._summary(cid)])
        if msg.op == "rename":
            return await self._rename(cid, msg.title)
        if msg.op == "delete":
            return await self._delete(cid)
        if msg.op == "export":
            return await self._export(cid, msg.format)
        return await self._fork(cid, msg.at, msg.title)

    # -- the operations ---------------------------------------------------------------------------
    def _list(self, search: str, limit: int | None) -> list[ConversationSummary]:
        words = archive.words_of(search)
        out: list[ConversationSummary] = []
        for cid in conversation_ids(self.store):
            try:
                summary = archive.summarize(self.store, cid)
            except NotStored:  # deleted meanwhile
                continue
            if words and not archive.matches(self.store, cid, summary.title, words):
                continue
            out.append(summary)
        out.sort(key=lambda s: (s.updated, s.conversation_id), reverse=True)
        return out[:limit] if limit else out

    async def _summary(self, cid: str) -> ConversationSummary:
        if await asyncio.to_thread(self.store.header, cid) is None:
            raise NotStored("conversation", cid)
        return await asyncio.to_thread(archive.summarize, self.store, cid)

    def _running(self, cid: str) -> str | None:
        """The turn of ``cid`` that runs or waits here ("" when one is being taken), or None."""
        conv = self._actors.get(cid)
        if conv is not None and conv.busy:
            if conv.running_turn:
                return conv.running_turn
            return conv.backlog[0].request.turn_id if conv.backlog else ""
        if cid in self._loading:
            return ""
        return None

    def _busy(self, cid: str, turn: str, op: str) -> ErrorReply:
        running = f"turn {turn}" if turn else "a turn"
        return _error(
            "conversation_busy",
            f"conversation {cid!r} is busy: {running} runs; {op} it when the turn has ended "
            "(or cancel it: Runtime.cancel(turn_id), or Ctrl-C in its actline ask)",
            cid,
            turn_id=turn,
        )

    async def _rename(self, cid: str, title: str | None) -> ConversationManaged | ErrorReply:
        text = _title(title)
        if isinstance(text, ErrorReply):
            return text
        running = self._running(cid)
        if running is not None:
            return self._busy(cid, running, "rename")
        await asyncio.to_thread(set_title, self.store, cid, text)
        return ConversationManaged(op="rename", conversations=[await self._summary(cid)])

    async def _delete(self, cid: str) -> ConversationManaged | ErrorReply:
        running = self._running(cid)
        if running is not None or not self._holds.may_release(cid):
            return self._busy(cid, running or "", "delete")
        if await asyncio.to_thread(self.store.header, cid) is None:
            raise NotStored("conversation", cid)
        async with self._holds.releasing(cid):  # turns and feedback of it wait meanwhile
            conv = self._actors.pop(cid, None)
            if conv is not None:
                await conv.stop()
                await self._release(cid)
            removed = await asyncio.to_thread(delete_conversation, self.store, cid)
            on_disk = await asyncio.to_thread(_remove_folder, self.settings.workspaces_dir / cid)
        log.info(
            "deleted conversation %s: %d blocks, %d turns, %d file versions, %d artifacts "
            "(%d bytes), %d files on disk",
            cid,
            removed.blocks,
            removed.turns,
            removed.files,
            removed.artifacts,
            removed.artifact_bytes,
            on_disk,
        )
        return ConversationManaged(
            op="delete",
            deleted=ConversationRemoved(
                conversation_id=cid,
                blocks=removed.blocks,
                turns=removed.turns,
                files=removed.files,
                artifacts=removed.artifacts,
            ),
        )

    async def _export(self, cid: str, fmt: str) -> ConversationManaged | ErrorReply:
        if fmt not in EXPORT_FORMATS:
            return _error("invalid_input", f"export format {fmt!r}: choose json or markdown", cid)
        if await asyncio.to_thread(self.store.header, cid) is None:
            raise NotStored("conversation", cid)
        render = archive.export_json if fmt == "json" else archive.export_markdown
        text = await asyncio.to_thread(render, self.store, cid)
        return ConversationManaged(op="export", export=text)

    async def _fork(
        self, cid: str, at: str | None, title: str | None
    ) -> ConversationManaged | ErrorReply:
        if not at:
            return _error("invalid_input", "fork needs the turn to fork at (its id or number)", cid)
        text = "" if title is None else _title(title)
        if isinstance(text, ErrorReply):
            return text
        if self.settings.workspace_mode != "custom":
            return _error(
                "invalid_input",
                f"fork in the {self.settings.workspace_mode} workspace mode is not supported: "
                "its files live in a repository on disk (ACTLINE_WORKSPACE=custom forks)",
                cid,
            )
        new_cid = new_id("c-")
        point = await asyncio.to_thread(fork_conversation, self.store, cid, new_cid, at, title=text)
        log.info(
            "forked %s at turn %s (%d of it) as %s: %d blocks, %d bytes copied, %d file "
            "versions and %d memsearch rows shared%s",
            cid,
            point.turn_id,
            point.turns,
            new_cid,
            point.blocks,
            point.block_bytes,
            point.files,
            point.index_rows,
            " (exact state)" if point.exact else "",
        )
        return ConversationManaged(op="fork", conversations=[await self._summary(new_cid)])


def _title(title: str | None) -> str | ErrorReply:
    text = " ".join((title or "").split())
    if not text:
        return _error("invalid_input", "the title is empty: give one with a few words", "")
    if len(text) > MAX_TITLE:
        return _error(
            "invalid_input",
            f"the title has {len(text)} characters; keep it to {MAX_TITLE} at most",
            "",
        )
    return text


def _remove_folder(path: Path) -> int:
    """Remove a conversation's folder on disk; the files it held."""
    if not path.is_dir():
        return 0
    files = sum(1 for p in path.rglob("*") if p.is_file())
    shutil.rmtree(path, ignore_errors=True)
    return files


def _error(code: str, message: str, cid: str, **detail: str) -> ErrorReply:
    return ErrorReply(code=code, message=message, detail={"conversation_id": cid, **detail})
