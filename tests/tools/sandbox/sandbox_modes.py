"""The sandbox's kernel layers as test parameters, and what tests check after a run.

The tests that run code take the layers this machine provides (``AVAILABLE``, probed once at
collection: Landlock when the kernel has it, bubblewrap when it is installed — ``make
sandbox-deps`` installs it — and can create its namespaces). A layer it cannot provide is not
skipped: ``tests/tools/sandbox/test_sandbox_layers.py`` checks that asking for it is refused with
the reason and nothing runs, as ``ACTLINE_SANDBOX`` promises.
"""

from __future__ import annotations

import os
from pathlib import Path

from actline.tools.sandbox.confinement import Confinement, choose

KERNEL_MODES = ("landlock", "bwrap")
"""The kernel layers; ``unconfined`` (the audit hook alone) is asked for by name."""
AVAILABLE = tuple(mode for mode in KERNEL_MODES if choose(mode).usable)
"""The kernel layers this machine provides."""


def available_layer(mode: str) -> Confinement:
    """The ``ACTLINE_SANDBOX=mode`` confinement; only asked for modes in ``AVAILABLE``."""
    found = choose(mode)
    assert found.usable, f"{mode} was probed as available: {found.detail}"
    return found


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
