"""What writes the server's replies: any object with ``stream(GenerateRequest)``.

The server ignores a ``Usage`` the policy yields: usage is accounted by the
cache simulator. ``EchoPolicy`` is the command line's default until an offline
model is plugged in; ``load_policy`` resolves the command-line choices.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from typing import Protocol

from actline.messages import GenerateRequest

from ..errors import ModelConfigError
from ..protocol import Chunk

ECHO_TEXT = (
    "<channel:thinking>echo policy: nothing to plan</channel:thinking>\n"
    '<channel:decision>{"action":"complete"}</channel:decision>\n'
    "<channel:answer>This is the local echo model: it received your request.</channel:answer>\n"
    "<channel:followup>[]</channel:followup>"
)


class Policy(Protocol):
    """Writes the reply text as chunks; cancellable at any await."""

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]: ...


class EchoPolicy:
    """Answers every request with the same short channel-protocol text, in a few chunks."""

    name = "echo"

    def __init__(self, text: str = ECHO_TEXT, chunk_chars: int = 32) -> None:
        self.text = text
        self.chunk_chars = max(1, chunk_chars)

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        for i in range(0, len(self.text), self.chunk_chars):
            yield self.text[i : i + self.chunk_chars]


def load_policy(replay: str | None = None, spec: str | None = None) -> Policy:
    """A ReplayModel over ``replay``, else ``MODULE:NAME`` (an object or a factory), else echo."""
    if replay:
        from ..replay import ReplayModel

        return ReplayModel.from_file(replay)
    if spec:
        module_name, _, attr = spec.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr or "policy")
        except (ImportError, AttributeError) as exc:
            raise ModelConfigError("--policy", f"cannot load {spec!r}: {exc}") from None
        policy = target if hasattr(target, "stream") and not isinstance(target, type) else target()
        if not hasattr(policy, "stream"):
            raise ModelConfigError("--policy", f"{spec!r} has no stream() method")
        return policy  # type: ignore[no-any-return]
    return EchoPolicy()
