"""The per-node LMDB store: block log, snapshot headers, turn log, path index, artifacts.

See ``storage.store`` for the layout, the transaction and locking rules.
"""

from .errors import DiskFull, NotStored, SequenceGap, StorageError, StoreFull
from .store import Loaded, Store

__all__ = ["DiskFull", "Loaded", "NotStored", "SequenceGap", "StorageError", "Store", "StoreFull"]
