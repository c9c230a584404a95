"""The per-node LMDB store: block log, snapshot headers, turn log, path index, artifacts.

See ``actline.storage.store`` for the layout, the transaction and locking rules.
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
from .quota import Quota, Usage
from .store import Loaded, Outline, Store, TurnBrief
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
