"""Credentials for the processes a test starts against a server it runs (auth is on)."""

from __future__ import annotations

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
