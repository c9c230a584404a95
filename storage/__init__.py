"""The per-node LMDB store: block log, snapshot headers, turn log, path index, artifacts.

See ``actline.storage.layout`` for the layout, ``actline.storage.environment`` for the
transaction and locking rules and ``actline.storage.store`` for the parts of ``Store``.
"""

from . import artifacts, quota
from .errors import (
    DiskFull,
    NotStored,
    QuotaExceeded,
    RevisionConflict,
    SequenceGap,
    StorageError,
    StoreFull,
)
from .outline import Outline, TurnBrief
from .quota import Quota, Usage
from .reads import Loaded
from .store import Store
from .workspace import FileStat, Workspace

__all__ = [
    "DiskFull",
    "FileStat",
    "Loaded",
    "NotStored",
    "Outline",
    "Quota",
    "QuotaExceeded",
    "RevisionConflict",
    "SequenceGap",
    "StorageError",
    "Store",
    "StoreFull",
    "TurnBrief",
    "Usage",
    "Workspace",
    "artifacts",
    "quota",
]
