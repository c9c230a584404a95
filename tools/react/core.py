"""The in-loop react.* tools a conversation runs on its own timeline.

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

The workspace tools live in ``actline.tools.react.files``, the shared types in
``actline.tools.react.base``.

Append ``outcome.to_blocks(ctx)`` (result, content blocks, notices, all at ``ctx.now``) to
record a call; the ``react.tool.call`` block is the caller's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from actline.storage import NotStored, QuotaExceeded
from actline.timeline import Block
from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    NOTE_PRESERVED,
    SIGNAL_DONE,
    SUMMARY,
    TOOL_CALL,
    TOOL_RESULT,
    USER_ATTACHMENT_META,
    USER_FOLLOWUP,
    USER_FOLLOWUP_PRESERVED,
    USER_PROMPT,
    iso,
)
from actline.timeline.editing.facts import note_facts
from actline.timeline.editing.retention import retained_info
from actline.timeline.errors import PathError, PlanError
from actline.timeline.paths import LogicalPath, ar_path, parse_path
from actline.timeline.read import resolve
from actline.timeline.sources import SourceRow
from actline.timeline.tokens import DEFAULT_COUNTER, TokenCounter
from actline.tools.embeddings.minilm import embeddings_status
from actline.tools.errors import KnowledgeError, SkillError
from actline.tools.search.memindex import MemIndex
from actline.tools.skills import SkillSet

from . import files as react_files
from .base import (
    Notice,
    ReactContext,
    ReactOutcome,
    choice,
    failed,
    int_param,
    notice_block,
    refuse,
    text_param,
    write_order_notice,
)
from .files import current_target

__all__ = [
    "MEMSEARCH_TARGETS",
    "Notice",
    "ReactContext",
    "ReactOutcome",
    "ReactTools",
    "index_rows",
    "notice_block",
]

MAX_READ_PATHS: Final = 10
MEMSEARCH_TOP_K: Final = 20
FACTS_TARGET: Final = "facts"
"""The react.memsearch target of memory facts (``actline.timeline.editing.facts``)."""
DAY: Final = 86_400.0
ANCHOR_DIGEST: Final = 100
NOTE_TAG_RE: Final = re.compile(r"\[([PDSAK])\]")
"""Note tags: [P] plan, [D] decision, [S] status, [A] assumption, [K] key fact."""

MEMSEARCH_TARGETS: Final[Mapping[str, frozenset[str]]] = {
    "user": frozenset({USER_PROMPT, USER_FOLLOWUP, USER_FOLLOWUP_PRESERVED}),
    "assistant": frozenset({COMPLETION}),
    "notes": frozenset({NOTE, NOTE_PRESERVED}),
    "summary": frozenset({SUMMARY}),
    "attachment": frozenset({USER_ATTACHMENT_META}),
    "agents": frozenset({SIGNAL_DONE, TOOL_CALL}),
}
"""react.memsearch targets and the block types each one searches. ``agents``: the DONE
summaries of outside agents and the tasks sent to them (``agent.send`` calls only)."""
_ROLE_OF: Final = {t: role for role, types in MEMSEARCH_TARGETS.items() for t in types}
AGENT_TASK_TOOL: Final = "agent.send"
"""The tool whose calls hand a task to an outside agent
(``actline.actors.turn.reply.AGENT_SEND``)."""


def _row_text(block: Block) -> str:
    """The searchable text of a block: a DONE's ``agent: summary``, an agent task's
    ``task for <agent>: <text>``, other blocks' text."""
    if block.type == TOOL_CALL:
        data = block.data if isinstance(block.data, Mapping) else {}
        params = data.get("params")
        if data.get("tool") != AGENT_TASK_TOOL or not isinstance(params, Mapping):
            return ""
        text = params.get("text")
        return f"task for {params.get('name')}: {text}" if isinstance(text, str) else ""
    return block.text or block.content


