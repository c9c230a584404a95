"""The model protocol every model implements, and helpers to consume a stream.

A model call takes a ``GenerateRequest`` (system prompt, rendered blocks, cache
marks) and yields text chunks as they arrive, then exactly one ``Usage`` as the
last item. Cancellation contract: closing the iterator (``aclose()``) or
cancelling the task that iterates it stops the call at once; a network model
closes its HTTP stream before ``aclose`` returns, so nothing keeps running.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from actline.messages import GenerateRequest, Usage

Chunk = str | Usage
"""One item of a model stream: a text chunk, or the final usage."""


@runtime_checkable
class Model(Protocol):
    """Anything that turns a rendered context into streamed text plus usage."""

    @property
    def name(self) -> str:
        """The model name reported in usage."""
        ...

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        """Text chunks in order, then one ``Usage``; cancellable at any await."""
        ...


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole model call: the concatenated text and its usage."""

    text: str
    usage: Usage


async def complete(model: Model, request: GenerateRequest) -> Completion:
    """Run one call to the end and return its text and usage."""
    parts: list[str] = []
    usage = Usage(model=model.name)
    stream = model.stream(request)
    try:
        async for chunk in stream:
            if isinstance(chunk, Usage):
                usage = chunk
            else:
                parts.append(chunk)
    finally:
        await close_stream(stream)
    return Completion("".join(parts), usage)


async def close_stream(stream: AsyncIterator[Chunk]) -> None:
    """Close a model stream (an async generator) so its HTTP stream closes now, not at GC."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


@contextlib.asynccontextmanager
async def opened(stream: AsyncIterator[Chunk]) -> AsyncIterator[AsyncIterator[Chunk]]:
    """``async with opened(model.stream(r)) as s``: the stream is closed on any exit."""
    try:
        yield stream
    finally:
        await close_stream(stream)
