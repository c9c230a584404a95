"""The in-loop react.* tools a conversation runs on its own timeline, and their dispatcher.

``ReactTools.run(tool, params, ctx)`` runs one call synchronously (CPU, knowledge-space file
reads, LMDB reads and workspace writes) and returns a ``ReactOutcome``: the data of the call's
``react.tool.result`` block (always with ``status`` ``ok``, ``error`` or ``partial``), the
content blocks to append after it, and ``Notice``s for the model. Bad model input never raises:
it is an outcome with status ``error`` and a notice. Storage failures (a full disk) do raise.

What a call changes by itself; everything else is only returned:

- ``react.plan`` appends the plan snapshot (``Timeline.record_plan``), so the snapshot lands
  before the result block the caller appends.
- ``react.read`` un-hides hidden blocks at the paths it reads (``Timeline.unhide``) and adds
  the ``ks:`` documents it reads to the sources pool.
- ``react.hide`` hides blocks through the renderer (``Renderer.hide``).
- ``react.write`` on the ``canvas`` and ``timeline_text`` channels, ``react.patch`` and
  ``react.checkout`` write file versions of the current turn to the workspace
  (``ctx.files()``); ``react.pull`` copies historical files to disk (``ctx.local``).
  A ``react.write`` on ``canvas`` or with ``kind`` ``display`` is also shown to the client
  as a canvas panel by the decision loop (``actline.actors.turn.displays``), from its params and
  result.

This module owns the dispatcher only; each tool lives with its concept in
``actline.tools.react``: ``reading`` (react.read, react.hide), ``memory`` (react.plan and the
memory anchors of react.write), ``write`` (react.write's file channels), ``memsearch``
(react.memsearch and its index rows), ``knowledge`` (react.search_knowledge, sources-pool
text), ``files`` (pull, patch, checkout, search_files); the shared types are in ``base``.

Append ``outcome.to_blocks(ctx)`` (result, content blocks, notices, all at ``ctx.now``) to
record a call; the ``react.tool.call`` block is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from actline.storage import QuotaExceeded
from actline.tools.skills import SkillSet

from . import files, memory, memsearch, reading, write
from .base import Notice, ReactContext, ReactOutcome, notice_block, refuse
from .knowledge import search_knowledge

__all__ = ["MAX_READ_PATHS", "Notice", "ReactContext", "ReactOutcome", "ReactTools", "notice_block"]

MAX_READ_PATHS: Final = 10

Handler = Callable[[Mapping[str, Any], ReactContext], ReactOutcome]


class ReactTools:
    """The react.* tools implemented in process (see the module docstring).

    ``max_read_paths`` caps the paths of one react.read call (a longer list is refused).
    """

    names: frozenset[str] = frozenset(
        {
            "react.read",
            "react.write",
            "react.plan",
            "react.hide",
            "react.memsearch",
            "react.search_knowledge",
            "react.pull",
            "react.patch",
            "react.checkout",
            "react.search_files",
        }
    )

    def __init__(
        self, *, max_read_paths: int = MAX_READ_PATHS, skills: SkillSet | None = None
    ) -> None:
        self.max_read_paths = max_read_paths
        self.skills = skills
        """The skills behind ``sk:`` paths (None: ``sk:`` reads say none are configured)."""
        self._handlers: dict[str, Handler] = {
            "react.read": self._read,
            "react.write": write.write,
            "react.plan": memory.plan,
            "react.hide": reading.hide,
            "react.memsearch": memsearch.memsearch,
            "react.search_knowledge": search_knowledge,
            "react.pull": files.pull,
            "react.patch": files.patch,
            "react.checkout": files.checkout,
            "react.search_files": files.search_files,
        }

    def run(self, tool: str, params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
        """Run one call; a bad or unknown call is an ``error`` outcome, never an exception."""
        handler = self._handlers.get(tool)
        if handler is None:
            available = ", ".join(sorted(self.names))
            message = f"{tool} is not a react.* tool; available: {available}."
            return refuse(tool, "tool_unavailable", message)
        if not isinstance(params, Mapping):
            return refuse(tool, "bad_params", f"{tool}: params must be an object.")
        try:
            return handler(params, ctx)
        except QuotaExceeded as exc:  # react.write, patch, checkout: nothing was written
            outcome = refuse(tool, "quota_exceeded", str(exc))
            outcome.result.update(exc.as_dict())
            return outcome

    def _read(self, params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
        """react.read with this instance's skills and path cap."""
        return reading.read(params, ctx, skills=self.skills, max_paths=self.max_read_paths)
