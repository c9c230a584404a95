"""Forbidden attempts on a real authenticated nats-server, the proof that nothing got
through, and the ledger of every attempt with its answers (printed once the role tests are done).

Each attempt is made twice: through actline's typed ``Bus`` (which refuses locally with
``PermissionDenied``) and through the raw nats-py client of the same connection (``bus.nc``),
which sends it to the server as is. The server's answer is the permissions violation it
reports to the connection's error callback (``bus.violations``).

The proof of a negative leans on NATS ordering: the server handles one connection's
commands in order and writes one connection's deliveries in order, and nats-py counts a
delivery (``Subscription.delivered``) as soon as it parses it. So once a marker sent
after a forbidden message has reached a watcher, the forbidden message would already
be counted on the watcher's subscription had the server let it through.

Another tenant is another NATS account: no marker crosses to it, so across tenants the
proof is two round trips instead (``settled``): the sender's PONG says the server
handled everything it sent (any delivery is queued on the watcher's connection by
then), and the watcher's PONG comes behind whatever was queued for it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from actline.bus import Bus, BusError, Envelope, PermissionDenied
from actline.messages import Message, encode, new_id
from tests.waiting import until

WAIT_S = 5.0
ANSWER_S = 1.0
DENIED = "PermissionDenied"
ALLOWED = "allowed"
NO_VIOLATION = "no violation reported"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One thing a role tried, what actline's typed Bus said and what the server said."""

    who: str
    what: str
    subject: str
    local: str
    server: str


@dataclass
class Ledger:
    """Every attempt of the role tests, in the order made."""

    rows: list[Attempt] = field(default_factory=list)

    def record(self, who: str, what: str, subject: str, *, local: str, server: str) -> None:
        self.rows.append(Attempt(who, what, subject, local, server))

    def table(self) -> str:
        """A Markdown table of the attempts (for the issue's closing report): in each row the
        test's own prefix reads ``a``, another tenant's ``b``, a user's public key ``<user>``."""
        head = ("who", "what", "subject", "actline (typed Bus)", "nats-server")
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        for row in self.rows:
            cells = _readable((row.who, row.what, f"`{row.subject}`", row.local, row.server))
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(lines)


_PREFIX_RE = re.compile(r"(?<![0-9A-Za-z])t[0-9a-z]{26}(?![0-9A-Za-z])", re.IGNORECASE)
_USER_RE = re.compile(r"(?<![0-9A-Za-z])U[A-Z2-7]{55}(?![0-9A-Za-z])", re.IGNORECASE)


def _readable(cells: tuple[str, ...]) -> tuple[str, ...]:
    """The per-test prefixes of one row as ``a``, ``b`` (in order of appearance)."""
    names: dict[str, str] = {}

    def name(match: re.Match[str]) -> str:
        label = names.setdefault(match.group().lower(), "ab"[min(len(names), 1)])
        return label.upper() if match.group().isupper() else label

    return tuple(_USER_RE.sub("<user>", _PREFIX_RE.sub(name, cell)) for cell in cells)


LEDGER = Ledger()


# -- subjects of the JetStream API (built here only, like actline.messages.subjects for ours)
# --------
def stream_api(operation: str, stream: str) -> str:
    """``$JS.API.STREAM.<operation>.<stream>`` (INFO, CREATE, DELETE, PURGE, ...)."""
    return f"$JS.API.STREAM.{operation}.{stream}"


def stream_listing(kind: str) -> str:
    """``$JS.API.STREAM.NAMES`` or ``$JS.API.STREAM.LIST`` (every stream of the account)."""
    return f"$JS.API.STREAM.{kind}"


def pull_api(stream: str, consumer: str) -> str:
    """The subject that pulls the next message of a durable consumer."""
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"


# -- who and what they were told --------------------------------------------------------
def who(bus: Bus) -> str:
    """``client (prefix t…)``: the role a bus connected as."""
    assert bus.identity is not None, "a bus of these tests always has credentials"
    return bus.identity.label


def own_inbox(bus: Bus) -> str:
    """A fresh subject in the connection's own reply inbox (the one thing every role reads)."""
    assert bus.identity is not None
    return f"{bus.identity.inbox_prefix}.{new_id()}"


