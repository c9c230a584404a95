"""What the Ray job needs of the Python that runs it, checked before anything imports it.

``ray job submit ... -- python -m actline.actors.cluster.ray_job`` runs its entrypoint in a
shell on the head node, with whichever ``python`` that shell finds first: often the system's,
which lacks the project's dependencies. This module uses the standard library only, so that
such a Python gets one line naming the fix instead of a traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

__all__ = ["FIX", "REQUIRED", "missing", "missing_dependency", "require"]

REQUIRED = ("msgpack", "nats", "pydantic", "rich", "lmdb", "numpy", "ray")
"""The modules the job imports that a bare Python lacks."""
FIX = (
    "run the job with the project's Python: .venv/bin/python -m actline.actors.cluster.ray_job "
    "… (make .venv/.installed), or give Ray a runtime_env with pip"
)


def missing(names: Sequence[str] = REQUIRED) -> list[str]:
    """The modules of ``names`` this Python cannot import."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def message(absent: Sequence[str]) -> str:
    """The one line that names the missing modules and the fix."""
    return f"{sys.executable} has no {', '.join(absent)}: {FIX}"


def require(names: Sequence[str] = REQUIRED) -> None:
    """Exit with the one line when this Python lacks any of ``names``."""
    absent = missing(names)
    if absent:
        raise SystemExit(message(absent))


def missing_dependency(exc: ModuleNotFoundError) -> BaseException:
    """What to raise for ``exc``, met while importing the job: the one line when a module
    of ``REQUIRED`` is missing, else ``exc`` itself."""
    absent = missing()
    return SystemExit(message(absent)) if absent else exc
