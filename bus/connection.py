"""The bus's connection to NATS: connecting, reconnecting, hooks, closing.

``Connection.connect`` takes a URL list (a cluster's servers), TLS (``ACTLINE_NATS_CA`` or a
``tls://`` URL) and credentials, tries the first connection a few times and then reconnects
forever after the server goes away (buffering publishes meanwhile), re-subscribing
everything when it comes back. ``Bus`` (``actline.bus.bus``) speaks actline messages over it.

Credentials: ``connect(creds=FILE)``, else ``ACTLINE_NATS_CREDS``, else the
admin credentials of an ``EmbeddedNats`` this process started at that URL (the process
that started a server holds its keys). With credentials the connection knows its
``identity``; the server's permission violations on it are counted here as
``counters["permission_violations"]``.

A server that stalls (a frozen process, a host that stops answering while its socket stays
open) is noticed only by nats-py's pings, every two minutes; a caller that must get through
within seconds (a node's beat) calls ``reconnect_if_stalled``: a ping without an answer in
time moves the connection to another server of the cluster at once. ``conditions``
(``actline.bus.conditions``) logs the outages its loops see once each; ``on_outage`` tells
a command's user when the connection drops and when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import ParseResult, urlsplit

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client, Server

from actline.messages import Subjects, subjects

from .auth import Identity, read_identity
from .conditions import Conditions
from .embedded import running_authority
from .errors import AuthRefused, ConnectFailed, ControlLineTooLong, RequestTimeout
from .jetstream import JetStreamAccount, account

log = logging.getLogger(__name__)

DEFAULT_URL = "nats://127.0.0.1:4222"

_CONTROL_LINE = "maximum control line exceeded"
"""nats-server's error for a protocol line over its ``max_control_line``: a CONNECT line
carrying a large credentials JWT (a node's is over the 4 KB default)."""


async def _abandon(nc: Client) -> None:
    """Close a client whose first connect failed (nats-py's close can hang after a failed
    TLS handshake: bounded)."""
    with contextlib.suppress(TimeoutError, nats.errors.Error, OSError):
        await asyncio.wait_for(nc.close(), 1.0)


def _tls_context(ca: str | None) -> ssl.SSLContext:
    """TLS that verifies the server with ``ca`` (``ACTLINE_NATS_CA``), else the system's CAs."""
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectFailed(f"ACTLINE_NATS_CA={ca}", f"cannot load the CA: {exc}") from None


def _embedded_creds(servers: list[str], prefix: str) -> str | None:
    """Admin credentials of tenant ``prefix`` for an embedded server this process runs at
    one of ``servers``."""
    for url in servers:
        authority = running_authority(url)
        if authority is not None:
            return str(authority.creds_path("admin", prefix=prefix))
    return None


def server_urls(target: str) -> list[str]:
    """The servers of a URL list (``nats://h1:4222,nats://h2:4222``); ``ConnectFailed``
    names an entry that is empty or has no port."""
    servers = [part.strip() for part in target.split(",")]
    for part in servers:
        try:
            port = urlsplit(part if "://" in part else f"nats://{part}").port
        except ValueError:
            port = None
        if not part or port is None:
            raise ConnectFailed(
                target,
                f"{part!r} is not a server URL: give scheme://host:port, several "
                "comma-separated (NATS_URL or --nats)",
            )
    return servers


class Connection:
    """A NATS connection with its identity, counters and hooks; ``Bus`` adds the verbs."""

    def __init__(self, nc: Client, subject_names: Subjects, url: str) -> None:
        self._nc = nc
        self.subjects = subject_names
        self.url = url
        self.counters: Counter[str] = Counter()
        self.authenticated = False
        """True when connected with credentials: the server enforces roles."""
        self.identity: Identity | None = None
        self.creds_path: Path | None = None
        """The credentials file this connection authenticates with (read again on reconnect)."""
        """Who the credentials say this connection is (None without credentials)."""
        self._verdicts: dict[tuple[str, str], bool] = {}
        self.js_replicas: int | None = None
        """The replica count of the streams and buckets made through this connection (None:
        follow the cluster, ``actline.bus.jetstream.replicas_for``); a node sets
        ACTLINE_JS_REPLICAS."""
        self.violations: list[str] = []
        """The server's last permission-violation errors on this connection (at most 20)."""
        self._connected = asyncio.Event()
        self._reconnected = asyncio.Condition()
        self._reconnect_hooks: list[Callable[[], None]] = []
        self._established = False
        """True once ``connect`` succeeded (errors before are raised by it)."""
        self._disconnect_hooks: list[Callable[[], None]] = []
        self._left: str | None = None
        """The server (host:port) a stalled connection left: not the next one tried."""
        self.conditions = Conditions(self)
        """The outages this connection's loops see, logged once each."""
        if nc.is_connected:
            self._connected.set()

    # -- lifecycle ---------------------------------------------------------
    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        *,
        name: str = "actline",
        subject_names: Subjects | None = None,
        connect_timeout: float = 2.0,
        connect_attempts: int = 3,
        reconnect_wait: float = 0.25,
        creds: str | os.PathLike[str] | None = None,
    ) -> Self:
        """Connect to ``url`` (default ``NATS_URL``, else ``nats://127.0.0.1:4222``).

        ``url`` may list the servers of a cluster, comma-separated: the client connects to
        one of them (in random order, spreading clients over the cluster) and, once
        connected, fails over to the others (and to those the servers announce) when its
        server goes away. TLS verifies every server under the first URL's host name
        (``python -m actline.bus.certs`` puts every host in the one server certificate).

        The first connection is tried ``connect_attempts`` times, then
        ``ConnectFailed`` says what to do (``AuthRefused`` when the server refused the
        credentials or wants some, ``ControlLineTooLong`` at once when the server's
        ``max_control_line`` is too small for them); once connected, the client
        reconnects forever.
        ``creds``: see the module docstring.
        """
        target = url or os.environ.get("NATS_URL") or DEFAULT_URL
        servers = server_urls(target)
        nc = Client()
        bus = cls(nc, subject_names or subjects.current(), target)
        path = (
            creds
            or os.environ.get("ACTLINE_NATS_CREDS")
            or _embedded_creds(servers, bus.subjects.prefix)
        )
        auth: dict[str, Any] = {}
        ca = os.environ.get("ACTLINE_NATS_CA")
        if ca or target.startswith("tls://"):
            auth["tls"] = _tls_context(ca)
            auth["tls_hostname"] = urlsplit(target.split(",")[0]).hostname
        if path:
            bus.identity = read_identity(path)
            bus.creds_path = Path(path)
            bus.authenticated = True
            auth |= {"user_credentials": str(path), "inbox_prefix": bus.identity.inbox_prefix}
        for attempt in range(max(1, connect_attempts)):
            try:
                # Tried without nats-py's own retries: with them, a TLS handshake that fails
                # (an unknown CA) retries forever instead of raising.
                await nc.connect(
                    **auth,
                    servers=servers,
                    name=name,
                    connect_timeout=int(max(1, connect_timeout)),
                    reconnect_time_wait=reconnect_wait,  # type: ignore[arg-type]
                    allow_reconnect=False,
                    # each server tried twice per attempt (nats-py's default, 60 tries with a
                    # pause each, took 45 s to say that nothing listens)
                    max_reconnect_attempts=1,
                    error_cb=bus._on_error,
                    disconnected_cb=bus._on_disconnect,
                    reconnected_cb=bus._on_reconnect,
                )
                break
            except nats.errors.AuthorizationError:
                await _abandon(nc)
                raise AuthRefused(
                    target, f"authorization violation with {path or 'no credentials'}"
                ) from None
            except ssl.SSLError as exc:
                await _abandon(nc)
                raise ConnectFailed(
                    target,
                    f"TLS: {exc.reason or exc}; set ACTLINE_NATS_CA to the CA file that signed "
                    "the server's certificate",
                ) from None
            except (OSError, nats.errors.Error, TimeoutError) as exc:
                await _abandon(nc)
                if "authorization violation" in str(exc).lower():
                    raise AuthRefused(
                        target, f"authorization violation with {path or 'no credentials'}"
                    ) from None
                if _CONTROL_LINE in str(exc).lower():  # the server's setting: no retry helps
                    raise ControlLineTooLong(target, str(path or "")) from None
                if attempt + 1 >= max(1, connect_attempts):
                    raise ConnectFailed(target, f"{type(exc).__name__}: {exc}") from None
                await asyncio.sleep(reconnect_wait)  # a server starting up: try again shortly
                nc = bus._nc = Client()
        # Connected: from now on never give up reconnecting (nats-py reads these options live).
        nc.options["allow_reconnect"] = True
        nc.options["max_reconnect_attempts"] = -1
        bus._established = True
        bus._connected.set()
        return bus

    async def _on_error(self, exc: Exception) -> None:
        if "permissions violation" in str(exc).lower():
            self.counters["permission_violations"] += 1
            self.violations = [*self.violations[-19:], str(exc)]
            who = self.identity.label if self.identity else "this connection"
            log.warning("the server refused %s: %s", who, exc)
            return
        if _CONTROL_LINE in str(exc).lower():
            # While connecting, ``connect`` raises it; later a server came back with a
            # smaller limit, and every reconnect fails: said once.
            self.counters["control_line_refused"] += 1
            if self._established and self.counters["control_line_refused"] == 1:
                log.error("%s", ControlLineTooLong(self.url))
            return
        # a refused reconnect, or the server going away (the disconnect is logged, and told
        # by ``on_outage``): not warnings
        quiet = isinstance(exc, ConnectionRefusedError | nats.errors.UnexpectedEOF)
        level = logging.DEBUG if quiet else logging.WARNING
        log.log(level, "nats error on %s: %s: %s", self.url, type(exc).__name__, exc)

    async def _on_disconnect(self) -> None:
        log.info("nats disconnected from %s; reconnecting", self.url)
        self._connected.clear()
        _run_hooks(self._disconnect_hooks, "disconnect")

    async def _on_reconnect(self) -> None:
        log.info("nats reconnected to %s", self.server)
        self._left = None
        self._nc._reconnect_to_server_handler = None  # nats-py's own choice from now on
        self.counters["reconnects"] += 1
        self._connected.set()
        async with self._reconnected:
            self._reconnected.notify_all()
        _run_hooks(self._reconnect_hooks, "reconnect")

    def on_reconnect(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook()`` after each reconnect (subscriptions are back by then); returns
        the function that removes it. A hook must not block: it starts a task if it
        has work to do (what was published while disconnected, say)."""
        return _add_hook(self._reconnect_hooks, hook)

    def on_disconnect(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook()`` when the connection drops (the client is reconnecting by then);
        returns the function that removes it. A hook must not block."""
        return _add_hook(self._disconnect_hooks, hook)

    def on_outage(self, lost: Callable[[], None], back: Callable[[], None]) -> Callable[[], None]:
        """Call ``lost()`` once when the connection drops (the client is reconnecting; not
        when it is closed) and ``back()`` once when it is up again, once each per outage;
        returns the function that removes both. They must not block."""
        down: list[bool] = []

        def dropped() -> None:
            if not down and not self._nc.is_closed:
                down.append(True)
                lost()

        def returned() -> None:
            if down:
                down.clear()
                back()

        remove = (self.on_disconnect(dropped), self.on_reconnect(returned))

        def unhook() -> None:
            for each in remove:
                each()

        return unhook

    async def close(self) -> None:
        """Drain subscriptions and close the connection."""
        await self.conditions.close()
        if self._nc.is_closed:
            return
        try:
            await self._nc.drain()
        except (nats.errors.Error, TimeoutError):
            await self._nc.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def nc(self) -> Client:
        """The underlying nats-py client, for raw bytes (benchmarks, tests of bad input).

        JetStream goes through ``actline.bus.jetstream`` and ``publish_stored`` instead.
        """
        return self._nc

    @property
    def server(self) -> str:
        """The server this connection is on now (one of a cluster's), "" while it is not."""
        now = self._nc.connected_url
        return f"{now.scheme}://{now.netloc}" if now is not None else ""

    @property
    def is_connected(self) -> bool:
        """True while connected (False while reconnecting or after close)."""
        return bool(self._nc.is_connected)

    @property
    def max_payload(self) -> int:
        """The server's ``max_payload``."""
        return int(self._nc.max_payload or 1024 * 1024)

    async def wait_connected(self, timeout: float = 10.0, *, reconnects: int = 0) -> None:
        """Return once connected and at least ``reconnects`` reconnects have happened.

        Raises ``RequestTimeout`` when that does not happen within ``timeout``.
        """
        try:
            async with asyncio.timeout(timeout):
                async with self._reconnected:
                    await self._reconnected.wait_for(
                        lambda: self.counters["reconnects"] >= reconnects
                    )
                await self._connected.wait()
        except TimeoutError:
            raise RequestTimeout(self.url, timeout) from None

    async def jetstream_account(self, *, timeout: float = 2.0) -> JetStreamAccount:
        """What this account holds in JetStream; ``JetStreamUnavailable`` when it has none."""
        return await account(self, timeout=timeout)

    async def take_renewed_creds(self) -> bool:
        """When the credentials file now holds the same key with a later expiry (it was
        renewed), reconnect with it before the one in use expires: nats-server closes a
        connection whose credentials expire, and nats-py does not come back from that.
        True when it reconnected."""
        if self.creds_path is None or self.identity is None:
            return False
        renewed = read_identity(self.creds_path)
        current = self.identity.expires or 0
        if renewed.public_key != self.identity.public_key or (renewed.expires or 0) <= current:
            return False
        self.identity = renewed
        log.info("credentials renewed until %s: reconnecting with them", renewed.expires)
        await self._nc.force_reconnect()
        return True

    async def reconnect_if_stalled(self, timeout: float) -> bool:
        """Ping the server; when no answer comes within ``timeout`` seconds (it is frozen,
        or its host stopped answering), reconnect to another server of the cluster and
        wait up to ``timeout`` more for it. True when the connection moved (or is moving:
        it is not connected yet when no other server answered in time); False when the
        server answered, or there is no other server to go to.

        A slow JetStream request alone proves nothing (a stream electing a leader answers
        late through a healthy server); a ping the server does not answer does."""
        nc = self._nc
        if not nc.is_connected or len(server_urls(self.url)) < 2:
            return False
        try:
            await asyncio.wait_for(nc.flush(timeout=max(1, int(timeout + 1))), timeout)
            return False
        except (TimeoutError, nats.errors.Error):
            if not nc.is_connected:  # it dropped meanwhile: nats-py reconnects already
                return True
        stalled = self.server
        before = self.counters["reconnects"]
        log.warning(
            "NATS server %s does not answer a ping within %.2f s: moving to another one",
            stalled,
            timeout,
        )
        self.counters["stalled"] += 1
        self._left = urlsplit(stalled).netloc
        nc._reconnect_to_server_handler = self._next_server
        await nc.force_reconnect()
        with contextlib.suppress(RequestTimeout):
            await self.wait_connected(timeout, reconnects=before + 1)
        return True

    def _next_server(
        self, servers: list[Server], info: dict[str, Any]
    ) -> tuple[Server | None, float]:
        """nats-py's choice of the server to reconnect to: one other than the stalled one
        this connection left while there is one (a frozen server accepts the TCP
        connection and then says nothing until the connect times out)."""
        others = [s for s in servers if _netloc(s.uri) != self._left] or servers
        fresh = [s for s in others if s.reconnects == 0]
        chosen = (fresh or others)[0] if others else None
        return chosen, 0.0 if fresh else float(self._nc.options["reconnect_time_wait"])

    async def flush(self, timeout: float = 2.0) -> None:
        """Wait until the server has processed everything sent so far.

        nats-py 2.16 writes the flush PING straight to the socket, ahead of
        commands still in its pending buffer (a SUB, say), so the PONG alone
        proves nothing; the pending buffer is pushed out first.
        """
        push = getattr(self._nc, "_flush_pending", None)
        if push is not None and self._nc.is_connected:
            await push(force_flush=True)
        await self._nc.flush(timeout=int(max(1, timeout)))


def _netloc(uri: ParseResult) -> str:
    return uri.netloc


def _add_hook(hooks: list[Callable[[], None]], hook: Callable[[], None]) -> Callable[[], None]:
    hooks.append(hook)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            hooks.remove(hook)

    return remove


def _run_hooks(hooks: list[Callable[[], None]], what: str) -> None:
    for hook in list(hooks):
        try:
            hook()
        except Exception:
            log.exception("a %s hook failed", what)
