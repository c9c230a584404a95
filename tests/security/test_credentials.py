"""The nats-server itself enforces the roles of bus/roles.py: who may connect at all, and
who may read the keys and credentials on disk.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import nats
import nats.errors
import pytest

from actline.bus import Authority, AuthRefused, Bus, ConnectFailed, EmbeddedNats
from actline.messages import Subjects
from tests.security.attempts import LEDGER
from tests.security.roles import AGENT


# -- no credentials, foreign credentials --------------------------------------------------
async def raw_refusal(url: str, creds: Path | None) -> str:
    """What the server answers a raw nats-py connection (with ``creds`` if any)."""

    async def on_error(exc: Exception) -> None:
        """The refusal is raised by ``connect``; nothing to log twice."""

    try:
        nc = await nats.connect(
            url,
            user_credentials=str(creds) if creds else None,
            allow_reconnect=False,
            connect_timeout=2,
            error_cb=on_error,
        )
    except nats.errors.Error as exc:
        return str(exc).removeprefix("nats: ").strip("'")
    await nc.close()
    return "connected"


async def bus_refusal(url: str, creds: Path | None) -> str:
    """What ``Bus.connect`` raises (its class name), or ``connected``."""
    try:
        bus = await Bus.connect(url, creds=creds, connect_attempts=1, reconnect_wait=0.05)
    except AuthRefused as exc:
        return type(exc).__name__
    except ConnectFailed as exc:
        return f"{type(exc).__name__}: {exc.reason}"
    await bus.close()
    return "connected"


async def test_a_connection_without_credentials_is_refused(
    nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTLINE_NATS_CREDS", raising=False)
    # Bus.connect lends a process the admin credentials of a server it started itself at
    # that exact URL; another spelling of the address is what another process sees.
    elsewhere = nats_server.url.replace("127.0.0.1", "localhost")
    local = await bus_refusal(elsewhere, None)
    server = await raw_refusal(nats_server.url, None)
    LEDGER.record("anyone", "connect without credentials", "-", local=local, server=server)
    assert "authorization violation" in server.lower()
    assert local == "AuthRefused"


async def test_credentials_of_another_authority_are_refused(
    nats_server: EmbeddedNats, tmp_path: Path, subject_names: Subjects
) -> None:
    stranger = Authority.open(tmp_path / "stranger")
    creds = stranger.creds_path("admin", prefix=subject_names.prefix)
    server = await raw_refusal(nats_server.url, creds)
    local = await bus_refusal(nats_server.url, creds)
    LEDGER.record(
        "admin of another Authority",
        "connect with credentials the server does not trust",
        "-",
        local=local,
        server=server,
    )
    assert "authorization violation" in server.lower()
    assert local == "AuthRefused"


# -- files ---------------------------------------------------------------------------------
def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_and_credentials_are_readable_by_their_owner_only(
    tmp_path: Path, nats_server: EmbeddedNats, subject_names: Subjects
) -> None:
    """Even with a umask that lets everyone read (0), and with a folder made open before."""
    root = tmp_path / "auth"
    root.mkdir()
    root.chmod(0o755)
    previous = os.umask(0)
    try:
        authority = Authority.open(root)
        creds = authority.creds_path("client", prefix=subject_names.prefix)
    finally:
        os.umask(previous)
    session_creds = nats_server.creds_path("agent", name=AGENT, prefix=subject_names.prefix)
    found = {
        "authority folder": (root, mode(root)),
        **{f"seed {p.name}": (p, mode(p)) for p in sorted(root.glob("*.nk"))},
        "accounts folder": (root / "accounts", mode(root / "accounts")),
        **{f"account seed {p.name}": (p, mode(p)) for p in sorted(root.glob("accounts/*.nk"))},
        "issued ledger": (root / "issued.jsonl", mode(root / "issued.jsonl")),
        "client creds": (creds, mode(creds)),
        "agent creds (session server)": (session_creds, mode(session_creds)),
    }
    for what, (path, found_mode) in found.items():
        LEDGER.record(
            "Authority (files)", what, path.name, local=f"mode {found_mode:04o}", server="-"
        )
    assert found["authority folder"][1] == stat.S_IRWXU
    assert found["accounts folder"][1] == stat.S_IRWXU
    assert len(found) == 8, "seeds: operator, system, the tenant's account"
    for what, (_, found_mode) in found.items():
        if not what.endswith("folder"):
            assert found_mode == stat.S_IRUSR | stat.S_IWUSR, what
