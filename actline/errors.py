"""The errors of the facade; each keeps its fields and pickles.

::

    ActlineError
    ├── ConfigError         a setting that cannot work (message: which, and what to do)
    │   └── CaseFileError   an eval case file that cannot be used (path, line, field, problem)
    └── RuntimeNotStarted   a ``Runtime`` was used outside ``async with`` (what)

Errors of the parts below keep their own types (``bus.BusError``, ``storage.StorageError``,
``actline.actors.errors.ActorError``, ``llm.ModelError``); the CLI turns each into one line.
"""

from __future__ import annotations

from typing import Any


class ActlineError(Exception):
    """Base of the facade's errors."""


class ConfigError(ActlineError, ValueError):
    """A setting that cannot work; the message says which and what to do."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,))


class CaseFileError(ConfigError):
    """Line ``line`` (1-based; 0: the file itself) of the eval case file ``path`` is not a
    usable case: ``field`` (empty when the line as a whole) has ``problem``."""

    def __init__(self, path: str, line: int, field: str, problem: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {field + ': ' if field else ''}{problem}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.line, self.field, self.problem))


class RuntimeNotStarted(ActlineError):
    """``what`` of a ``Runtime`` was used before ``async with Runtime() as rt``."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what} needs a started runtime: use async with Runtime() as rt")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what,))
