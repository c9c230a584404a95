"""A nats-server configured with the trust block alone keeps the default 4 KB
``max_control_line``, below a node's CONNECT line (its credentials' JWT): the connection
says that setting must be raised, not that NATS cannot be reached."""

from __future__ import annotations

import pickle
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from actline.bus import Authority, Bus, ConnectFailed, find_nats_server
from actline.bus.errors import ControlLineTooLong

LISTENING = re.compile(r"Listening for client connections on [^\s]*:(\d+)")


@contextmanager
def nats_server(root: Path, config: str) -> Iterator[str]:
    """A nats-server of ``config`` on a port of its choosing; yields its URL once its log
    says it is ready, and stops it (terminate, then kill)."""
    root.mkdir(parents=True, exist_ok=True)
    log = root / "nats-server.log"
    (root / "nats-server.conf").write_text(
        f'{config}\nhost: 127.0.0.1\nport: -1\nlog_file: "{log}"\n'
    )
    with open(root / "nats-server.stderr", "wb") as err:
        proc = subprocess.Popen(
            [str(find_nats_server()), "-c", str(root / "nats-server.conf")],
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 10
        while not (log.exists() and "Server is ready" in (text := log.read_text())):
            assert proc.poll() is None, (root / "nats-server.stderr").read_text()
            assert time.monotonic() < deadline, "nats-server was not ready within 10 s"
            time.sleep(0.01)  # polling the log file for readiness
        match = LISTENING.search(text)
        assert match is not None
        yield f"nats://127.0.0.1:{match.group(1)}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def trust_block(authority: Authority, root: Path) -> str:
    """The authority's trust block without any ``max_control_line`` setting."""
    lines = authority.server_config(jwt_dir=root / "jwt").splitlines()
    return "\n".join(line for line in lines if not line.strip().startswith("max_control_line"))


async def test_a_node_refused_for_its_control_line_is_told_to_raise_max_control_line(
    authority: Authority, tmp_path: Path
) -> None:
    creds = authority.creds_path("node")
    assert creds.stat().st_size > 4096  # its JWT alone is over the server's default limit
    with nats_server(tmp_path / "plain", trust_block(authority, tmp_path / "plain")) as url:
        started = time.monotonic()
        with pytest.raises(ControlLineTooLong) as caught:
            await Bus.connect(url, creds=creds, connect_attempts=3, reconnect_wait=1.0)
        waited = time.monotonic() - started
    error = caught.value
    assert isinstance(error, ConnectFailed)  # callers that catch connect failures still do
    assert (error.url, error.creds) == (url, str(creds))
    assert "max_control_line: 64KB" in str(error)
    assert "cannot reach" not in str(error)
    assert waited < 1.0  # not tried again: the server's setting decides, not a retry
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ControlLineTooLong and vars(back) == vars(error)
    assert str(back) == str(error)

    # The setting the error names lets the same credentials in.
    fixed = trust_block(authority, tmp_path / "fixed") + "\nmax_control_line: 64KB"
    with nats_server(tmp_path / "fixed", fixed) as url:
        bus = await Bus.connect(url, creds=creds)
        try:
            assert bus.is_connected
        finally:
            await bus.close()