async def ignore(msg: Message, env: Envelope) -> None:
    """A handler for subscriptions that must never be made."""


async def drop(msg: Msg) -> None:
    """A raw callback that keeps nothing (a subscription without one would hold what it got
    and make closing the connection wait for it)."""


async def local_answer(attempt: Awaitable[object]) -> str:
    """``PermissionDenied`` when the typed Bus refused ``attempt``, else ``allowed``."""
    try:
        await attempt
    except PermissionDenied:
        return DENIED
    except BusError as exc:  # let through here, then failed on the way
        return f"{ALLOWED} (then {type(exc).__name__})"
    return ALLOWED


def roles_check(bus: Bus, subject: str) -> str:
    """What the typed Bus would answer a publish on ``subject`` (its role's permissions),
    for subjects no actline message goes to."""
    assert bus.identity is not None
    return ALLOWED if bus.identity.permissions.may_publish(subject) else DENIED


def violation_of(bus: Bus, verb: str, subject: str) -> str | None:
    """The server's permissions violation for ``verb`` (``publish``/``subscription``) on
    ``subject``, if the connection got one (nats-py lower-cases the server's text)."""
    wanted = f'permissions violation for {verb} to "{subject.lower()}"'
    return next((v for v in bus.violations if wanted in v.lower()), None)


async def server_answer(bus: Bus, verb: str, subject: str) -> str:
    """The violation the server reported for ``verb`` on ``subject``, or ``NO_VIOLATION``.

    The server answers a refused PUB or SUB with ``-ERR`` before it answers the PING of
    a flush sent afterwards, and nats-py runs the error callback before it reads on, so
    the violation is there as soon as ``flush`` returns (``ANSWER_S`` is a margin)."""
    await bus.flush()
    try:
        await until(lambda: violation_of(bus, verb, subject) is not None, timeout=ANSWER_S)
    except TimeoutError:
        return NO_VIOLATION
    text = violation_of(bus, verb, subject)
    assert text is not None
    return text.removeprefix("nats: ")


# -- proofs of a negative ----------------------------------------------------------------
class Watcher:
    """Raw subscriptions on one connection that count what reaches the target subjects,
    and a marker subscription that says when every earlier message has been seen."""

    def __init__(self, bus: Bus, marker: str) -> None:
        self.bus = bus
        self.marker = marker
        self.markers: set[bytes] = set()
        self.received: dict[str, list[bytes]] = {}
        self._subs: dict[str, NatsSubscription] = {}

    @classmethod
    async def on(cls, bus: Bus, targets: Sequence[str], marker: str, *, queue: str = "") -> Watcher:
        """Subscribe ``bus`` to each target (in ``queue`` if given) and to ``marker``."""
        watcher = cls(bus, marker)
        for target in targets:
            watcher.received[target] = []
            watcher._subs[target] = await bus.nc.subscribe(
                target, queue=queue, cb=watcher._collector(target)
            )
        await bus.nc.subscribe(marker, cb=watcher._on_marker)
        await bus.flush()
        assert not bus.violations, f"{who(bus)} may not watch: {bus.violations}"
        return watcher

    def _collector(self, target: str) -> Callable[[Msg], Awaitable[None]]:
        async def collect(msg: Msg) -> None:
            self.received[target].append(msg.data)

        return collect

    async def _on_marker(self, msg: Msg) -> None:
        self.markers.add(msg.data)

    async def wait_marker(self, marker: bytes) -> None:
        await until(lambda: marker in self.markers, timeout=WAIT_S)

    def delivered(self, target: str) -> int:
        """Messages the server delivered on ``target`` so far (counted at parse time)."""
        return int(self._subs[target].delivered)