def index_rows(blocks: Iterable[Block]) -> list[dict[str, Any]]:
    """The memsearch index rows of the searchable blocks among ``blocks``.

    One row per block of a ``MEMSEARCH_TARGETS`` type with text: ``turn_id, role, ts, text,
    path``, and ``speaker`` (the agent) for a DONE. Hidden blocks are indexed with their full
    text (hiding is a view, not a deletion).
    """
    rows: list[dict[str, Any]] = []
    for block in blocks:
        role = _ROLE_OF.get(block.type)
        text = _row_text(block) if role is not None else ""
        if role is None or not text.strip():
            continue
        row = {
            "turn_id": block.turn_id,
            "role": role,
            "ts": float(block.ts),
            "text": text,
            "path": block.path,
        }
        if block.type == SIGNAL_DONE and isinstance(block.meta.get("agent"), str):
            row["speaker"] = block.meta["agent"]  # "what did <agent> say?" finds it first
        rows.append(row)
    return rows


PLAN_MODES: Final[Mapping[str, str]] = {
    "create": "new",
    "new": "new",
    "update": "replace",
    "replace": "replace",
    "activate": "activate",
    "close": "close",
}
"""react.plan modes (the documented create/update/close and the PlanBook names)."""
WRITE_CHANNELS: Final = ("canvas", "timeline_text", "internal")
WRITE_KINDS: Final = ("display", "file")
CANVAS_MIME: Final[Mapping[str, str]] = {
    "md": "text/markdown",
    "markdown": "text/markdown",
    "html": "text/html",
    "htm": "text/html",
    "mermaid": "text/vnd.mermaid",
    "mmd": "text/vnd.mermaid",
    "json": "application/json",
    "yaml": "application/yaml",
    "yml": "application/yaml",
    "txt": "text/plain",
    "xml": "application/xml",
}
# -- react.read ------------------------------------------------------------------------------


def _sid_of(blocks: Iterable[Block]) -> int | None:
    for block in blocks:
        for row in block.meta.get("sources", ()):
            if isinstance(row, Mapping) and isinstance(row.get("sid"), int):
                return int(row["sid"])
    return None


def _rows_text(rows: Iterable[SourceRow]) -> str:
    lines: list[str] = []
    for row in rows:
        lines.append(
            f"[S:{row.sid}] {' '.join(row.title.split())} — {row.url or row.physical_path}"
        )
        body = row.content or row.text
        if body:
            lines.append(body)
    return "\n".join(lines)


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
            self._generated(path, _rows_text(found.rows), "sources")
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
            self._entry(path, "restored", tokens, sid=_sid_of(hidden))
            return True
        if window:
            self._entry(path, "visible", sid=_sid_of(window))
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


# -- react.memsearch ---------------------------------------------------------------------------


def _memory_index(ctx: ReactContext) -> MemIndex:
    """The conversation's index, or one built for this call from the store's rows and the
    searchable blocks of the timeline (a timeline that was never persisted)."""
    if ctx.memindex is not None:
        return ctx.memindex
    index = MemIndex()
    store, cid = ctx.store, ctx.timeline.conversation_id
    if store is not None and cid:
        index.add(store.index_rows(cid))
    index.add(index_rows(ctx.timeline.blocks))
    return index


def _ranking_notices(index: MemIndex, tool: str) -> list[Notice]:
    """What the model must know about how the hits were ranked: by keywords alone (no
    embedding model), or partly so (rows still being embedded in the background)."""
    if index.mode == "bm25":
        reason = embeddings_status()["reason"]
        why = "no embedding model is loaded" if reason == "ok" else reason
        message = f"react.memsearch ranked by keywords only (BM25): {why}."
        return [Notice("memsearch_keywords_only", message, tool)]
    if index.pending():
        message = (
            f"react.memsearch: {index.pending()} of {len(index)} rows are still being embedded "
            "in the background; they were ranked by keywords only this time."
        )
        return [Notice("memsearch_partly_embedded", message, tool)]
    return []


def _index_path(turn_id: str) -> str:
    try:
        return ar_path(turn_id, "react.turn.index")
    except PathError:
        return ""


