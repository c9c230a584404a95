"""What installing actline puts into an environment: one top-level name, ``actline``.

The wheel is built from a copy of this tree (``pip wheel``, no build isolation: the
setuptools of the test environment) and unpacked into a folder that a fresh interpreter,
started in an unrelated folder, imports from. A checkout run in place (pytest,
``python -m``) sees the same package tree through ``actline/_layout.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from actline import _layout

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    source = build / "actline"  # a clean copy: a stale build/ of the checkout is not packed
    skip = shutil.ignore_patterns(
        ".git", ".venv", "build", ".actline*", "__pycache__", "*.egg-info"
    )
    shutil.copytree(ROOT, source, ignore=skip)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"]
    subprocess.run(
        [*pip, "--wheel-dir", str(out), str(source)],
        cwd=build,
        check=True,
        timeout=300,
    )
    (found,) = out.glob("actline-*.whl")
    return found


def test_the_wheel_has_actline_as_its_only_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if ".dist-info/" not in n}
    assert tops == {"actline"}, tops
    for folder in _layout.FOLDERS:
        assert f"actline/{folder}/__init__.py" in names
    for module in ("actors/turn/state/record.py", "tools/sandbox/runner.py", "cli/main.py"):
        assert f"actline/{module}" in names
    assert any(n.startswith("actline/web/static/") for n in names)
    assert not any(n.startswith(("actline/tests/", "actline/bench/")) for n in names)


def test_the_installed_tree_imports_beside_a_clone_and_leaves_generic_names_free(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "actline").mkdir(parents=True)  # a clone named actline beside the script
    (elsewhere / "actline" / "README.md").write_text("not a package\n")
    code = "\n".join(
        [
            "import importlib.util, sys",
            "import actline.actors.node.node, actline.timeline, actline.cli",
            "from actline import Config, Runtime",
            "print(actline.timeline.__file__)",
            "generic = ('actors', 'messages', 'bus', 'storage', 'timeline', 'channels', 'tools')",
            "print(sorted(m for m in sys.modules if m.split('.')[0] in generic + ('llm',)))",
            "print(importlib.util.find_spec('llm'))",
        ]
    )
    script = elsewhere / "script.py"
    script.write_text(code + "\n")
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=elsewhere,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    where, loaded, llm = out.stdout.splitlines()
    assert Path(where).is_relative_to(site), where
    assert loaded == "[]"  # nothing of actline under a generic top-level name
    assert llm == "None"  # `import llm` is free for the PyPI package of that name


def test_a_checkout_finds_the_mapped_folders_and_nothing_else_of_it() -> None:
    import actline.actors

    assert Path(actline.actors.__file__).parent == ROOT / "actors"
    assert _layout.in_checkout(ROOT / "actline")
    finder = _layout.CheckoutFinder(ROOT)
    assert finder.find_spec("actline.bench", None) is None
    assert finder.find_spec("actline.tests", None) is None
    spec = finder.find_spec("actline.llm", None)
    assert spec is not None and spec.origin == str(ROOT / "llm" / "__init__.py")
