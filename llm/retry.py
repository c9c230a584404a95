"""Context-window recovery: a forced compaction and exactly one retry."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from actline.messages import GenerateRequest

from .errors import ContextWindowExceeded
from .protocol import Chunk, Model, opened

log = logging.getLogger("actline.llm.retry")

Render = Callable[[bool], Awaitable[GenerateRequest]]
"""Renders the round's request; ``True`` asks for a forced compaction first."""


async def stream_with_compaction(model: Model, render: Render) -> AsyncIterator[Chunk]:
    """Stream one round; on ``ContextWindowExceeded`` re-render compacted and retry once.

    A second context-window error propagates (the compacted context still does
    not fit: the caller ends the turn with that error).
    """
    request = await render(False)
    try:
        async with opened(model.stream(request)) as first:
            async for chunk in first:
                yield chunk
        return
    except ContextWindowExceeded as exc:
        log.warning("context window exceeded (%s): compacting and retrying once", exc.detail)
    request = await render(True)
    async with opened(model.stream(request)) as second:
        async for chunk in second:
            yield chunk