# -- the tools -------------------------------------------------------------------------------


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
        self._handlers: dict[str, Callable[[Mapping[str, Any], ReactContext], ReactOutcome]] = {
            "react.read": self._read,
            "react.write": self._write,
            "react.plan": self._plan,
            "react.hide": self._hide,
            "react.memsearch": self._memsearch,
            "react.search_knowledge": self._search_knowledge,
            "react.pull": react_files.pull,
            "react.patch": react_files.patch,
            "react.checkout": react_files.checkout,
            "react.search_files": react_files.search_files,
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

    # -- react.search_knowledge ------------------------------------------------------------------

    def _search_knowledge(self, params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
        """``query``, ``top_k=5``: ranked ``ks:`` hits (path, title, url, score, snippet)."""
        tool = "react.search_knowledge"
        query = text_param(params, "query", tool)
        if isinstance(query, Notice):
            return failed(query)
        top_k = int_param(params, "top_k", 5, tool)
        if isinstance(top_k, Notice):
            return failed(top_k)
        if ctx.knowledge is None:
            message = "No knowledge space is configured here; answer from the conversation."
            return refuse(tool, "knowledge_unavailable", message)
        hits = ctx.knowledge.search(query, top_k)
        return ReactOutcome({"status": "ok", "query": query, "hits": [h.to_dict() for h in hits]})

    # -- react.read --------------------------------------------------------------------------

    def _read(self, params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
        """``paths``: reopen logical paths; per path read, restored, visible, missing, invalid."""
        tool = "react.read"
        raw = params.get("paths")
        if isinstance(raw, str):
            raw = [raw]
        if not (
            isinstance(raw, list | tuple) and raw and all(isinstance(p, str) and p for p in raw)
        ):
            message = 'react.read: paths must be a non-empty list of logical paths ["ks:a.md"].'
            return refuse(tool, "bad_params", message)
        paths = list(dict.fromkeys(p.strip() for p in raw))
        if len(paths) > self.max_read_paths:
            limit = self.max_read_paths
            message = f"react.read takes at most {limit} paths per call; split the read."
            return refuse(tool, "bad_params", message)
        reader = _Reader(ctx, self.skills)
        for path in paths:
            reader.read(path)
        return reader.outcome()

    # -- react.plan --------------------------------------------------------------------------

    def _plan(self, params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
        """``mode`` create|update|close, ``steps``, ``plan_id`` (default: the current plan)."""
        tool = "react.plan"
        tl = ctx.timeline
        raw_mode = params.get("mode")
        mode = PLAN_MODES.get(raw_mode.strip().lower()) if isinstance(raw_mode, str) else None
        if mode is None:
            message = f"unknown mode {raw_mode!r}; use create, update or close."
            return refuse(tool, "plan_mode", message)
        plan_id = params.get("plan_id")
        if plan_id is not None and not isinstance(plan_id, str):
            return refuse(tool, "plan_target_required", "plan_id must be a string.")
        plan_id = plan_id.strip() or None if isinstance(plan_id, str) else None
        if mode != "new" and plan_id is None:
            current = tl.plans.current
            if current is None:
                message = f"mode={raw_mode} needs plan_id: there is no current plan."
                return refuse(tool, "plan_target_missing", message)
            plan_id = current.plan_id
        steps = params.get("steps")
        if steps is not None and not isinstance(steps, list | tuple):
            return refuse(tool, "plan_steps", "steps must be a list of strings.")
        before = tl.plans.get(plan_id) if plan_id else None
        try:
            plan = tl.plans.apply(mode, turn_id=ctx.turn_id, plan_id=plan_id, steps=steps)
        except PlanError as exc:
            return refuse(tool, exc.code, exc.detail or str(exc))
        changed = plan is not before
        block = tl.record_plan(plan, turn_id=ctx.turn_id, ts=ctx.now) if changed else None
        if block is None:
            block = tl.latest_plan_block(plan.plan_id)
        result = {
            "status": "ok",
            "mode": mode,
            "plan_id": plan.plan_id,
            "state": plan.state,
            "revision": plan.revision,
            "changed": changed,
            "steps": plan.lines(),
            "path": block.path if block is not None else "",
        }
        return ReactOutcome(result)

    # -- react.write -------------------------------------------------------------------------

    def _write(self, params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
        """``path, channel, content, kind, scratchpad``: a memory anchor, or a file of this turn.

        The parameters go in the documented order (path, channel, content, kind).
        """
        tool = "react.write"
        order = write_order_notice(params)
        if order is not None:
            return failed(order)
        path = params.get("path")
        content = params.get("content")
        channel = choice(params, "channel", "canvas", WRITE_CHANNELS)
        kind = choice(params, "kind", "display", WRITE_KINDS)
        scratchpad = params.get("scratchpad", False)
        problems: list[str] = []
        if not isinstance(path, str):
            problems.append("path must be a string")
        if not channel:
            problems.append(f"channel must be one of {', '.join(WRITE_CHANNELS)}")
        if not isinstance(content, str):
            problems.append("content must be a string")
        if not kind:
            problems.append(f"kind must be one of {', '.join(WRITE_KINDS)}")
        if not isinstance(scratchpad, bool):
            problems.append("scratchpad must be true or false")
        if problems or not isinstance(path, str) or not isinstance(content, str):
            return refuse(tool, "bad_params", f"react.write: {'; '.join(problems)}.")
        if channel == "internal":
            return _anchor(path, content, scratchpad, ctx)
        target = _write_target(path, ctx.turn_id, channel)
        if isinstance(target, Notice):
            return failed(target)
        area, rel, mime, rewritten = target
        workspace = ctx.files()
        if workspace is None:
            message = "No workspace is available here; write on the internal channel instead."
            return refuse(tool, "workspace_unavailable", message)
        data = content.encode("utf-8")
        try:
            written = workspace.write(ctx.turn_id, area, rel, data, mime=mime, ts=ctx.now)
        except PathError as exc:
            return refuse(tool, "bad_path", f"{path!r}: {exc.detail or exc.rule}")
        result = {
            "status": "ok",
            "channel": channel,
            "kind": kind,
            "path": written,
            "size": len(data),
            "mime": mime,
        }
        notices: list[Notice] = []
        if rewritten:
            result["rewritten_from"] = path
            message = f"{path} is not a path of this turn; it was written to {written}."
            notices.append(Notice("path_rewritten", message, tool))
        blocks: list[Block] = []
        if channel == "timeline_text":
            meta = {"channel": channel, "kind": kind}
            blocks.append(
                Block.new(
                    TOOL_RESULT,
                    ctx.turn_id,
                    ctx.now,
                    path=written,
                    call_id=ctx.call_id,
                    mime=mime,
                    text=content,
                    meta=meta,
                )
            )
        return ReactOutcome(result, blocks, notices)

    # -- react.memsearch ---------------------------------------------------------------------

    def _memsearch(self, params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
        """``query, targets, top_k, days``: rank earlier turns by their messages, notes,
        summaries, attachments and outside agents' DONEs and tasks.

        Hybrid (BM25 + MiniLM vectors) when the index has an embedder, BM25 otherwise; one hit
        per turn with its best snippet, the turn index path to read next and the row's
        ``block_path``. Ranking by keywords alone (no embedder, or rows not embedded yet) is
        said in a notice and in ``ranking_note``, never silently.
        """
        tool = "react.memsearch"
        query = text_param(params, "query", tool)
        if isinstance(query, Notice):
            return failed(query)
        top_k = int_param(params, "top_k", 5, tool)
        if isinstance(top_k, Notice):
            return failed(top_k)
        top_k = min(top_k, MEMSEARCH_TOP_K)
        targets = params.get("targets")
        if targets is None:
            targets = [*MEMSEARCH_TARGETS, FACTS_TARGET]
        elif isinstance(targets, str):
            targets = [targets]
        if not (
            isinstance(targets, list | tuple)
            and targets
            and all(
                isinstance(t, str) and (t in MEMSEARCH_TARGETS or t == FACTS_TARGET)
                for t in targets
            )
        ):
            names = ", ".join([*MEMSEARCH_TARGETS, FACTS_TARGET])
            message = f"targets must be a list drawn from {names}."
            return refuse(tool, "memsearch_bad_target", f"{message} Got {targets!r}.")
        days = params.get("days")
        if days is not None and (
            isinstance(days, bool) or not isinstance(days, int | float) or not days > 0
        ):
            return refuse(tool, "bad_params", "react.memsearch: days must be a positive number.")
        since = None if days is None else ctx.now - float(days) * DAY
        roles = set(targets) - {FACTS_TARGET}
        index = _memory_index(ctx)
        found = (
            index.search(
                query,
                roles=roles,
                top_k=top_k,
                since=since,
                exclude_turns={ctx.turn_id},
                now=ctx.now,
            )
            if roles
            else []
        )
        hits = [
            {
                "turn_id": hit.turn_id,
                "role": hit.role,
                "score": round(hit.score, 4),
                "ts": hit.ts,
                "time": iso(hit.ts),
                "snippet": hit.snippet,
                "path": _index_path(hit.turn_id),
                "block_path": hit.path,
            }
            for hit in found
        ]
        result = {
            "status": "ok",
            "query": query,
            "targets": list(targets),
            "ranking": index.mode,
            "searched": len(index),
            "hits": hits,
        }
        notices = _ranking_notices(index, tool)
        if notices:
            result["ranking_note"] = " ".join(n.message for n in notices)
        if FACTS_TARGET in targets:
            result["facts"] = [
                {
                    "key": fact.key,
                    "value": fact.value,
                    "turn_id": fact.turn_id,
                    "path": fact.path,
                    "confidence": round(fact.confidence, 3),
                    "score": round(score, 4),
                }
                for score, fact in ctx.fact_book.search(query, top_k)
                if since is None or fact.ts >= since
            ]
        return ReactOutcome(result, [], notices)

    # -- react.hide --------------------------------------------------------------------------

    def _hide(self, params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
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


def _anchor(path: str, content: str, scratchpad: bool, ctx: ReactContext) -> ReactOutcome:
    """react.write on the internal channel: a memory anchor, inline too with ``scratchpad``.

    The anchor is a ``react.note`` at ``ar:<turn>.react.note.<call>``: indexed for
    ``react.memsearch(targets=["notes"])``, never pruned, carried through compaction. Without
    ``scratchpad`` it is stored folded (a one-line digest with its path is what stays in view;
    react.read shows it); with ``scratchpad`` it is an inline note with its tags.
    """
    tags = sorted({m.group(1) for m in NOTE_TAG_RE.finditer(content)})
    note_path = ar_path(ctx.turn_id, f"react.note.{ctx.call_id}")
    first = " ".join(content.split())
    digest = first if len(first) <= ANCHOR_DIGEST else first[: ANCHOR_DIGEST - 1] + "…"
    fields: dict[str, Any] = {}
    if not scratchpad:
        fields = {"hidden": True, "replacement": f"[anchor {note_path}] {digest}"}
    note = Block.new(
        NOTE,
        ctx.turn_id,
        ctx.now,
        path=note_path,
        call_id=ctx.call_id,
        text=content,
        meta={
            "channel": "internal",
            "anchor": True,
            "scratchpad": scratchpad,
            "tags": [f"[{t}]" for t in tags],
            "requested_path": path,
        },
        **fields,
    )
    result = {
        "status": "ok",
        "channel": "internal",
        "path": note.path,
        "chars": len(content),
        "tags": note.meta["tags"],
        "inline": scratchpad,
    }
    facts = note_facts(content, turn_id=ctx.turn_id, path=note_path, ts=ctx.now)
    if facts:  # [K] key: value lines are memory facts (a new value supersedes the old)
        book, cid = ctx.fact_book, ctx.timeline.conversation_id
        for fact in facts:
            book.upsert(fact, now=ctx.now, conversation_id=cid)
        result["facts"] = [f"{f.key}: {f.value}" for f in facts]
    notices: list[Notice] = []
    if scratchpad and not tags:
        message = (
            "the scratchpad note has no tag; start its lines with [P] plan, [D] decision, "
            "[S] status, [A] assumption or [K] key fact so that memsearch can filter them."
        )
        notices.append(Notice("note_untagged", message, "react.write"))
    return ReactOutcome(result, [note], notices)


def _write_target(path: str, turn_id: str, channel: str) -> tuple[str, str, str, bool] | Notice:
    """(area, rel, mime, rewritten) of a react.write path of the current turn, or a notice.

    Accepts ``files/<scope>/<name>``, ``outputs/<scope>/<name>`` and the same as a ``fi:`` path;
    a ``fi:`` path of another turn is rewritten to the current one.
    """
    target = current_target(path, turn_id, "react.write")
    if isinstance(target, Notice):
        return target
    area, rel, historical = target
    name = rel.rsplit("/", 1)[1]
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    if channel == "canvas" and ext not in CANVAS_MIME:
        kinds = ", ".join(sorted({f".{e}" for e in CANVAS_MIME}))
        message = f"{path!r}: a canvas file ends with one of {kinds}."
        return Notice("bad_path", message, "react.write")
    return area, rel, CANVAS_MIME.get(ext, "text/plain"), historical is not None
