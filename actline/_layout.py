"""Where the sub-packages of the ``actline`` namespace live.

The repository keeps the folders the project was specified with at its root
(``actors/``, ``messages/``, ``bus/``, ``storage/``, ``timeline/``, ``channels/``,
``tools/``, ``llm/``) and installs them as ``actline.actors``, ``actline.messages`` and so
on: the build maps each folder into the namespace (``setup.py``), so a built wheel has
``actline`` as its only top-level name. Run straight from a checkout (``pytest``, ``python
-m actline.…``, a Ray job's working dir) the folders are not inside ``actline/``: a finder
then resolves ``actline.<folder>`` for those eight names to the checkout's root, and
nothing else of the checkout becomes importable under ``actline.``.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

FOLDERS = ("actors", "messages", "bus", "storage", "timeline", "channels", "tools", "llm")
"""The top-level folders of the repository that are sub-packages of ``actline``."""


def in_checkout(package_dir: Path) -> bool:
    """Whether ``package_dir`` (the ``actline`` folder) sits in a checkout, beside the
    folders it maps, rather than in an installed wheel that holds them inside."""
    root = package_dir.parent
    return all((root / f / "__init__.py").is_file() for f in FOLDERS) and not any(
        (package_dir / f).exists() for f in FOLDERS
    )


class CheckoutFinder:
    """Finds ``actline.<folder>`` in a checkout's root (a ``sys.meta_path`` finder)."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        head, _, name = fullname.partition(".")
        if head != "actline" or name not in FOLDERS:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [self.root])


def install(package_dir: Path) -> None:
    """Add the checkout finder once, when ``package_dir`` is a checkout's ``actline/``."""
    if not in_checkout(package_dir):
        return
    if any(isinstance(f, CheckoutFinder) for f in sys.meta_path):
        return
    sys.meta_path.append(CheckoutFinder(package_dir.parent))
