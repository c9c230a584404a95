"""react.read and react.hide: what of the timeline, the store and the spaces is in view.

``react.read(paths)`` reopens logical paths: blocks of the visible window are un-hidden
(``Timeline.unhide``) or reported visible, blocks outside it (compacted, or only in the store)
are copied to the tail, ``so:`` rows and turn indexes are built on demand, ``fi:`` files come
from the workspace, ``ks:`` documents from the knowledge space (they join the sources pool) and
``sk:`` files from the skills. ``react.hide(path, replacement)`` hides a tail block through the
renderer under the cache rules of ``actline.timeline.editing.hide``. The dispatcher is
``actline.tools.react.core.ReactTools``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actline.storage import NotStored
from actline.timeline import Block
from actline.timeline.blocks import TOOL_RESULT
from actline.timeline.editing.retention import retained_info
from actline.timeline.errors import PathError
from actline.timeline.paths import LogicalPath, parse_path
from actline.timeline.read import resolve
from actline.timeline.sources import SourceRow
from actline.timeline.tokens import DEFAULT_COUNTER, TokenCounter
from actline.tools.errors import KnowledgeError, SkillError
from actline.tools.skills import SkillSet

from .base import Notice, ReactContext, ReactOutcome, failed, refuse, text_param
from .knowledge import rows_text, sid_of

__all__ = ["hide", "read"]


def read(
    params: Mapping[str, Any], ctx: ReactContext, *, skills: SkillSet | None, max_paths: int
) -> ReactOutcome:
    """``paths``: reopen logical paths; per path read, restored, visible, missing, invalid."""
    tool = "react.read"
    raw = params.get("paths")
    if isinstance(raw, str):
        raw = [raw]
    if not (isinstance(raw, list | tuple) and raw and all(isinstance(p, str) and p for p in raw)):
        message = 'react.read: paths must be a non-empty list of logical paths ["ks:a.md"].'
        return refuse(tool, "bad_params", message)
    paths = list(dict.fromkeys(p.strip() for p in raw))
    if len(paths) > max_paths:
        limit = max_paths
        message = f"react.read takes at most {limit} paths per call; split the read."
        return refuse(tool, "bad_params", message)
    reader = _Reader(ctx, skills)
    for path in paths:
        reader.read(path)
    return reader.outcome()


def hide(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
    """``path, replacement``: hide a tail block under the cache rules of
    ``actline.timeline.editing.hide``."""
    tool = "react.hide"
    path = text_param(params, "path", tool)
    if isinstance(path, Notice):
        return failed(path)
    replacement = params.get("replacement", "")
    if replacement is None:
        replacement = ""
    if not isinstance(replacement, str):
        return refuse(tool, "bad_params", "react.hide: replacement must be a string.")
    if ctx.renderer is None:
        return refuse(tool, "hide_failed", "react.hide is not available without a renderer.")
    hidden = ctx.renderer.hide(path, replacement)
    result = {**hidden.to_dict(), "status": "ok" if hidden.status == "ok" else "error"}
    result["hide_status"] = hidden.status
    if hidden.status == "ok":
        return ReactOutcome(result)
    code = "bad_path" if hidden.code == "invalid_path" else hidden.code or "hide_failed"
    result["code"] = code
    return ReactOutcome(result, [], [Notice(code, hidden.message, tool)])


class _Reader:
    """One react.read call: per-path entries, content blocks and notices."""

    TOOL = "react.read"

    def __init__(self, ctx: ReactContext, skills: SkillSet | None = None) -> None:
        self.ctx = ctx
        self.skills = skills
        self.tl = ctx.timeline
        self.counter: TokenCounter = ctx.renderer.counter if ctx.renderer else DEFAULT_COUNTER
        self.entries: list[dict[str, Any]] = []
        self.blocks: list[Block] = []
        self.notices: list[Notice] = []
        self.missing: list[str] = []
        self.done: set[str] = set()

    def read(self, text: str) -> None:
        try:
            parsed: LogicalPath = parse_path(text)
        except PathError as exc:
            self.entries.append({"path": text, "status": "invalid", "rule": exc.rule})
            message = f"{text!r} is not a logical path ({exc.rule}): {exc.detail}"
            self.notices.append(Notice("bad_path", message, self.TOOL))
            return
        path = str(parsed)
        if path in self.done:
            return
        self.done.add(path)
        if parsed.prefix == "ks":
            if not self._on_timeline(path, self.tl.blocks_at(path)):
                self._knowledge(path)
            return
        if parsed.prefix == "fi":
            if not self._on_timeline(path, self.tl.blocks_at(path)):
                self._workspace_file(path, parsed)
            return
        if parsed.prefix == "sk":
            if not self._on_timeline(path, self.tl.blocks_at(path)):
                self._skill(path)
            return
        found = resolve(self.tl, path)
        if found.kind == "sources":
            self._generated(path, rows_text(found.rows), "sources")
            if found.missing_sids:
                sids = ", ".join(map(str, found.missing_sids))
                self.missing.append(f"{path} (no SID {sids})")
        elif found.kind == "turn_index":
            self._generated(path, found.text, "turn_index")
        elif found.kind in ("blocks", "plan"):
            if not self._on_timeline(path, list(found.blocks)):
                self._copy(path, list(found.blocks), "timeline")
        else:
            stored = self._stored(path)
            if stored:
                self._copy(path, stored, "store")
            else:
                self._missing(path, "nothing stored at this path")

    def _in_window(self, block: Block) -> bool:
        return self.tl.index_of(block) >= self.tl.visible_start

    def _entry(self, path: str, status: str, tokens: int = 0, **extra: Any) -> None:
        entry: dict[str, Any] = {"path": path, "status": status}
        if status == "read" or status == "restored":
            entry["tokens"] = tokens
        entry.update({k: v for k, v in extra.items() if v is not None})
        self.entries.append(entry)

    def _on_timeline(self, path: str, blocks: list[Block]) -> bool:
        """Un-hide or skip blocks of the visible window; False when none are in it.

        A result retained by tool-response retention (``actline.timeline.editing.retention``) is not
        un-hidden in place, which would rewrite the cached prefix from that old block:
        its full text is copied to the tail instead (``source: "archive"``), once.
        """
        window = [b for b in blocks if self._in_window(b)]
        archived = [b for b in window if b.hidden and retained_info(b) is not None]
        others = [b for b in window if not any(b is a for a in archived)]
        if archived and all(b.hidden for b in others):
            self._copy(path, archived, "archive")
            return True
        hidden = [b for b in others if b.hidden]
        if hidden:
            for block_path in dict.fromkeys(b.path for b in hidden):
                self.tl.unhide(block_path)
            tokens = sum(self.counter.count(b.content) for b in hidden)
            self._entry(path, "restored", tokens, sid=sid_of(hidden))
            return True
        if window:
            self._entry(path, "visible", sid=sid_of(window))
            return True
        return False

    def _add(self, path: str, text: str, **fields: Any) -> int:
        ctx = self.ctx
        block = Block.new(
            TOOL_RESULT, ctx.turn_id, ctx.now, path=path, call_id=ctx.call_id, text=text, **fields
        )
        self.blocks.append(block)
        return self.counter.count(block.content)

    def _generated(self, path: str, text: str, source: str) -> None:
        """Content built on demand (pool rows, a turn index): skipped when shown unchanged."""
        same = [b for b in self.tl.blocks_at(path) if b.content == text]
        if not self._on_timeline(path, same):
            self._entry(path, "read", self._add(path, text, meta={"read_from": source}))

    def _copy(self, path: str, originals: list[Block], source: str) -> None:
        """Blocks outside the visible view (compacted, or only in the store) shown again."""
        first = originals[0]
        text = "\n\n".join(b.content for b in originals if b.content)
        meta = {"read_from": source, "origin_type": first.type, "origin_turn_id": first.turn_id}
        base64 = next((b.base64 for b in originals if b.base64), None)
        tokens = self._add(path, text, mime=first.mime, base64=base64, meta=meta)
        self._entry(path, "read", tokens, source=source)

    def _workspace_file(self, path: str, parsed: LogicalPath) -> None:
        """A ``fi:`` file (its bytes as of that turn) or folder (a listing) from the workspace."""
        workspace = self.ctx.files()
        if workspace is None:
            self._missing(path, "no workspace here")
            return
        try:
            if parsed.is_folder:
                listing = workspace.listdir(parsed)
                if not listing:
                    self._missing(path, "empty or unknown folder")
                    return
                text = "\n".join(listing)
                tokens = self._add(path, text, meta={"read_from": "workspace", "folder": True})
                self._entry(path, "read", tokens, source="workspace")
                return
            stat = workspace.stat(parsed)
            data = workspace.read(parsed)
        except (NotStored, PathError):
            self._missing(path, "no such file in that turn")
            return
        meta: dict[str, Any] = {
            "read_from": "workspace",
            "version": stat["version"],
            "sha256": stat["sha"],
            "size": stat["size"],
        }
        mime = stat["mime"] or "application/octet-stream"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = (
                f"{path}: binary file, {stat['size']:,} bytes ({mime}), version "
                f"{stat['version']}; its content is not shown. code.exec_python can read it "
                "after react.pull."
            )
            meta["binary"] = True
        tokens = self._add(path, text, mime=mime, meta=meta)
        self._entry(path, "read", tokens, source="workspace")

    def _stored(self, path: str) -> list[Block]:
        store, cid = self.ctx.store, self.tl.conversation_id
        if store is None or not cid:
            return []
        return store.read_path(cid, path)

    def _knowledge(self, path: str) -> None:
        knowledge = self.ctx.knowledge
        if knowledge is None:
            self._missing(path, "knowledge_unavailable")
            message = "No knowledge space is configured here; ks: paths cannot be read."
            if not any(n.code == "knowledge_unavailable" for n in self.notices):
                self.notices.append(Notice("knowledge_unavailable", message, self.TOOL))
            return
        try:
            doc = knowledge.read(path)
        except KnowledgeError as exc:
            if exc.reason in ("bad_path", "outside_root"):
                self.entries.append({"path": path, "status": "invalid", "rule": exc.reason})
                self.notices.append(Notice("bad_path", str(exc), self.TOOL))
            else:
                self._missing(path, exc.reason)
            return
        row = SourceRow(0, url=doc.url or "", title=doc.title, text=doc.text[:500])
        pooled = self.tl.sources.add_rows([row])[0]
        sid = pooled.sid if pooled is not None else None
        head = f"[S:{sid}] {doc.title} — {doc.url}\n" if sid else ""
        meta: dict[str, Any] = {"read_from": "knowledge", "title": doc.title}
        if sid:
            meta["sources"] = [{"sid": sid, "title": doc.title, "url": doc.url or ""}]
        tokens = self._add(doc.path, head + doc.text, meta=meta)
        self._entry(path, "read", tokens, sid=sid, source="knowledge")

    def _skill(self, path: str) -> None:
        """A file of a skill (``actline.tools.skills``); a path outside its skill is refused."""
        if self.skills is None:
            self._missing(path, "skills_unavailable")
            message = "No skills folder is configured here; sk: paths cannot be read."
            if not any(n.code == "skills_unavailable" for n in self.notices):
                self.notices.append(Notice("skills_unavailable", message, self.TOOL))
            return
        try:
            found = self.skills.read(path)
        except SkillError as exc:
            if exc.reason in ("bad_path", "outside_skill"):
                self.entries.append({"path": path, "status": "invalid", "rule": exc.reason})
                self.notices.append(Notice("bad_path", str(exc), self.TOOL))
            else:
                self._missing(path, f"{exc.reason}: {exc.detail}")
            return
        meta = {"read_from": "skills", "skill": found.skill}
        self._entry(path, "read", self._add(path, found.text, meta=meta), source="skills")

    def _missing(self, path: str, reason: str) -> None:
        self.entries.append({"path": path, "status": "missing", "reason": reason})
        self.missing.append(f"{path} ({reason})")

    def outcome(self) -> ReactOutcome:
        by: dict[str, list[str]] = {}
        for entry in self.entries:
            by.setdefault(entry["status"], []).append(entry["path"])
        found = by.get("read", []) + by.get("restored", [])
        visible = by.get("visible", [])
        failed = bool(self.missing or by.get("invalid"))
        if self.missing:
            where = f"ar:{self.ctx.turn_id}.react.turn.index"
            message = (
                f"Nothing found at: {'; '.join(self.missing)}. Check the paths in a turn index "
                f"(e.g. {where}) or search again."
            )
            self.notices.append(Notice("read_paths_missing", message, self.TOOL))
        status = "error" if not (found or visible) else "partial" if failed else "ok"
        result = {
            "status": status,
            "paths": self.entries,
            "total_tokens": sum(int(e.get("tokens", 0)) for e in self.entries),
            "found": found,
            "exists_in_visible_context": visible,
            "missing": by.get("missing", []),
            "invalid": by.get("invalid", []),
        }
        return ReactOutcome(result, self.blocks, self.notices)
