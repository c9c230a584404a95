"""Errors of the timeline package.

Hierarchy::

    TimelineError
    ├── PathError          a logical path that breaks a grammar rule (rule, path, detail)
    ├── BlockError         a block dict that is not a valid block (reason, field)
    ├── SourceError        a source row that cannot enter the pool (reason)
    ├── PlanError          a plan operation that is not allowed (code, detail)
    └── CompactionError    a compaction that cannot be applied (reason)

Every error keeps its fields and pickles (they cross Ray process boundaries).
Refusals that the model should see (a hide before the cache point, a read of a
missing path) are results with a status code, not exceptions.
"""

from __future__ import annotations

from typing import Any


class TimelineError(Exception):
    """Base of every error raised by the timeline package."""


class PathError(TimelineError):
    """A logical path that breaks a rule of the grammar in ``actline.timeline.paths``.

    ``rule`` is a stable code (``absolute_path``, ``dot_segment``, ``unknown_prefix``, ...)
    that callers can turn into a notice; ``detail`` says what to write instead.
    """

    def __init__(self, rule: str, path: str, detail: str = "") -> None:
        self.rule = rule
        self.path = path
        self.detail = detail
        text = f"{rule}: {path!r}"
        super().__init__(f"{text}: {detail}" if detail else text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rule, self.path, self.detail))


class BlockError(TimelineError):
    """A block (usually a dict from the wire or from storage) that is not valid."""

    def __init__(self, reason: str, field: str = "") -> None:
        self.reason = reason
        self.field = field
        super().__init__(f"{field}: {reason}" if field else reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.field))


class SourceError(TimelineError):
    """A source row that cannot enter the sources pool."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))


class PlanError(TimelineError):
    """A plan operation that is not allowed (``code`` is the notice code)."""

    def __init__(self, code: str, detail: str = "") -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}" if detail else code)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.detail))


class CompactionError(TimelineError):
    """A compaction plan that no longer fits the timeline it was made for."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))
