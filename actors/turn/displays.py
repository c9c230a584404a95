"""Files written for display reach clients: ``react.write`` outputs as canvas deltas.

A successful ``react.write`` on the ``canvas`` channel, or with ``kind`` ``display`` on
``timeline_text``, is shown to the client as it is written: the decision loop, when the
round's react.* outcomes come back, publishes its content on ``al.stream.<cid>`` as
``stream.delta`` deltas of channel ``canvas`` whose ``key`` is the written path (the
same panel a canvas key of the model's own ``<channel:canvas>`` gets, see
``actline.actors.pools.streamer``): one delta with the whole content (``replace``: a later write of
the same path replaces the panel) and a ``completed`` one. Writes on the ``internal``
channel are memory, never displayed; a write that failed shows nothing (its notice goes
to the model).

``unresolved_notices`` is the other half of what the client is shown: when the model's
reply cited a source that is not in the pool (the client saw ``[?<sid>]``, see
``actline.actors.pools.streamer``), the notice the model sees next round.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from actline.bus import Bus, BusError
from actline.messages import GenerateResult, StreamDelta
from actline.tools.react.core import ReactOutcome

from . import events as ev
from .protocol import Notice
from .reply import TurnOutput
from .tool_round import ToolRound

log = logging.getLogger(__name__)

DISPLAY_CHANNEL: Final = "canvas"
"""The ``stream.delta`` channel displays go out on."""
FORMATS: Final = {
    "text/markdown": "markdown",
    "text/html": "html",
    "application/json": "json",
    "text/plain": "text",
}
"""Mime type of a written file -> the delta ``format`` (other types go as the mime)."""


def displays(
    calls: Sequence[ev.ToolSpec], outcomes: Sequence[ReactOutcome]
) -> list[tuple[str, str, str]]:
    """(path, format, content) of each displayed write among a round's react.* calls."""
    shown: list[tuple[str, str, str]] = []
    for call, outcome in zip(calls, outcomes, strict=False):
        result = outcome.result
        if call.tool != "react.write" or not outcome.ok:
            continue
        channel, kind = result.get("channel"), result.get("kind")
        if channel == "internal" or (channel != "canvas" and kind != "display"):
            continue
        content, path = call.params.get("content"), result.get("path")
        if not isinstance(content, str) or not isinstance(path, str):
            continue
        mime = str(result.get("mime") or "text/plain")
        shown.append((path, FORMATS.get(mime, mime), content))
    return shown


async def publish_displays(
    bus: Bus, out: TurnOutput, tools: ToolRound, outcomes: Sequence[ReactOutcome]
) -> None:
    """Publish the displayed writes among ``outcomes`` (of ``tools.react``, module
    docstring) as deltas of ``out``'s turn, counting on ``out.seq``."""
    subject = bus.subjects.stream(out.conversation_id)
    for path, fmt, content in displays(tools.react, outcomes):
        for text, completed in ((content, False), ("", True)):
            delta = StreamDelta(
                conversation_id=out.conversation_id,
                turn_id=out.turn_id,
                channel=DISPLAY_CHANNEL,
                text=text,
                seq=out.seq,
                round=tools.round,
                completed=completed,
                key=path,
                format=fmt,
                replace=not completed,
            )
            try:
                await bus.publish(subject, delta)
            except BusError as exc:  # the turn goes on; the client misses this panel
                log.warning("display %s of turn %s not sent: %s", path, out.turn_id, exc)
                return
            out.seq += 1


def unresolved_notices(result: GenerateResult) -> tuple[Notice, ...]:
    """The notice the model sees next round when its reply cited SIDs that match no
    source (``result.unresolved_sources``); none when every citation resolved."""
    if not result.unresolved_sources:
        return ()
    sids = ", ".join(str(s) for s in result.unresolved_sources)
    marks = " ".join(f"[?{s}]" for s in result.unresolved_sources)
    message = (
        f"the citation(s) of source(s) {sids} match no source in this conversation; readers "
        f"saw {marks} in their place. Cite only [[S:n]] for sources listed in the sources "
        "pool (read a document first to add it)."
    )
    return (Notice("unresolved_citation", message),)
