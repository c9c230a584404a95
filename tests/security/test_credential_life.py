"""Credentials end: they expire, they can be revoked on a running server, and renewed.

The attacker holds a real credential that should no longer work (expired, or revoked
after a leak) and connects with the raw nats-py client, so that actline's own check of
the file cannot be what stops it. Positive controls: another user of the same tenant
keeps working through a revocation, and a renewed or newly issued credential connects.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import nats.errors
import pytest

from actline.bus import Authority, Bus, CredsInvalid, EmbeddedNats, read_identity
from actline.bus.auth import write_secret
from actline.messages import Subjects
from tests.creds import creds_cli
from tests.security.attempts import LEDGER
from tests.waiting import until

WAIT_S = 15.0


async def _raw(url: str, creds: Path) -> nats.NATS:
    """A raw nats-py connection that does not retry (an attacker's)."""
    return await nats.connect(
        url, user_credentials=str(creds), allow_reconnect=False, connect_timeout=3
    )


def _creds(authority: Authority, tmp_path: Path, file: str, **how: object) -> Path:
    return write_secret(tmp_path / f"{file}.creds", authority.issue(**how))  # type: ignore[arg-type]


@pytest.fixture
def server(tmp_path: Path) -> EmbeddedNats:
    with EmbeddedNats(
        store_dir=tmp_path / "nats", authority=Authority.open(tmp_path / "auth")
    ) as s:
        yield s


async def test_an_expired_credential_is_refused_and_an_open_one_is_closed_at_its_end(
    server: EmbeddedNats, tmp_path: Path
) -> None:
    assert server.authority is not None
    creds = _creds(server.authority, tmp_path, "short", role="client", prefix="al", ttl_s=2)
    expires = read_identity(creds).expires
    assert expires is not None
    open_one = await nats.connect(server.url, user_credentials=str(creds), allow_reconnect=False)
    await until(lambda: open_one.is_closed or not open_one.is_connected, WAIT_S)
    await until(lambda: time.time() > expires + 1, WAIT_S)  # the server counts whole seconds
    with pytest.raises(nats.errors.Error, match=r"(?i)authoriz|expired"):
        await _raw(server.url, creds)
    with pytest.raises(CredsInvalid, match=r"expired .*actline creds renew"):
        await Bus.connect(server.url, subject_names=Subjects("al"), creds=creds)
    LEDGER.record("client (expired)", "connect after its expiry", "CONNECT",
                  local="CredsInvalid", server="refused")  # fmt: skip


async def test_a_revoked_user_is_cut_off_on_a_running_server_and_others_stay(
    server: EmbeddedNats, tmp_path: Path
) -> None:
    authority = server.authority
    assert authority is not None
    leaked = _creds(authority, tmp_path, "leaked", role="agent", name="reviewer", prefix="al")
    other = _creds(authority, tmp_path, "other", role="client", prefix="al")
    attacker = await nats.connect(server.url, user_credentials=str(leaked), allow_reconnect=False)
    colleague = await Bus.connect(server.url, subject_names=Subjects("al"), creds=other)
    try:
        authority.revoke_user(read_identity(leaked).public_key)  # pushed to the server
        await until(lambda: attacker.is_closed or not attacker.is_connected, WAIT_S)
        with pytest.raises(nats.errors.Error, match=r"(?i)authoriz|revoked"):
            await _raw(server.url, leaked)
        await colleague.flush()  # the colleague is still served
        assert colleague.is_connected
        renewed = tmp_path / "renewed.creds"
        with pytest.raises(CredsInvalid, match="revoked"):
            authority.renew(leaked.read_text())
        fresh = _creds(authority, tmp_path, "fresh", role="agent", name="reviewer", prefix="al")
        back = await _raw(server.url, fresh)  # a new credential for the same agent works
        await back.close()
        assert not renewed.exists()
    finally:
        await colleague.close()
        if not attacker.is_closed:
            await attacker.close()
    LEDGER.record("agent reviewer (revoked)", "stay connected, connect again", "CONNECT",
                  local="-", server="closed; refused")  # fmt: skip


async def test_revoking_a_tenant_cuts_off_every_credential_issued_until_then(
    server: EmbeddedNats, tmp_path: Path
) -> None:
    authority = server.authority
    assert authority is not None
    node = _creds(authority, tmp_path, "node", role="node", prefix="acme")
    spare = _creds(authority, tmp_path, "spare", role="client", prefix="al")
    open_node = await nats.connect(server.url, user_credentials=str(node), allow_reconnect=False)
    authority.revoke_tenant("acme")
    await until(lambda: open_node.is_closed or not open_node.is_connected, WAIT_S)
    with pytest.raises(nats.errors.Error):
        await _raw(server.url, node)
    other_tenant = await _raw(server.url, spare)  # tenant al is untouched
    await other_tenant.close()
    new = _creds(authority, tmp_path, "new", role="node", prefix="acme")
    again = await _raw(server.url, new)
    await again.close()


async def test_a_renewed_credential_keeps_its_key_and_reaches_a_running_client(
    server: EmbeddedNats, tmp_path: Path
) -> None:
    authority = server.authority
    assert authority is not None
    path = _creds(authority, tmp_path, "client", role="client", prefix="al", ttl_s=3600)
    before = read_identity(path)
    write_secret(path, authority.renew(path.read_text(), ttl_s=7200))
    after = read_identity(path)
    assert after.public_key == before.public_key
    assert after.expires is not None and before.expires is not None
    assert after.expires > before.expires
    bus = await Bus.connect(server.url, subject_names=Subjects("al"), creds=path)
    await bus.close()


def test_creds_list_shows_what_was_issued_and_revoke_marks_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = tmp_path / "ops.creds"
    made = creds_cli(home, "client", "ops", "--approver", "--tools", "ops.*", "--ttl", "2h",
                "--out", str(out))  # fmt: skip
    assert made.returncode == 0, made.stderr
    identity = read_identity(out)
    assert identity.approves == ("ops.*",)
    assert identity.expires is not None and 7000 < identity.expires - time.time() <= 7200
    listed = creds_cli(home, "list")
    assert identity.public_key in listed.stdout and "valid" in listed.stdout, listed.stdout
    revoked = creds_cli(home, "revoke", identity.public_key)
    assert revoked.returncode == 0, revoked.stderr
    assert "no running server named" in revoked.stdout
    listed = creds_cli(home, "list")
    assert "revoked" in listed.stdout, listed.stdout
    stored = json.loads((home / "auth" / "revocations.json").read_text())
    assert identity.public_key in stored["al"]
    bad = creds_cli(home, "client", "--ttl", "forever")
    assert bad.returncode == 2 and "--ttl 'forever'" in bad.stderr, bad.stderr


async def test_creds_revoke_tells_the_server_this_home_runs(tmp_path: Path) -> None:
    """`actline creds revoke` from another process: the embedded server of the same home
    (as `actline serve` starts it) gets the revocation and closes the connection."""
    home = tmp_path / "home"
    authority = Authority.open(home / "auth")
    async with EmbeddedNats(store_dir=home / "nats", authority=authority) as running:
        leaked = _creds(authority, tmp_path, "leaked", role="client", prefix="al")
        victim = await nats.connect(
            running.url, user_credentials=str(leaked), allow_reconnect=False
        )
        revoked = await asyncio.to_thread(
            creds_cli, home, "revoke", read_identity(leaked).public_key
        )
        assert revoked.returncode == 0, revoked.stderr
        assert f"{running.url} has it" in revoked.stdout, revoked.stdout
        await until(lambda: victim.is_closed or not victim.is_connected, WAIT_S)
        with pytest.raises(nats.errors.Error):
            await _raw(running.url, leaked)
