"""The cluster's NATS configuration (deploy/nats.conf) as `make deploy-keys` prepares it: two
servers routed to each other over mutual TLS, clients over TLS with credentials."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.bus import AuthRefused, Bus, ConnectFailed, KvBucket, find_nats_server
from actline.messages import Ack, Message
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare(folder: Path) -> Path:
    """What `make deploy-keys HOSTS=127.0.0.1` does, into ``folder`` (keys beside it)."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "deploy" / "nats.conf", folder / "nats.conf")
    keys = folder.parent / "keys"
    env = {"ACTLINE_HOME": str(keys), "PATH": str(Path(sys.executable).parent)}
    actline = [sys.executable, "-m", "actline", "creds"]
    for args in (
        ["server", "--out", str(folder / "nats-auth.conf")],
        ["node", "--out", str(folder / "node.creds")],
        ["client", "--out", str(folder / "client.creds")],
    ):
        subprocess.run([*actline, *args], cwd=ROOT, env=env, check=True, capture_output=True)
    tls = ["--out", str(folder / "tls"), "--hosts", "127.0.0.1", "--ca-key-dir", str(keys)]
    certs = [sys.executable, "-m", "actline.bus.certs", *tls]
    subprocess.run(certs, cwd=ROOT, check=True, capture_output=True)
    return folder


class Server:
    """One nats-server of the deployment, started from its own copy of the folder."""

    def __init__(self, folder: Path, name: str, route_to: int | None = None) -> None:
        self.folder = folder
        self.port, self.cluster = free_port(), free_port()
        args = [str(find_nats_server()), "-c", "nats.conf", "-n", name, "-p", str(self.port)]
        args += ["-m", str(free_port()), "--cluster", f"nats://127.0.0.1:{self.cluster}"]
        # JetStream in a cluster needs routes: the first host routes to itself (ignored)
        args += ["--routes", f"nats-route://127.0.0.1:{route_to or self.cluster}"]
        self.log = (folder / "server.log").open("wb")
        self.proc = subprocess.Popen(args, cwd=folder, stdout=self.log, stderr=self.log)

    @property
    def url(self) -> str:
        return f"tls://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``make deploy-keys`` for the module; each test copies it."""
    return prepare(tmp_path_factory.mktemp("prepared") / "deploy")


@pytest.fixture
def deployment(prepared: Path, tmp_path: Path) -> Iterator[tuple[Server, Server, Path]]:
    first = tmp_path / "deploy"
    shutil.copytree(prepared, first)
    second = tmp_path / "deploy-b"
    shutil.copytree(first, second)
    a = Server(first, "a")
    b = Server(second, "b", route_to=a.cluster)
    try:
        yield a, b, first
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def three_hosts(prepared: Path, tmp_path: Path) -> Iterator[tuple[list[Server], Path]]:
    """The three NATS hosts of cluster.yaml: the other two route to the first."""
    first = tmp_path / "deploy"
    shutil.copytree(prepared, first)
    servers = [Server(first, "nats-head")]
    try:
        for name in ("nats-w1", "nats-w2"):
            folder = tmp_path / f"deploy-{name}"
            shutil.copytree(first, folder)
            servers.append(Server(folder, name, route_to=servers[0].cluster))
        yield servers, first
    finally:
        for server in servers:
            server.stop()


async def connect(server: Server | str, creds: Path | None, ca: Path) -> Bus:
    url = server if isinstance(server, str) else server.url

    async def attempt() -> Bus | None:
        try:
            return await Bus.connect(url, creds=creds, connect_attempts=1)
        except ConnectFailed as exc:
            if isinstance(exc, AuthRefused):
                raise
            return None

    bus: Bus | None = None

    async def up() -> bool:
        nonlocal bus
        bus = await attempt()
        return bus is not None

    await until(up, timeout=30)
    assert bus is not None
    return bus


async def test_two_hosts_route_over_mutual_tls_and_clients_need_tls_and_credentials(
    deployment: tuple[Server, Server, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, folder = deployment
    monkeypatch.delenv("ACTLINE_NATS_CREDS", raising=False)
    monkeypatch.setenv("ACTLINE_NATS_CA", str(folder / "tls" / "ca.pem"))
    node_a = await connect(a, folder / "node.creds", folder / "tls" / "ca.pem")
    node_b = await connect(b, folder / "node.creds", folder / "tls" / "ca.pem")
    got: list[Message] = []

    async def on_msg(msg: Message, env: object) -> None:
        got.append(msg)

    try:
        await node_b.subscribe("al.route.check", on_msg)

        async def crossed() -> bool:  # the route may come up after both servers are ready
            await node_a.publish("al.route.check", Ack(detail="over the route"))
            await node_a.flush()
            return bool(got)

        await until(crossed, timeout=30)
        assert isinstance(got[0], Ack) and got[0].detail == "over the route"
        with pytest.raises(AuthRefused):
            await Bus.connect(a.url, creds=None, connect_attempts=1)
        monkeypatch.delenv("ACTLINE_NATS_CA")
        with pytest.raises(ConnectFailed, match="ACTLINE_NATS_CA"):
            await Bus.connect(a.url, creds=folder / "client.creds", connect_attempts=1)
        with pytest.raises(ConnectFailed):  # plain nats:// to a TLS server
            plain = a.url.replace("tls://", "nats://")
            await Bus.connect(plain, creds=folder / "client.creds", connect_attempts=1)
    finally:
        await node_a.close()
        await node_b.close()
    assert "Route connection created" in (folder / "server.log").read_text()
    assert a.proc.poll() is None and b.proc.poll() is None


async def test_three_hosts_cluster_jetstream_and_give_a_node_three_replicas(
    three_hosts: tuple[list[Server], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    servers, folder = three_hosts
    monkeypatch.delenv("ACTLINE_NATS_CREDS", raising=False)
    monkeypatch.setenv("ACTLINE_NATS_CA", str(folder / "tls" / "ca.pem"))
    every = ",".join(server.url for server in servers)  # what the job's --nats gets
    node = await connect(every, folder / "node.creds", folder / "tls" / "ca.pem")
    bucket: KvBucket | None = None

    async def opened() -> bool:  # JetStream answers once the three elected a meta leader
        nonlocal bucket
        try:
            bucket = await KvBucket.open(node, name=node.subjects.nodes_bucket, timeout=2.0)
        except Exception:
            return False
        return True

    try:
        await until(opened, timeout=60)
        assert bucket is not None
        info = await node.nc.jetstream().stream_info(f"KV_{node.subjects.nodes_bucket}")
        assert info.config.num_replicas == 3
        assert info.cluster is not None and info.cluster.name == "actline"
        placed = {info.cluster.leader, *(p.name for p in info.cluster.replicas or [])}
        assert placed == {"nats-head", "nats-w1", "nats-w2"}
    finally:
        await node.close()
