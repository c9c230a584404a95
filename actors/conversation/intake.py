"""What user input puts on a conversation's timeline.

A turn request, before the loop starts: the turn's header, the user's prompt, one meta
block per attachment and, for the first turn of a conversation, a ``stage.gate`` with its
title (``actline.actors.conversation.title``: the heuristic one, at once; a real model's may
follow beside the turn). An inline attachment's bytes go to the turn's workspace first
(``store_attachments``: ``fi:<turn>.user.attachments/<name>``), so a file that cannot be
stored leaves nothing on the timeline. A followup joins the running turn, its attachments
under a message-scoped path (``fi:<turn>.external.followup.attachments/<message>/<name>``);
feedback is recorded under the latest turn and announced next turn. Everything here was
checked by ``actline.actors.configuration.checks`` first (sizes, timestamps); a timestamp the node
replaced keeps the sender's in its block's meta as ``client_ts``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actline import messages
from actline.actors.configuration.checks import client_ts
from actline.messages import new_id
from actline.timeline import Block, Timeline
from actline.timeline.blocks import (
    FEEDBACK,
    USER_ATTACHMENT_META,
    USER_FOLLOWUP,
    USER_PROMPT,
)
from actline.timeline.paths import ar_path, parse_path
from actline.tools.workspace.workspace import WorkspaceBackend

from .title import gate_block, heuristic_title


def store_attachments(
    workspace: WorkspaceBackend,
    turn_id: str,
    attachments: Sequence[messages.Attachment],
    *,
    message_id: str | None = None,
) -> tuple[str, ...]:
    """Write the inline attachments' bytes to the turn's workspace, in order: their ``fi:``
    paths (``""`` for a reference, which has no file). A prompt's go under
    ``user.attachments``, a followup's (``message_id``) under its message's folder.

    Blocking (a git workspace runs git): the conversation calls it off the event loop when
    its workspace is slow (``ConversationFiles.call``), before anything is appended."""
    paths = []
    for attachment in attachments:
        if attachment.data is None:
            paths.append("")
        elif message_id is None:
            paths.append(
                workspace.write(
                    turn_id,
                    "user.attachments",
                    attachment.name,
                    attachment.data,
                    mime=attachment.mime,
                )
            )
        else:
            paths.append(
                workspace.write_followup_attachment(
                    turn_id, message_id, attachment.name, attachment.data, mime=attachment.mime
                )
            )
    return tuple(paths)


def discard_attachments(workspace: WorkspaceBackend, turn_id: str, files: Sequence[str]) -> None:
    """Delete what ``store_attachments`` stored (``files``) of a followup that did not join
    its turn: no file of the turn is left that no block names."""
    for file in files:
        if file:
            path = parse_path(file)
            workspace.delete(turn_id, path.name, path.rel)


def contribute(
    tl: Timeline,
    request: messages.TurnRequest,
    profile: Mapping[str, Any] | None = None,
    files: Sequence[str] = (),
) -> None:
    """The turn's header (``profile``, the resolved one, in its meta), prompt (with
    ``client_ts`` in its meta when the node replaced the request's timestamp), attachments
    (``files``: what ``store_attachments`` stored of them) and (first turn) title gate."""
    tid, ts = request.turn_id, request.ts.timestamp()
    stored = _stored(request.attachments, files)
    new_conversation = not tl.turn_ids()
    tl.begin_turn(tid, ts, {"profile": dict(profile)} if profile is not None else None)
    path = ar_path(tid, "user.prompt")
    tl.append(Block.new(USER_PROMPT, tid, ts, path=path, text=request.text, meta=_stamp(request)))
    for attachment, file in stored:
        tl.append(attachment_block(tl, tid, ts, attachment, file))
    if new_conversation:
        tl.append(gate_block(tid, ts, heuristic_title(request.text), "heuristic"))


def recorded_profile(tl: Timeline, request: messages.TurnRequest) -> Mapping[str, Any]:
    """The request's config, with the profile its header recorded when the turn resumes
    (a restart keeps the settings it began with, whatever the node's are now)."""
    header = tl.header(request.turn_id)
    table = header.meta.get("profile") if header is not None else None
    return request.config if table is None else {**request.config, "profile": table}


def attachment_block(
    tl: Timeline,
    tid: str,
    ts: float,
    attachment: messages.Attachment,
    file: str,
    *,
    message_id: str | None = None,
    ref_path: str | None = None,
) -> Block:
    """The attachment's meta block. An inline one's bytes are stored at ``file`` (a
    followup's under its ``message_id``); a reference has no file: its block's path is
    ``ref_path``, else the next ``user.attachment.<n>``."""
    meta: dict[str, Any] = {"name": attachment.name, "mime": attachment.mime}
    if attachment.data is not None:
        if message_id is not None:
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
        path=file or ref_path or ar_path(tid, f"user.attachment.{len(tl.turn_blocks(tid))}"),
        text=text,
        meta=meta,
    )


def followup_message_id(number: int, msg: messages.Followup) -> str | None:
    """The message id of the ``number``-th followup, ``f<number>-<new id>``, when it has
    attachments (their folder); None without."""
    return new_id(f"f{number}-") if msg.attachments else None


def add_followup(
    tl: Timeline,
    turn_id: str,
    number: int,
    msg: messages.Followup,
    *,
    message_id: str | None = None,
    files: Sequence[str] = (),
) -> None:
    """The ``number``-th followup of the running turn ``turn_id`` and a meta block per
    attachment (``files``: what ``store_attachments`` stored of them under ``message_id``,
    which the followup's meta names)."""
    stored = _stored(msg.attachments, files)
    path = ar_path(turn_id, f"user.followup.{number}")
    ts = msg.ts.timestamp()
    meta = _stamp(msg)
    if message_id is not None:
        meta["message_id"] = message_id
    tl.append(Block.new(USER_FOLLOWUP, turn_id, ts, path=path, text=msg.text, meta=meta))
    for i, (attachment, file) in enumerate(stored):
        ref_path = ar_path(turn_id, f"user.followup.{number}.attachment.{i + 1}")
        tl.append(
            attachment_block(
                tl, turn_id, ts, attachment, file, message_id=message_id, ref_path=ref_path
            )
        )


def _stored(
    attachments: Sequence[messages.Attachment], files: Sequence[str]
) -> list[tuple[messages.Attachment, str]]:
    """Each attachment with its stored file; a count that differs is the caller's bug."""
    if len(files) != len(attachments):
        raise ValueError(
            f"{len(attachments)} attachments but {len(files)} stored files: store them with "
            "store_attachments first"
        )
    for attachment, file in zip(attachments, files, strict=True):
        if (attachment.data is not None) != bool(file):
            raise ValueError(f"attachment {attachment.name!r}: its stored file is {file!r}")
    return list(zip(attachments, files, strict=True))


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
    """``client_ts`` (the sender's timestamp) when the node replaced it
    (``actline.actors.configuration.checks``)."""
    original = client_ts(msg)
    return {} if original is None else {"client_ts": original}
