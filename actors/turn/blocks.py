"""The blocks a turn puts on its timeline, built from values (no I/O, clocks passed in).

The DecisionActor builds the blocks it knows whole (notes, notices, tool calls, DONE
summaries, the completion); the ConversationActor applies a decision's ``Writes`` to
the timeline with ``apply_writes``, building what needs the timeline itself: a tool
result whose sources join the pool, a late DONE anchored to the latest turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actline.timeline import Block, Timeline
from actline.timeline.blocks import (
    COMPLETION,
    NOTICE,
    REACT_NOTES,
    SIGNAL_DONE,
    SUGGESTED_FOLLOWUPS,
    TOOL_CALL,
    TOOL_RESULT,
)
from actline.timeline.paths import ar_path, tc_path
from actline.timeline.sources import SourceRow

from . import events as ev
from .mailbox import LateSignal, NotesAck, ToolOutcome, Write

MAX_TOOL_SOURCES = 20
"""Source rows one external tool result may add to the pool."""


def notice_block(turn_id: str, round_: int, number: int, code: str, text: str, ts: float) -> Block:
    """The ``number``-th ``react.notice`` of the turn, seen by the model next round."""
    path = ar_path(turn_id, f"react.notice.{round_}.{number}")
    return Block.new(NOTICE, turn_id, ts, path=path, text=f"{code}: {text}", meta={"code": code})


def notes_block(turn_id: str, round_: int, thinking: str, notes: str, ts: float) -> Block | None:
    """The round's thinking and notes as one ``react.notes`` block (None when empty)."""
    text = "\n".join(part for part in (thinking.strip(), notes.strip()) if part)
    if not text:
        return None
    return Block.new(
        REACT_NOTES, turn_id, ts, path=ar_path(turn_id, f"react.notes.{round_}"), text=text
    )


def call_block(
    turn_id: str, call_id: str, tool: str, params: Mapping[str, Any], ts: float
) -> Block:
    """The ``tc:<turn>.<call>.call`` block of one tool call."""
    return Block.new(
        TOOL_CALL,
        turn_id,
        ts,
        path=tc_path(turn_id, call_id, "call"),
        call_id=call_id,
        mime="application/json",
        data={"tool": tool, "params": dict(params)},
    )


def result_block(turn_id: str, outcome: ToolOutcome, data: Mapping[str, Any], ts: float) -> Block:
    """The ``tc:<turn>.<call>.result`` block of one tool call."""
    return Block.new(
        TOOL_RESULT,
        turn_id,
        ts,
        path=tc_path(turn_id, outcome.call_id, "result"),
        call_id=outcome.call_id,
        mime="application/json",
        data=dict(data),
        meta={"tool": outcome.tool, "ok": outcome.ok},
    )


def signal_block(turn_id: str, signal: ev.DoneSignal, task_id: str, ts: float) -> Block:
    """An applied DONE: the agent's summary and artifacts, for the model's next round."""
    text = f"{signal.agent}: {signal.summary}"
    for artifact in signal.artifacts:
        text += f"\n- artifact {artifact.path} ({artifact.mime})"
        if artifact.text:
            text += f": {artifact.text}"
    return Block.new(
        SIGNAL_DONE,
        turn_id,
        ts,
        path=ar_path(turn_id, f"signal.done.{task_id}"),
        text=text,
        meta={"agent": signal.agent, "task_id": task_id, "signal_id": signal.signal_id},
    )


def final_blocks(
    turn_id: str, answer: str, status: str, followups: Sequence[str], ts: float
) -> list[Block]:
    """The completion and the suggested followups that close a turn."""
    blocks = []
    if answer:
        blocks.append(
            Block.new(
                COMPLETION,
                turn_id,
                ts,
                path=ar_path(turn_id, "assistant.completion"),
                text=answer,
                meta={"status": status},
            )
        )
    if followups:
        blocks.append(
            Block.new(
                SUGGESTED_FOLLOWUPS,
                turn_id,
                ts,
                path=ar_path(turn_id, "stage.suggested_followups"),
                mime="application/json",
                data=list(followups),
            )
        )
    return blocks


def apply_writes(
    tl: Timeline, items: Sequence[Write], *, turn_id: str, running: str | None, ts: float
) -> None:
    """Apply the writes of turn ``turn_id`` to ``tl`` in order. ``running`` is the
    conversation's running turn, if any (late DONEs are anchored to it)."""
    for item in items:
        if isinstance(item, Block):
            tl.append(item)
        elif isinstance(item, ToolOutcome):
            tl.append(result_block(turn_id, item, _result_data(tl, item), ts))
            for block in item.after:
                tl.append(block)
        elif isinstance(item, NotesAck):
            tl.acknowledge(item.text, turn_id=turn_id, ts=item.ts, iteration=item.iteration)
        else:
            record_late_signal(tl, item, running=running, ts=ts)


def record_late_signal(tl: Timeline, late: LateSignal, *, running: str | None, ts: float) -> str:
    """A DONE after its turn: a block under the latest turn; returns the text to announce."""
    signal = late.signal
    turns = tl.turn_ids()
    anchor = running or (turns[-1] if turns else signal.turn_id or "late")
    text = f"late DONE from {signal.agent}"
    if signal.task_id:
        text += f" for task {signal.task_id}"
    if signal.turn_id:
        text += f" of turn {signal.turn_id}"
    text += f" ({late.reason}): {signal.summary}"
    tl.append(
        Block.new(
            SIGNAL_DONE,
            anchor,
            ts,
            path=ar_path(anchor, f"signal.late.{signal.signal_id}"),
            text=text,
            meta={
                "agent": signal.agent,
                "task_id": signal.task_id,
                "for_turn": signal.turn_id,
                "late": True,
                "signal_id": signal.signal_id,
            },
        )
    )
    tl.notices.next.append(text)
    return text


def _result_data(tl: Timeline, outcome: ToolOutcome) -> dict[str, Any]:
    """The result data; an external tool's source rows join the pool and are named by SID."""
    data = dict(outcome.data)
    pooled = pool_sources(tl, outcome.sources) if outcome.sources else []
    if not pooled:
        return data
    heads = "\n".join(f"[S:{r['sid']}] {r['title']} — {r['url']}" for r in pooled)
    content = data.pop("content", "") or ""
    status = data.pop("status", "ok")
    merged = heads + ("\n" + content if content else "")
    return {"status": status, "sources": pooled, "content": merged, **data}


def pool_sources(tl: Timeline, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Add a tool's source rows (url, title, text) to the pool; the SIDs they got."""
    proposals = [
        SourceRow(
            0,
            url=str(row.get("url") or ""),
            title=str(row.get("title") or ""),
            text=str(row.get("text") or "")[:2000],
            provider=str(row.get("provider") or ""),
        )
        for row in rows[:MAX_TOOL_SOURCES]
        if isinstance(row, Mapping)
    ]
    out: list[dict[str, Any]] = []
    for pooled in tl.sources.add_rows(proposals):
        if pooled is not None:
            out.append({"sid": pooled.sid, "title": pooled.title, "url": pooled.url})
    return out
