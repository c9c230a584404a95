"""How much of a policy's text a local model server sends, as the real APIs do: at most
``max_tokens`` tokens, and nothing from the first stop sequence on (its text is not
sent). Text that may be the start of a stop sequence is held back until the next chunk
shows it is not one, so a sequence split across chunks still stops the reply. Both local
servers (the Messages API and Chat Completions) cut replies with ``ReplyLimit``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from actline.timeline.tokens import DEFAULT_COUNTER

Cut = Literal["max_tokens", "stop_sequence"]
Emit = Callable[[str], Coroutine[Any, Any, None]]
"""Streams one piece of a reply to the client."""


def fit(done: str, text: str, limit: int) -> str:
    """The longest head of ``text`` such that ``done + head`` counts at most ``limit`` tokens."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if DEFAULT_COUNTER.count(done + text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


@dataclass(slots=True)
class ReplyLimit:
    """The part of each chunk to send; ``cut`` says why the reply stopped early (None: it
    did not), ``matched`` which stop sequence stopped it."""

    max_tokens: int | None = None
    stop: Sequence[str] = ()
    sent: str = ""
    held: str = ""
    cut: Cut | None = None
    matched: str | None = None

    def feed(self, chunk: str) -> str:
        """What to send of ``chunk`` now ("" once the reply is cut)."""
        if self.cut is not None:
            return ""
        text = self.held + chunk
        self.held = ""
        found = self._first_stop(text)
        if found is not None:
            index, self.matched = found
            text = text[:index]
            self.cut = "stop_sequence"
        else:
            keep = self._partial_stop(text)
            text, self.held = text[: len(text) - keep], text[len(text) - keep :]
        return self._within(text)

    def finish(self) -> str:
        """The text held back at the end of the policy's reply (it was no stop sequence)."""
        if self.cut is not None or not self.held:
            return ""
        text, self.held = self.held, ""
        return self._within(text)

    @staticmethod
    async def send(parts: list[str], text: str, emit: Emit | None) -> None:
        """Keep ``text`` (what ``feed`` or ``finish`` gave) in ``parts``, and stream it."""
        if text:
            parts.append(text)
            if emit is not None:
                await emit(text)

    def _within(self, text: str) -> str:
        if self.max_tokens is not None and DEFAULT_COUNTER.count(self.sent + text) > (
            self.max_tokens
        ):
            text = fit(self.sent, text, self.max_tokens)
            self.cut = "max_tokens"
            self.held = ""
        self.sent += text
        return text

    def _first_stop(self, text: str) -> tuple[int, str] | None:
        hits = [(text.find(s), s) for s in self.stop if s and s in text]
        return min(hits) if hits else None

    def _partial_stop(self, text: str) -> int:
        """The length of the longest tail of ``text`` that starts some stop sequence."""
        longest = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(text)), longest, -1):
                if s.startswith(text[-n:]):
                    longest = n
                    break
        return longest
