"""``make lint``'s type check: mypy strict over the ``actline`` namespace as it installs.

mypy reads packages from folders and cannot follow the build's mapping of the top-level
folders into ``actline.`` (``setup.py``), nor an editable install's import hook. So this
builds the installed tree as links under ``build/typecheck`` (``actline/`` with its own
files and the eight mapped folders inside, and ``bench/``) and runs mypy there with the
project's settings (``[tool.mypy]`` in ``pyproject.toml``). Paths in its report are
relative to that tree: ``actline/actors/turn/decision.py`` is ``actors/turn/decision.py`` here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from actline._layout import FOLDERS

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"


def build_tree() -> None:
    if TREE.exists():
        shutil.rmtree(TREE)
    package = TREE / "actline"
    package.mkdir(parents=True)
    for entry in (ROOT / "actline").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, package / entry.name)
    for folder in FOLDERS:
        os.symlink(ROOT / folder, package / folder)
    os.symlink(ROOT / "bench", TREE / "bench")


def main() -> int:
    build_tree()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    return subprocess.call([*command, *sys.argv[1:]], cwd=TREE)


if __name__ == "__main__":
    raise SystemExit(main())