class InboxMarker:
    """A marker sent to a connection's own reply inbox: once it is in, everything another
    connection sent before it (to this connection) has been parsed."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        self._seen = asyncio.Event()

    @classmethod
    async def on(cls, bus: Bus) -> InboxMarker:
        marker = cls(own_inbox(bus))

        async def seen(msg: Msg) -> None:
            marker._seen.set()

        await bus.nc.subscribe(marker.subject, cb=seen)
        await bus.flush()
        return marker

    async def send(self, sender: Bus) -> None:
        await sender.nc.publish(self.subject, b"marker")

    async def wait(self) -> None:
        async with asyncio.timeout(WAIT_S):
            await self._seen.wait()


def one_tenant(a: Bus, b: Bus) -> bool:
    """True when the two connections are of one tenant (one account)."""
    return a.subjects.prefix == b.subjects.prefix


async def settled(sender: Bus, watcher: Bus) -> None:
    """Everything ``sender`` sent so far that the server would deliver to ``watcher`` has
    been parsed by ``watcher`` (two round trips: see the module docstring)."""
    await sender.flush()
    await watcher.flush()


def _verdict(server: str, reached: int) -> str:
    return server if reached == 0 else f"{server}; DELIVERED {reached}"


async def _after(intruder: Bus, watcher: Watcher, target: str, marker: bytes) -> str:
    """The server's answer to ``intruder``'s publish on ``target``, once the watcher has
    seen everything the intruder sent (by marker, or ``settled`` across tenants)."""
    if one_tenant(intruder, watcher.bus):
        await intruder.nc.publish(watcher.marker, marker)
        server = await server_answer(intruder, "publish", target)
        await watcher.wait_marker(marker)
        return server
    server = await server_answer(intruder, "publish", target)
    await settled(intruder, watcher.bus)
    return server


async def forbidden_publish(
    intruder: Bus, watcher: Watcher, target: str, msg: Message, *, what: str
) -> tuple[str, str, int]:
    """``intruder`` publishes ``msg`` on ``target`` (typed, then raw) and a marker on the
    watcher's marker subject. Recorded; returns (local answer, server answer, deliveries)."""
    local = await local_answer(intruder.publish(target, msg))
    marker = f"marker-{new_id()}".encode()
    await intruder.nc.publish(target, encode(msg), reply=intruder.nc.new_inbox())
    server = await _after(intruder, watcher, target, marker)
    reached = watcher.delivered(target)
    LEDGER.record(who(intruder), what, target, local=local, server=_verdict(server, reached))
    return local, server, reached


async def forbidden_publish_bytes(
    intruder: Bus, watcher: Watcher, target: str, data: bytes, *, what: str
) -> tuple[str, str, int]:
    """``forbidden_publish`` of a raw body (a JetStream API request, not an actline message);
    the typed Bus is asked through ``publish_stored_bytes``, which checks the subject first."""
    local = await local_answer(intruder.publish_stored_bytes(target, data, timeout=1.0))
    marker = f"marker-{new_id()}".encode()
    await intruder.nc.publish(target, data, reply=intruder.nc.new_inbox())
    server = await _after(intruder, watcher, target, marker)
    reached = watcher.delivered(target)
    LEDGER.record(who(intruder), what, target, local=local, server=_verdict(server, reached))
    return local, server, reached


async def forbidden_subscription(
    intruder: Bus,
    target: str,
    *,
    sender: Bus,
    sent_on: str,
    payloads: Sequence[bytes],
    what: str,
    queue: str = "",
) -> tuple[str, str, int]:
    """``intruder`` subscribes to ``target`` (typed, then raw); once the server has answered,
    ``sender`` publishes ``payloads`` on ``sent_on`` and then a marker to the intruder's own
    inbox. Recorded; returns (local answer, server answer, deliveries to the intruder)."""
    local = await local_answer(intruder.subscribe(target, ignore, queue=queue or None))
    sub = await intruder.nc.subscribe(target, queue=queue, cb=drop)
    server = await server_answer(intruder, "subscription", target)
    marker = await InboxMarker.on(intruder)
    for data in payloads:
        await sender.nc.publish(sent_on, data)
    if one_tenant(sender, intruder):
        await marker.send(sender)
        await marker.wait()
    else:
        await settled(sender, intruder)
    reached = int(sub.delivered)
    shown = f"{target} (queue {queue})" if queue else target
    LEDGER.record(who(intruder), what, shown, local=local, server=_verdict(server, reached))
    return local, server, reached
