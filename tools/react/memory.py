"""Notes and plans: react.plan and the memory anchors of react.write's internal channel.

``react.plan`` changes the conversation's plans (``Timeline.plans``) and appends the plan
snapshot (``Timeline.record_plan``) itself, so the snapshot lands before the result block.
A memory anchor is a ``react.note`` block: searchable as ``notes`` by react.memsearch
(``actline.tools.react.memsearch``), never pruned, carried through compaction; its ``[K] key:
value`` lines become memory facts. The file channels of react.write are
``actline.tools.react.write``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from actline.timeline import Block
from actline.timeline.blocks import NOTE
from actline.timeline.errors import PlanError
from actline.timeline.facts import note_facts
from actline.timeline.paths import ar_path

from .base import Notice, ReactContext, ReactOutcome, refuse

__all__ = ["PLAN_MODES", "anchor", "plan"]

ANCHOR_DIGEST: Final = 100
NOTE_TAG_RE: Final = re.compile(r"\[([PDSAK])\]")
"""Note tags: [P] plan, [D] decision, [S] status, [A] assumption, [K] key fact."""
PLAN_MODES: Final[Mapping[str, str]] = {
    "create": "new",
    "new": "new",
    "update": "replace",
    "replace": "replace",
    "activate": "activate",
    "close": "close",
}
"""react.plan modes (the documented create/update/close and the PlanBook names)."""


def plan(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
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


def anchor(path: str, content: str, scratchpad: bool, ctx: ReactContext) -> ReactOutcome:
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
