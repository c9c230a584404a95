"""The package tree of the wheel: the repository's top-level folders under ``actline.``.

``actors/``, ``messages/``, ``bus/``, ``storage/``, ``timeline/``, ``channels/``, ``tools/``
and ``llm/`` sit at the repository's root (the layout the project was specified with) and
install as ``actline.actors``, ``actline.messages`` and so on; ``actline`` is the wheel's
only top-level name. Everything else is in ``pyproject.toml``.
"""

import runpy
from pathlib import Path

from setuptools import find_packages, setup

NAMESPACE = "actline"
# The one list of mapped folders is actline/_layout.py's (stdlib only, so it runs here).
FOLDERS = runpy.run_path(str(Path(__file__).parent / "actline" / "_layout.py"))["FOLDERS"]

package_dir = {NAMESPACE: NAMESPACE}
packages = find_packages(include=[NAMESPACE, f"{NAMESPACE}.*"])
for folder in FOLDERS:
    package_dir[f"{NAMESPACE}.{folder}"] = folder
    packages += [f"{NAMESPACE}.{p}" for p in find_packages(include=[folder, f"{folder}.*"])]

setup(packages=packages, package_dir=package_dir)
