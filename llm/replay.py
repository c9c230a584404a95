"""ReplayModel: plays a recorded script of raw model outputs, one per call.

A script is a list of outputs or a JSONL file whose lines are either a JSON
string (the raw output) or an object ``{"output": "...", "usage": {...}}``.
Each call streams the next output in small chunks (``chunk_chars``, optional
``delay`` between them, so cancellation can be tested) and then its usage
(recorded, or estimated from the text). A call past the end raises
``ScriptExhausted`` naming the script and the call number.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actline.messages import GenerateRequest, Usage
from actline.timeline.tokens import DEFAULT_COUNTER

from .errors import ModelConfigError, ScriptExhausted
from .protocol import Chunk


@dataclass(frozen=True, slots=True)
class Recorded:
    """One scripted output and, optionally, the usage to report for it."""

    output: str
    usage: Usage | None = None


def load_script(path: str | Path) -> list[Recorded]:
    """Read a JSONL script; a bad line raises ``ModelConfigError`` with its line number."""
    out: list[Recorded] = []
    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ModelConfigError("replay script", f"cannot read {source}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            out.append(_recorded(item))
        except (ValueError, TypeError) as exc:
            raise ModelConfigError(
                "replay script",
                f'{source}:{number}: expected a JSON string or an object with "output": {exc}',
            ) from None
    return out


def _recorded(item: Any) -> Recorded:
    if isinstance(item, Recorded):
        return item
    if isinstance(item, str):
        return Recorded(item)
    if isinstance(item, dict) and isinstance(item.get("output"), str):
        usage = item.get("usage")
        return Recorded(item["output"], Usage.model_validate(usage) if usage else None)
    raise TypeError(f"not a scripted output: {type(item).__name__}")


@dataclass
class ReplayModel:
    """A ``Model`` that replays ``script`` in order; ``requests`` keeps what it was asked."""

    script: Sequence[Recorded]
    name: str = "replay"
    chunk_chars: int = 24
    delay: float = 0.0
    source: str = "<inline>"
    requests: list[GenerateRequest] = field(default_factory=list)

    @classmethod
    def of(cls, outputs: Iterable[str | Recorded | dict[str, Any]], **kwargs: Any) -> ReplayModel:
        """A model over inline outputs."""
        return cls([_recorded(o) for o in outputs], **kwargs)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ReplayModel:
        return cls(load_script(path), source=str(path), **kwargs)

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def remaining(self) -> int:
        return len(self.script) - len(self.requests)

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        call = len(self.requests) + 1
        if call > len(self.script):
            raise ScriptExhausted(self.source, call, len(self.script))
        self.requests.append(request)
        recorded = self.script[call - 1]
        text = recorded.output
        step = max(1, self.chunk_chars)
        for i in range(0, len(text), step):
            if self.delay and i:
                await asyncio.sleep(self.delay)
            yield text[i : i + step]
        yield recorded.usage or Usage(
            input_tokens=sum(DEFAULT_COUNTER.count(b.get("text", "")) for b in request.blocks)
            + DEFAULT_COUNTER.count(request.system),
            output_tokens=DEFAULT_COUNTER.count(text),
            model=self.name,
            request_id=f"replay-{call}",
        )
