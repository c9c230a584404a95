"""Stop a reply that repeats itself: a small model in a loop writes the same sentence
until its output limit, which costs minutes on a CPU and says nothing new.

``RepetitionGuard.feed`` takes a stream's text as it arrives and says when the text's
tail has become a loop: the last ``window`` characters equal the ``window`` characters
one period earlier, for a period of at most ``max_period`` characters, with at least
``min_repeats`` copies of the repeated unit. Exact loops only: a list whose items differ
(numbered steps, a table) is never stopped. Checked every ``every`` characters, so the
cost is a few slice comparisons per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RepetitionGuard:
    """Detects a reply whose tail loops (see the module doc)."""

    window: int = 600
    max_period: int = 200
    min_repeats: int = 4
    every: int = 64
    text: list[str] = field(default_factory=list)
    size: int = 0
    checked: int = 0
    period: int = 0
    """The loop's period in characters once one is found (0: none)."""

    def feed(self, chunk: str) -> bool:
        """Add ``chunk``; True when the text now ends in a loop."""
        self.text.append(chunk)
        self.size += len(chunk)
        if self.size - self.checked < self.every:
            return False
        self.checked = self.size
        return self._loops()

    def _loops(self) -> bool:
        need = self.window + self.max_period
        tail = "".join(self.text)[-need:]
        self.text = [tail]
        window = self.window
        if len(tail) < window + 1:
            return False
        end = tail[-window:]
        for period in range(1, min(self.max_period, len(tail) - window) + 1):
            if window < period * (self.min_repeats - 1):
                break
            if tail[-window - period : -period] == end:
                self.period = period
                return True
        return False
