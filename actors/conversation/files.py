"""A conversation's files: its workspace (``custom`` or ``git``), the folders on disk its
tools work in, the lock that serialises them, and ANNOUNCE's workspace lines.

Owned by the ``ConversationActor``; the tools of its node reach the running turn's files
through ``TurnFiles``. A slow workspace (git) runs off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from actline.actors.configuration.settings import NodeSettings
from actline.messages import Attachment
from actline.storage import Store, Workspace
from actline.storage.committer import Committer
from actline.tools.workspace.workspace import LocalTree, TurnFiles, open_workspace, workspace_lines

from .intake import discard_attachments, store_attachments

log = logging.getLogger(__name__)

T = TypeVar("T")


class ConversationFiles:
    """The workspace of one conversation on this node."""

    def __init__(
        self,
        conversation_id: str,
        settings: NodeSettings,
        store: Store,
        commits: Committer | None = None,
    ) -> None:
        self.cid = conversation_id
        self.commits = commits
        """The node's group commit: a turn's ordinal joins the round writes' transaction
        instead of a synced commit of its own on the event loop."""
        root = settings.workspaces_dir / conversation_id
        self.workspace = open_workspace(
            settings.workspace_mode,
            store=store,
            root=root,
            conversation_id=conversation_id,
            quota=settings.quota,
        )
        self.local = LocalTree(self.workspace, root)
        self.lock = asyncio.Lock()
        self._lines: tuple[str, list[str]] | None = None
        """ANNOUNCE's workspace lines of a turn, until a tool may have changed the files.
        Empty lines stand for a later turn too while nothing changed (files carry over from
        the turns before; outputs and pulled files are a turn's own), so a turn that
        begins in an empty workspace needs no read. Not in git mode, whose turns commit
        what their work trees hold."""

    def changed(self) -> None:
        """A tool may have changed the files: the lines are made again when next asked."""
        self._lines = None

    def lines(self, turn_id: str) -> list[str]:
        """ANNOUNCE's workspace lines for ``turn_id``."""
        cached = self._lines
        if cached is not None and (cached[0] == turn_id or not (cached[1] or self.workspace.slow)):
            return cached[1]
        made = workspace_lines(self.workspace, turn_id, self.local)
        self._lines = (turn_id, made)
        return made

    async def begin(self, turn_id: str) -> None:
        if self.commits is not None and isinstance(self.workspace, Workspace):
            await self.commits.submit(self.workspace.begin_turn_write(turn_id))
        else:
            await self.call(self.workspace.begin_turn, turn_id)

    async def close(self, turn_id: str) -> None:
        """End the turn in the workspace (git: its commit) and clear its folders on disk."""
        async with self.lock:
            try:
                await self.call(self.workspace.end_turn, turn_id)
                await self.call(self.local.clear)
            except Exception:
                log.exception("could not close the workspace of turn %s of %s", turn_id, self.cid)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, a call that reaches the workspace: in a worker thread when
        the workspace is slow (git runs a process per file), else here."""
        if self.workspace.slow:
            return await asyncio.to_thread(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    async def attachments(
        self,
        turn_id: str,
        attachments: Sequence[Attachment],
        *,
        message_id: str | None = None,
    ) -> tuple[str, ...]:
        """Store the inline attachments' bytes (``intake.store_attachments``): their paths."""
        if attachments:
            self.changed()
        return await self.call(
            store_attachments, self.workspace, turn_id, attachments, message_id=message_id
        )

    async def discard(self, turn_id: str, files: Sequence[str]) -> None:
        """Delete stored attachments that joined nothing (``intake.discard_attachments``);
        a failure is logged: the files stay, named by no block."""
        self.changed()
        try:
            await self.call(discard_attachments, self.workspace, turn_id, files)
        except Exception:
            log.exception(
                "could not delete the files %s of turn %s of %s", files, turn_id, self.cid
            )

    def turn(self, turn_id: str) -> TurnFiles:
        return TurnFiles(self.workspace, self.local, turn_id, self.lock)
