"""The sandbox's kernel layers as test parameters, and what tests check after a run.

A layer this machine cannot provide is skipped with the reason: Landlock when the kernel has
none, bubblewrap only when it is not installed (``make sandbox-deps`` installs it) or cannot
create its namespaces here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tools.confinement import Confinement, choose

KERNEL_MODES = ("landlock", "bwrap")
"""The kernel layers; ``unconfined`` (the audit hook alone) is asked for by name."""


def confinement_or_skip(mode: str) -> Confinement:
    """The ``ACTLINE_SANDBOX=mode`` confinement, or a skip saying why it is unavailable."""
    found = choose(mode)
    if found.usable:
        return found
    if mode == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip(
            "bubblewrap is not installed and could not be: `make sandbox-deps` "
            "(apt-get install bubblewrap) as root or with sudo"
        )
    pytest.skip(found.detail)


def running(marker: Path) -> list[int]:
    """Live processes whose command line names ``marker`` (a run's workspace, which is in
    the runner's arguments, and bubblewrap's)."""
    needle = str(marker).encode()
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            pids.append(int(entry.name))
    return pids
