"""react.write: a file of the current turn on the ``canvas`` or ``timeline_text`` channel.

The file goes to the workspace (``ctx.files()``, ``actline.tools.workspace``) as a version of
the current turn; ``timeline_text`` also shows its text as a block. A write on ``canvas`` or
with ``kind`` ``display`` is shown to the client as a canvas panel by the decision loop
(``actline.actors.turn.displays``), from its params and result. The ``internal`` channel is a
memory anchor (``actline.tools.react.memory.anchor``); the other workspace tools are
``actline.tools.react.files``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from actline.timeline import Block
from actline.timeline.blocks import TOOL_RESULT
from actline.timeline.errors import PathError

from .base import Notice, ReactContext, ReactOutcome, choice, failed, refuse, write_order_notice
from .files import current_target
from .memory import anchor

__all__ = ["CANVAS_MIME", "WRITE_CHANNELS", "WRITE_KINDS", "write"]

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


def write(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
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
        return anchor(path, content, scratchpad, ctx)
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
