"""Credentials as a user meets them: `actline creds`, the keys under ACTLINE_HOME, --insecure."""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import pytest

from actline import Config, Runtime
from actline import runtime as runtime_module
from actline.actors.cluster.ray_job import main as ray_job_main
from actline.bus import Authority, AuthRefused, Bus, EmbeddedNats, RoleUnknown, read_identity
from actline.bus.auth import write_secret
from actline.config import local_user
from tests.creds import creds_cli
from tests.waiting import until


async def test_issued_credentials_connect_to_a_server_of_the_same_keys_only(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    made = creds_cli(home, "agent", "reviewer", "--out", str(tmp_path / "reviewer.creds"))
    assert made.returncode == 0, made.stderr
    assert "agent reviewer (prefix al) credentials" in made.stdout
    path = tmp_path / "reviewer.creds"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "auth").stat().st_mode) == 0o700
    for seed in (home / "auth").glob("*.nk"):
        assert stat.S_IMODE(seed.stat().st_mode) == 0o600
    identity = read_identity(path)
    assert (identity.role, identity.name, identity.prefix) == ("agent", "reviewer", "al")
    assert identity.permissions.may_publish("al.agent.reviewer.done")
    assert not identity.permissions.may_publish("al.agent.other.done")
    async with EmbeddedNats(authority=Authority.open(home / "auth")) as ours:
        bus = await Bus.connect(ours.url, creds=path, connect_attempts=1)
        assert bus.authenticated and bus.identity == identity
        await bus.close()
    async with EmbeddedNats() as theirs:  # other keys: refused, with the fix named
        with pytest.raises(AuthRefused, match="--creds FILE or ACTLINE_NATS_CREDS"):
            await Bus.connect(theirs.url, creds=path, connect_attempts=1)


def test_creds_refuses_what_it_cannot_issue_and_prints_to_a_pipe(tmp_path: Path) -> None:
    no_name = creds_cli(tmp_path / "h", "agent")
    assert no_name.returncode == 2 and "need its name" in no_name.stderr
    named = creds_cli(tmp_path / "h", "client", "bob")
    assert named.returncode == 2 and "a client's name is an approver's" in named.stderr
    node_named = creds_cli(tmp_path / "h", "node", "bob")
    assert node_named.returncode == 2 and "takes no name" in node_named.stderr
    node_approver = creds_cli(tmp_path / "h", "node", "--approver")
    assert node_approver.returncode == 2 and "for a client or an agent" in node_approver.stderr
    bad = creds_cli(tmp_path / "h", "agent", "a.b")
    assert bad.returncode == 2 and "agent needs a name" in bad.stderr
    piped = creds_cli(tmp_path / "h", "client", "--prefix", "tenant-a")
    assert piped.returncode == 0 and "BEGIN NATS USER JWT" in piped.stdout
    server = creds_cli(tmp_path / "h", "server")
    assert server.returncode == 0 and "type: full" in server.stdout
    assert "max_control_line: 65536" in server.stdout
    with pytest.raises(
        RoleUnknown, match="choose one of node, client, agent, pool-models, pool-tools, admin"
    ):
        Authority.open(tmp_path / "h" / "auth").issue("root")


async def test_insecure_is_explicit_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = Config.load(env={"ACTLINE_HOME": str(tmp_path / "h"), "ACTLINE_INSECURE": "1"})
    assert config.creds_for("client") is None
    async with Runtime(config, node=False) as rt:
        assert not rt.bus.authenticated
        assert rt.server is not None and rt.server.authority is None
    assert "WITHOUT authentication" in caplog.text
    assert not (tmp_path / "h" / "auth").exists()  # no keys made for an open server


async def test_the_runtime_connects_with_its_role_from_the_home_keys(tmp_path: Path) -> None:
    config = Config.load(env={"ACTLINE_HOME": str(tmp_path / "h")})
    async with Runtime(config, node=False) as rt:
        identity = rt.bus.identity
        assert identity is not None and identity.role == "client"
        # the keys' holder at this machine approves as itself (a named client approver)
        assert identity.approves == (">",) and identity.name
        made = tmp_path / "h" / "auth" / "creds" / f"client-{identity.name}-approver@al.creds"
        assert made.is_file()


def test_the_ray_job_without_node_credentials_says_what_to_do(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTLINE_NATS_CREDS", raising=False)
    assert ray_job_main(["--nats", "nats://127.0.0.1:9", "--nodes", "1"]) == 2
    assert "actline creds node" in capsys.readouterr().err


async def test_a_runtime_renews_the_credentials_its_home_keeps_and_outlives_their_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept credential has 4 s of life: past half of it the runtime renews it for the
    same key and reconnects with it before the first one expires (nats-server closes a
    connection whose credentials expire, and nats-py does not come back from that): the
    connection lives on past that expiry, on the same reply inbox."""
    monkeypatch.setattr(runtime_module, "CREDS_CHECK_S", 0.2)
    config = Config.load(env={"ACTLINE_HOME": str(tmp_path / "h")})
    authority = config.authority()
    path = authority.creds_path("client", name=local_user(), approver=True)
    write_secret(path, authority.issue("client", name=local_user(), approver=True, ttl_s=4))
    first = read_identity(path)
    assert first.expires is not None
    async with Runtime(config, node=False) as rt:
        await until(lambda: (read_identity(path).expires or 0) > first.expires + 60, 10)
        await until(lambda: time.time() > first.expires + 1, 10)
        await until(lambda: rt.bus.is_connected, 10)
        await rt.bus.flush()
        assert not rt.bus.nc.is_closed
        assert read_identity(path).public_key == first.public_key


async def test_a_runtime_takes_a_file_renewed_by_actline_creds_renew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given credentials (--creds FILE) are the holder's: renewed where the keys are
    (`actline creds renew FILE`), the running runtime reconnects with them in time."""
    monkeypatch.setattr(runtime_module, "CREDS_CHECK_S", 0.2)
    keys = tmp_path / "keys"
    authority = Authority.open(keys / "auth")
    path = write_secret(tmp_path / "c.creds", authority.issue("client", ttl_s=4))
    first = read_identity(path)
    assert first.expires is not None
    async with EmbeddedNats(authority=authority) as server:
        env = {"ACTLINE_HOME": str(tmp_path / "h"), "NATS_URL": server.url}
        config = Config.load(env=env | {"ACTLINE_NATS_CREDS": str(path)})
        async with Runtime(config, node=False) as rt:
            renewed = await asyncio.to_thread(creds_cli, keys, "renew", str(path), "--ttl", "1h")
            assert renewed.returncode == 0 and "renewed until" in renewed.stdout, renewed.stderr
            await until(lambda: rt.bus.identity is not None and rt.bus.identity.expires
                        != first.expires, 10)  # fmt: skip
            await until(lambda: time.time() > first.expires + 1, 10)
            await rt.bus.flush()
            assert rt.bus.is_connected and not rt.bus.nc.is_closed
