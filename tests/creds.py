"""Credentials for the processes a test starts against a server it runs (auth is on)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from actline.bus.embedded import running_authority


def creds_env(
    url: str, role: str, *, prefix: str = "al", name: str = "", approver: bool = False
) -> dict[str, str]:
    """``ACTLINE_NATS_CREDS`` of ``role`` for the embedded server this process runs at ``url``
    (``approver``: a named client or agent that may approve pending tool calls)."""
    authority = running_authority(url)
    if authority is None:
        raise LookupError(f"no embedded nats-server with authentication runs at {url} here")
    path = authority.creds_path(role, name=name, prefix=prefix, approver=approver)
    return {"ACTLINE_NATS_CREDS": str(path)}


def admin_creds(url: str) -> str:
    """The admin credentials file of the embedded server this process runs at ``url``."""
    return creds_env(url, "admin")["ACTLINE_NATS_CREDS"]


ROOT = Path(__file__).resolve().parents[1]


def creds_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``actline creds ARGS`` in a child with the keys of ``home`` and nothing of this
    process's actline settings or NATS_URL (wide columns: the list's table stays whole)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTLINE_")}
    env.pop("NATS_URL", None)
    env.update(ACTLINE_HOME=str(home), PYTHONPATH=str(ROOT), COLUMNS="250")
    return subprocess.run(
        [sys.executable, "-m", "actline", "creds", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
