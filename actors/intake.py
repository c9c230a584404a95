"""What user input puts on a conversation's timeline.

A turn request, before the loop starts: the turn's header, the user's prompt, one meta
block per attachment (an inline attachment's bytes go to the turn's workspace,
``fi:<turn>.user.attachments/<name>``) and, for the first turn of a conversation, a
``stage.gate`` with its title (seed 000). A followup joins the running turn, its
attachments under a message-scoped path
(``fi:<turn>.external.followup.attachments/<message>/<name>``); feedback
is recorded under the latest turn and announced next turn. Everything here was checked
by ``actors.limits`` first (sizes, timestamps); a timestamp the node replaced keeps the
sender's in its block's meta as ``client_ts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import messages
from messages import new_id
from timeline import Block, Timeline
from timeline.blocks import FEEDBACK, STAGE_GATE, USER_ATTACHMENT_META, USER_FOLLOWUP, USER_PROMPT
from timeline.paths import ar_path
from tools.workspace import WorkspaceBackend

from .limits import client_ts

TITLE_WORDS = 8
"""Words of the first prompt that title a new conversation."""


def contribute(
    tl: Timeline,
    workspace: WorkspaceBackend,
    request: messages.TurnRequest,
    profile: Mapping[str, Any] | None = None,
) -> None:
    """The turn's header (``profile``, the resolved one, in its meta), prompt (with
    ``client_ts`` in its meta when the node replaced the request's timestamp), attachments
    and (first turn) title gate."""
    tid, ts = request.turn_id, request.ts.timestamp()
    new_conversation = not tl.turn_ids()
    tl.begin_turn(tid, ts, {"profile": dict(profile)} if profile is not None else None)
    path = ar_path(tid, "user.prompt")
    tl.append(Block.new(USER_PROMPT, tid, ts, path=path, text=request.text, meta=_stamp(request)))
    for attachment in request.attachments:
        tl.append(attachment_block(tl, workspace, tid, ts, attachment))
    if new_conversation:
        words = request.text.split()
        title = " ".join(words[:TITLE_WORDS]) + (" …" if len(words) > TITLE_WORDS else "")
        tl.append(
            Block.new(
                STAGE_GATE,
                tid,
                ts,
                path=ar_path(tid, "stage.gate"),
                mime="application/json",
                data={"title": title or "(untitled)", "new_conversation": True},
            )
        )


def recorded_profile(tl: Timeline, request: messages.TurnRequest) -> Mapping[str, Any]:
    """The request's config, with the profile its header recorded when the turn resumes
    (a restart keeps the settings it began with, whatever the node's are now)."""
    header = tl.header(request.turn_id)
    table = header.meta.get("profile") if header is not None else None
    return request.config if table is None else {**request.config, "profile": table}


def attachment_block(
    tl: Timeline,
    workspace: WorkspaceBackend,
    tid: str,
    ts: float,
    attachment: messages.Attachment,
    *,
    message_id: str | None = None,
    ref_path: str | None = None,
) -> Block:
    """The attachment's meta block; its bytes go to the turn's workspace when inline (a
    followup's, with its ``message_id``, under the followup attachments area). A reference
    has no file: its block's path is ``ref_path``, else the next ``user.attachment.<n>``."""
    meta: dict[str, Any] = {"name": attachment.name, "mime": attachment.mime}
    path = ""
    if attachment.data is not None:
        if message_id is None:
            path = workspace.write(
                tid, "user.attachments", attachment.name, attachment.data, mime=attachment.mime
            )
        else:
            path = workspace.write_followup_attachment(
                tid, message_id, attachment.name, attachment.data, mime=attachment.mime
            )
            meta["message_id"] = message_id
        meta["size"] = len(attachment.data)
    elif attachment.ref:
        meta["ref"] = attachment.ref
    text = f"attachment {attachment.name} ({attachment.mime})"
    if attachment.data is not None and attachment.mime.startswith("text/"):
        text += ":\n" + attachment.data.decode("utf-8", "replace")
    return Block.new(
        USER_ATTACHMENT_META,
        tid,
        ts,
        path=path or ref_path or ar_path(tid, f"user.attachment.{len(tl.turn_blocks(tid))}"),
        text=text,
        meta=meta,
    )


def add_followup(
    tl: Timeline,
    workspace: WorkspaceBackend,
    turn_id: str,
    number: int,
    msg: messages.Followup,
) -> None:
    """The ``number``-th followup of the running turn ``turn_id`` and a meta block per
    attachment (inline bytes under ``fi:<turn>.external.followup.attachments/<message>/``,
    the message id ``f<number>-<new id>``, in the followup's meta as ``message_id``)."""
    path = ar_path(turn_id, f"user.followup.{number}")
    ts = msg.ts.timestamp()
    meta = _stamp(msg)
    message_id = new_id(f"f{number}-") if msg.attachments else None
    # The files first: a write that fails (a full store) appends nothing.
    attached = [
        attachment_block(
            tl,
            workspace,
            turn_id,
            ts,
            attachment,
            message_id=message_id,
            ref_path=ar_path(turn_id, f"user.followup.{number}.attachment.{i + 1}"),
        )
        for i, attachment in enumerate(msg.attachments)
    ]
    if message_id is not None:
        meta["message_id"] = message_id
    tl.append(Block.new(USER_FOLLOWUP, turn_id, ts, path=path, text=msg.text, meta=meta))
    for block in attached:
        tl.append(block)


def add_feedback(tl: Timeline, anchor: str, msg: messages.Feedback) -> None:
    """Feedback on ``msg.turn_id``, under turn ``anchor``; announced next turn."""
    label = {1: "positive", -1: "negative"}.get(msg.rating, "neutral")
    text = f"feedback on turn {msg.turn_id} ({label}): {msg.text}".rstrip(": ")
    count = sum(1 for b in tl.turn_blocks(anchor) if b.type == FEEDBACK)
    tl.append(
        Block.new(
            FEEDBACK,
            anchor,
            msg.ts.timestamp(),
            path=ar_path(anchor, f"stage.feedback.{count + 1}"),
            text=text,
            meta={"for_turn": msg.turn_id, "rating": msg.rating, **_stamp(msg)},
        )
    )
    tl.notices.next.append(text)


def _stamp(msg: messages.Message) -> dict[str, Any]:
    """``client_ts`` (the sender's timestamp) when the node replaced it (``actors.limits``)."""
    original = client_ts(msg)
    return {} if original is None else {"client_ts": original}
