"""The per-node LMDB store: block log, snapshot headers, turn log, path index, artifacts.

See ``storage.store`` for the layout, the transaction and locking rules.
"""

from . import artifacts
from .errors import (
    DiskFull,
    NotStored,
    RevisionConflict,
    SequenceGap,
    StorageError,
    StoreFull,
)
from .store import Loaded, Store
from .workspace import FileStat, Workspace

__all__ = [
    "DiskFull",
    "FileStat",
    "Loaded",
    "NotStored",
    "RevisionConflict",
    "SequenceGap",
    "StorageError",
    "Store",
    "StoreFull",
    "Workspace",
    "artifacts",
]
