"""The store the console reads: the runtime's own (a node runs here) or the one at the home.

With ``--nats`` and no node in the process, the console opens the store a node left at
``--home``/``ACTLINE_HOME`` (LMDB readers never block that node's writer), once, on the
first request that needs it; ``ConfigError`` when there is none.
"""

from __future__ import annotations

from pathlib import Path

from actline.storage import Store
from actline.stored import open_existing

from ..config import ConfigError
from ..runtime import Runtime

__all__ = ["StoreAccess"]


class StoreAccess:
    def __init__(self, runtime: Runtime, home: Path) -> None:
        self.runtime = runtime
        self.home = home
        self._own: Store | None = None

    def get(self) -> Store:
        """The store; ``ConfigError`` naming the home when there is none."""
        if self.runtime.store is not None:
            return self.runtime.store
        if self._own is None:
            self._own = open_existing(self.home)
        return self._own

    def maybe(self) -> Store | None:
        """The store, or None when there is none (yet)."""
        try:
            return self.get()
        except ConfigError:
            return None

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None
