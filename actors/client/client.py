"""A client of the turn protocol: submit turns, follow their stream, read their results.

Only the public wire contract is used (``actline.messages``): a ``turn.request`` published
to ``al.turn.submit`` (through JetStream, so the submit is confirmed stored),
``stream.delta`` / ``react.progress`` / ``turn.accepted`` on ``al.stream.<cid>``, the
``turn.result`` on ``al.result.<tid>``, ``react.skip_waiting`` / ``react.cancel`` on
``al.turn.<tid>.control``, followups and feedback on ``al.conv.<cid>.followup|feedback``
and ``agent.done`` on the agent's own ``al.agent.<name>.done`` (``actline.actors.client.agent``).
The facade (``actline.Runtime``) builds on it.

Results are durable (``actline.actors.client.results``): besides the core subscription on
``al.result.<tid>``, a pending turn's result is read from the results stream after the
connection comes back from a disconnect (whatever was published meanwhile), when
``TurnHandle.wait`` runs out of time, and on ``fetch_result``. A result seen twice (on
the subscription and in the stream, or repeated by a node) is delivered once: a handle's
result is set once, by turn id, and its result subscription is dropped once it has it.

``watch(conversation_id, on_turn)`` follows the turns other clients submit in a
conversation (the web console's live view): each gets a handle at its first event, and its
result comes as the client's own turns' results do.

A NATS cluster without JetStream quorum (fewer than a majority of its servers up) stores
and serves nothing: a submit or a wait that has not finished after ``QUORUM_CHECK_S`` asks
the server every ``QUORUM_CHECK_S`` whether JetStream has quorum
(``actline.bus.conditions.no_quorum``) and raises ``NoQuorum`` once it says it has none,
rather than waiting out its timeout. A turn submitted before is kept: its ``wait`` returns
its result once the servers are back.

Cancellation: ``close`` cancels a recovery still running (nothing is lost: ``wait`` or
``fetch_result`` reads the stream again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from actline import messages
from actline.actors.errors import NoTurnQueue as NoTurnQueue  # raised by submit; re-exported
from actline.bus import (
    Bus,
    BusError,
    Envelope,
    NoQuorum,
    NoResponders,
    NoStream,
    PermissionDenied,
    RequestTimeout,
    Subscription,
)
from actline.bus.conditions import no_quorum
from actline.messages import (
    Ack,
    ApprovalDecision,
    ArtifactRef,
    Attachment,
    CancelReAct,
    DoneSignal,
    ErrorReply,
    Feedback,
    Followup,
    ReActProgress,
    ReActResult,
    SkipWaiting,
    StreamDelta,
    TurnAccepted,
    TurnRequest,
    new_id,
)

from .agent import send_done
from .results import ResultLog

log = logging.getLogger(__name__)
T = TypeVar("T")

SUBMIT_FAILOVER_S = 30.0
"""On a NATS cluster, how long a submission waits out a failover (a stream leader elected
anew after a server died takes 5-9 s here) before it fails."""
QUORUM_CHECK_S = 1.0
"""How long a submit or wait runs before the client asks whether JetStream has quorum, and
how often it asks again while it runs."""


@dataclass
class TurnHandle:
    """One turn a client follows: its events as they arrive and its result."""

    turn_id: str
    conversation_id: str
    request: TurnRequest | None = None
    """The request, when this client submitted the turn (None: another client did, and
    ``Client.watch`` follows it)."""
    events: list[messages.Message] = field(default_factory=list)
    result: asyncio.Future[ReActResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = field(default=None, repr=False, compare=False)
    """The client that follows the turn: it reads a missed result from the results stream."""

    async def wait(self, timeout: float = 60.0) -> ReActResult:
        """The result; ``RequestTimeout`` when it does not come within ``timeout``.

        When nothing came on the subscription in time, the results stream is read once
        (up to ``actline.actors.client.results.READ_TIMEOUT_S`` more): a result published while this
        client was not listening is returned from there.
        """
        waiting = asyncio.wait_for(asyncio.shield(self.result), timeout)
        try:
            if self.client is None:
                return await waiting
            return await self.client.unless_no_quorum(
                waiting,
                f"result of turn {self.turn_id}",
                kept=f"turn {self.turn_id} is kept and runs once the cluster has quorum "
                f"again; wait for its result then (actline result {self.turn_id})",
            )
        except TimeoutError:
            pass
        with contextlib.suppress(BusError):
            stored = await self.fetch()
            if stored is not None:
                return stored
        raise RequestTimeout(f"result of turn {self.turn_id}", timeout)

    async def fetch(self) -> ReActResult | None:
        """The result if known: delivered already, or read now from the results stream
        (None: not there yet). Raises ``BusError`` when the stream cannot be read."""
        if self.result.done():
            return self.result.result()
        if self.client is None:
            return None
        return await self.client.fetch_result(self.turn_id)

    async def wait_for(
        self, phase: str, *, detail: str = "", timeout: float = 30.0
    ) -> ReActProgress:
        """The first progress card of ``phase`` (whose detail holds ``detail``)."""

        def find() -> ReActProgress | None:
            for card in self.cards:
                if card.phase == phase and detail in card.detail:
                    return card
            return None

        async with asyncio.timeout(timeout):
            while (card := find()) is None:
                self.changed.clear()
                await self.changed.wait()
        return card

    async def wait_text(self, channel: str, *, timeout: float = 30.0) -> str:
        """Wait until something was streamed on ``channel``; returns it so far."""
        async with asyncio.timeout(timeout):
            while not (text := self.text(channel)):
                self.changed.clear()
                await self.changed.wait()
        return text

    @property
    def cards(self) -> list[ReActProgress]:
        return [e for e in self.events if isinstance(e, ReActProgress)]

    @property
    def deltas(self) -> list[StreamDelta]:
        return [e for e in self.events if isinstance(e, StreamDelta)]

    @property
    def accepted(self) -> TurnAccepted | None:
        return next((e for e in self.events if isinstance(e, TurnAccepted)), None)

    def text(self, channel: str) -> str:
        """Everything streamed on ``channel``, in ``seq`` order."""
        parts = sorted((d for d in self.deltas if d.channel == channel), key=lambda d: d.seq)
        return "".join(d.text for d in parts)


class Client:
    """Submits turns over a ``Bus`` and follows them."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._handles: dict[str, TurnHandle] = {}
        self._watchers: dict[str, Callable[[TurnHandle], None]] = {}
        """Conversation id -> who is told of each turn other clients submit in it (``watch``)."""
        self._streams: dict[str, Subscription] = {}
        self._results: dict[str, Subscription] = {}
        self._cleanup: set[asyncio.Task[None]] = set()
        self._stored = ResultLog.bind(bus)
        self._recovering: asyncio.Task[int] | None = None
        self._unhook = bus.on_reconnect(self._on_reconnect)
        self._quorum_watch: asyncio.Task[str] | None = None
        self._quorum_watchers = 0
        self.counters: Counter[str] = Counter()
        """``results`` delivered to handles, ``results_fetched`` of them read from the
        results stream, ``results_duplicate`` copies that came after their handle had its
        result and were dropped (a repeat on the subscription, a read of a delivered one),
        ``results_overtaken`` reads of the stream whose result came on the subscription while
        they ran (dropped too), ``recoveries`` run."""

    async def close(self) -> None:
        self._unhook()
        if self._quorum_watch is not None:
            self._quorum_watch.cancel()
            await asyncio.gather(self._quorum_watch, return_exceptions=True)
            self._quorum_watch = None
        if self._recovering is not None:
            self._recovering.cancel()
            await asyncio.gather(self._recovering, return_exceptions=True)
            self._recovering = None
        if self._cleanup:
            await asyncio.gather(*self._cleanup)
        for sub in [*self._streams.values(), *self._results.values()]:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._streams.clear()
        self._results.clear()

    async def submit(
        self,
        text: str,
        *,
        conversation_id: str | None = None,
        turn_id: str | None = None,
        config: dict[str, Any] | None = None,
        attachments: Sequence[Attachment] = (),
        timezone: str = "UTC",
        user_id: str = "",
    ) -> TurnHandle:
        """Publish a turn request (stored by JetStream before this returns)."""
        request = TurnRequest(
            conversation_id=conversation_id or new_id("c-"),
            turn_id=turn_id or new_id("t-"),
            text=text,
            attachments=list(attachments),
            config=dict(config or {}),
            timezone=timezone,
            user_id=user_id,
        )
        return await self.submit_request(request)

    async def submit_request(self, request: TurnRequest, *, follow: bool = True) -> TurnHandle:
        """Publish ``request``; its result comes to the handle. ``follow=False`` leaves the
        conversation's stream (deltas and progress cards) unread, for callers that only
        want results (a batch job): the handle's ``events`` stay empty."""
        handle = TurnHandle(request.turn_id, request.conversation_id, request, client=self)
        self._handles[request.turn_id] = handle
        if follow:
            await self._follow(request.conversation_id)
        subject = self.bus.subjects.result(request.turn_id)
        # The result follows the request sent below on this connection: no confirmation.
        self._results[request.turn_id] = await self.bus.subscribe(
            subject, self._on_result, confirm=False
        )
        try:  # a submission retried over a NATS failover is stored once (a resubmission is new)
            await self.unless_no_quorum(
                self.bus.publish_stored(
                    self.bus.subjects.turn_submit,
                    request,
                    timeout=5.0,
                    msg_id=f"turn:{request.turn_id}:{new_id()}",  # this call's retries only
                    failover_s=SUBMIT_FAILOVER_S,
                ),
                f"submit of turn {request.turn_id}",
                kept=f"turns submitted before are kept and run once the cluster has quorum "
                f"again; turn {request.turn_id} may not be stored: submit it again then "
                "with the same turn id (a turn stored twice runs once)",
            )
        except NoStream:
            self._drop(request.turn_id)
            raise NoTurnQueue(self.bus.subjects.turn_submit) from None
        except BaseException:
            self._drop(request.turn_id)
            raise
        return handle

    def _drop(self, turn_id: str) -> None:
        """Forget a turn whose submit failed (its result subscription ends)."""
        self._handles.pop(turn_id, None)
        sub = self._results.pop(turn_id, None)
        if sub is not None:
            self._spawn(_quietly(sub.unsubscribe()))

    async def unless_no_quorum(self, work: Awaitable[T], operation: str, *, kept: str = "") -> T:
        """``work``'s result; ``NoQuorum`` (``operation``, ``kept``: what becomes of the
        caller's turns) as soon as the server says JetStream has no quorum while it runs
        (``work`` is cancelled then). The server is asked once ``work`` has run for
        ``QUORUM_CHECK_S``, then every ``QUORUM_CHECK_S``, by one watch shared by every
        caller."""
        task = asyncio.ensure_future(work)
        try:
            done, _ = await asyncio.wait({task}, timeout=QUORUM_CHECK_S)
            if done:
                return task.result()
            watch = self._watch_quorum()
            try:
                await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._unwatch_quorum()
            if task.done() or not watch.done() or watch.cancelled():
                return await task
            raise NoQuorum(operation, watch.result(), kept)
        finally:
            task.cancel()

    def _watch_quorum(self) -> asyncio.Task[str]:
        if self._quorum_watch is None or self._quorum_watch.done():
            self._quorum_watch = asyncio.get_running_loop().create_task(
                self._until_no_quorum(), name="client:quorum"
            )
        self._quorum_watchers += 1
        return self._quorum_watch

    def _unwatch_quorum(self) -> None:
        self._quorum_watchers -= 1
        if self._quorum_watchers <= 0 and self._quorum_watch is not None:
            self._quorum_watch.cancel()
            self._quorum_watch = None

    async def _until_no_quorum(self) -> str:
        """Why JetStream has no quorum, once the server says so (asked every
        ``QUORUM_CHECK_S``: the server sends no event)."""
        subjects = self.bus.subjects
        streams = (subjects.turn_stream, subjects.results_stream)
        while True:
            why = await no_quorum(self.bus, streams, timeout=QUORUM_CHECK_S)
            if why:
                return why
            await asyncio.sleep(QUORUM_CHECK_S)

    async def ask(self, text: str, *, timeout: float = 60.0, **kwargs: Any) -> ReActResult:
        handle = await self.submit(text, **kwargs)
        return await handle.wait(timeout)

    async def _follow(self, cid: str) -> None:
        if cid not in self._streams:
            self._streams[cid] = await self.bus.subscribe(
                self.bus.subjects.stream(cid), self._on_event
            )

    async def watch(self, conversation_id: str, on_turn: Callable[[TurnHandle], None]) -> None:
        """Follow the turns other clients (a Ray job, ``actline ask``) submit in
        ``conversation_id`` from now on: each gets a handle when its first event arrives,
        given to ``on_turn``, and is followed as this client's own turns are (its events;
        its result from ``al.result.<tid>``, from the results stream when it came before the
        subscription, and after a reconnect)."""
        self._watchers[conversation_id] = on_turn
        await self._follow(conversation_id)

    async def _on_event(self, msg: messages.Message, env: Envelope) -> None:
        tid = str(getattr(msg, "turn_id", ""))
        handle = self._handles.get(tid)
        if handle is None:
            on_turn = self._watchers.get(str(getattr(msg, "conversation_id", "")))
            if on_turn is None or not tid:
                return
            handle = await self._adopt(str(getattr(msg, "conversation_id", "")), tid)
            on_turn(handle)
        handle.events.append(msg)
        handle.changed.set()

    async def _adopt(self, cid: str, tid: str) -> TurnHandle:
        """A handle for a turn another client submitted, subscribed to its result."""
        handle = TurnHandle(tid, cid, client=self)
        self._handles[tid] = handle
        self._results[tid] = await self.bus.subscribe(
            self.bus.subjects.result(tid), self._on_result
        )
        self._spawn(_quietly(self.fetch_result(tid)))  # a result published before that
        return handle

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """A task kept until it ends (``close`` waits for it)."""
        task = asyncio.get_running_loop().create_task(work)
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)

    async def _on_result(self, msg: messages.Message, env: Envelope) -> None:
        if isinstance(msg, ReActResult):
            self._deliver(msg)

    def _deliver(self, result: ReActResult, *, fetched: bool = False) -> bool:
        """Hand ``result`` to its turn's handle once; False when it had one already (or
        the turn is not this client's)."""
        handle = self._handles.get(result.turn_id)
        if handle is None:
            return False
        if handle.result.done():
            self.counters["results_duplicate"] += 1
            return False
        handle.result.set_result(result)
        handle.changed.set()
        self.counters["results"] += 1
        if fetched:
            self.counters["results_fetched"] += 1
        sub = self._results.pop(result.turn_id, None)
        if sub is not None:  # maybe from inside its own handler: a task, kept until it ends
            self._spawn(_quietly(sub.unsubscribe()))
        return True

    # -- durable results --------------------------------------------------------------------------
    async def fetch_result(self, turn_id: str) -> ReActResult | None:
        """The stored result of ``turn_id`` from the results stream (any turn, not only this
        client's); None when the turn is unknown, still running, or its result expired.

        A turn this client follows gets the result as if it had arrived. Raises
        ``StreamMissing`` when no results stream exists, or another ``BusError``.
        """
        handle = self._handles.get(turn_id)
        waiting = handle is not None and not handle.result.done()
        result = await self._stored.get(turn_id)
        if result is not None and not (waiting and self._overtaken(handle)):
            self._deliver(result, fetched=True)
        return result

    def _overtaken(self, handle: TurnHandle | None) -> bool:
        """True when a handle that was waiting got its result on the subscription while
        its read of the results stream ran: the read's copy is dropped and counted as
        ``results_overtaken`` (the server sent the result once; the read was early)."""
        if handle is None or not handle.result.done():
            return False
        self.counters["results_overtaken"] += 1
        return True

    @property
    def pending(self) -> list[TurnHandle]:
        """The handles still waiting for their result."""
        return [h for h in self._handles.values() if not h.result.done()]

    async def recover(self) -> int:
        """Read every pending turn's result from the results stream; returns how many were
        found. Run after each reconnect; stops at the first read that fails (logged)."""
        self.counters["recoveries"] += 1
        found = 0
        for handle in self.pending:
            if handle.result.done():  # arrived on the subscription meanwhile
                continue
            try:
                result = await self._stored.get(handle.turn_id)
            except BusError as exc:
                log.info("results not recovered after a reconnect: %s", exc)
                break
            if result is None or self._overtaken(handle):
                continue
            if self._deliver(result, fetched=True):
                found += 1
        if found:
            log.info("recovered %d results from %s", found, self._stored.name)
        return found

    def _on_reconnect(self) -> None:
        """Back from a disconnect: read what was published meanwhile (a recovery still
        running from an earlier reconnect is replaced)."""
        if not self.pending:
            return
        if self._recovering is not None and not self._recovering.done():
            self._recovering.cancel()
        self._recovering = asyncio.get_running_loop().create_task(
            self._recover_logged(), name="client:recover"
        )

    async def _recover_logged(self) -> int:
        try:
            return await self.recover()
        except Exception:
            log.exception("recovering results after a reconnect failed")
            return 0

    # -- controls ---------------------------------------------------------------------------------
    async def skip_waiting(self, turn_id: str, reason: str = "") -> None:
        await self.bus.publish(
            self.bus.subjects.turn_control(turn_id), SkipWaiting(turn_id=turn_id, reason=reason)
        )

    async def cancel(self, turn_id: str, reason: str = "") -> None:
        await self.bus.publish(
            self.bus.subjects.turn_control(turn_id), CancelReAct(turn_id=turn_id, reason=reason)
        )

    async def decide(
        self,
        turn_id: str,
        approved: bool,
        *,
        approval_id: str | None = None,
        tool: str = "",
        by: str = "",
        reason: str = "",
        timeout: float = 10.0,
    ) -> Ack | ErrorReply:
        """Approve or deny a waiting turn's tool call ``approval_id`` (None: every pending
        one, of ``tool`` when given) on this approver's own approval subject: the node
        running the turn answers (``Ack``, or ``ErrorReply`` ``not_waiting`` /
        ``unknown_approval`` / ``not_approver_of_tool``); ``no_node`` when none did.

        Who decided is this connection's credential (``client NAME`` or ``agent NAME``
        issued with the right to approve); ``by`` names the approver only on a server
        without authentication, where nothing can prove who anyone is."""
        role, name = self._approver(by)
        msg = ApprovalDecision(
            turn_id=turn_id, approval_id=approval_id, approved=approved, reason=reason
        )
        subject = self.bus.subjects.approval(role, name, turn_id, tool)
        try:
            return await self._ask(subject, msg, timeout)
        except (NoResponders, RequestTimeout):
            return ErrorReply(
                code="no_node",
                message=f"no node runs turn {turn_id}: nothing answered on {subject} within "
                f"{timeout:g} s (is it finished, or the id wrong?)",
            )

    def _approver(self, by: str) -> tuple[str, str]:
        identity = self.bus.identity
        if identity is None or identity.role in ("node", "admin"):
            # no authentication, or a role that may publish anything of its tenant (the
            # node runs the turns; a local runtime shares its connection): ``by`` names
            name = re.sub(r"[^A-Za-z0-9_-]+", "-", by).strip("-") or "local"
            return "client", name
        if not identity.approves or identity.role not in ("client", "agent"):
            # credentials with the right: actline creds client|agent NAME --approver
            raise PermissionDenied(
                "approve on", f"{self.bus.subjects.prefix}.approve.>", identity.label
            )
        return identity.role, identity.name

    async def followup(
        self,
        conversation_id: str,
        turn_id: str,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        timeout: float = 5.0,
    ) -> Ack | ErrorReply:
        """Add ``text`` (and ``attachments``) to the running turn ``turn_id``: the model sees
        it next round. ``ErrorReply`` ``turn_not_running`` when that turn is not running."""
        msg = Followup(
            conversation_id=conversation_id,
            turn_id=turn_id,
            text=text,
            attachments=list(attachments),
        )
        return await self._ask(self.bus.subjects.conv(conversation_id, "followup"), msg, timeout)

    async def feedback(
        self,
        conversation_id: str,
        turn_id: str,
        rating: int,
        text: str = "",
        *,
        timeout: float = 5.0,
    ) -> Ack | ErrorReply:
        msg = Feedback(conversation_id=conversation_id, turn_id=turn_id, rating=rating, text=text)
        return await self._ask(self.bus.subjects.conv(conversation_id, "feedback"), msg, timeout)

    async def send_done(
        self,
        agent: str,
        summary: str,
        *,
        turn_id: str | None = None,
        task_id: str | None = None,
        signal_id: str | None = None,
        artifacts: Sequence[ArtifactRef] = (),
        timeout: float = 5.0,
        store_within: float = 30.0,
    ) -> Ack | ErrorReply:
        """Answer an outside agent's task: ``agent.done`` stored on the agent's own subject,
        then the node's verdict (``actline.actors.client.agent.send_done``: an ``Ack``, an
        ``ErrorReply``, or an ``Ack`` whose detail starts with ``stored`` when no node has
        applied it yet). Raises ``DoneNotStored`` when the signal could not be stored."""
        msg = DoneSignal(
            agent=agent,
            turn_id=turn_id,
            task_id=task_id,
            signal_id=signal_id or new_id("sig-"),
            summary=summary,
            artifacts=list(artifacts),
        )
        return await send_done(self.bus, msg, timeout=timeout, store_within=store_within)

    async def _ask(self, subject: str, msg: messages.Message, timeout: float) -> Ack | ErrorReply:
        reply = await self.bus.request(subject, msg, timeout=timeout, raise_remote=False)
        if not isinstance(reply, Ack | ErrorReply):
            return ErrorReply(code="unexpected_reply", message=f"got {reply.kind}")
        return reply


async def _quietly(done: Awaitable[object]) -> None:
    """Await a cleanup step whose failure (a connection already draining) does not matter."""
    with contextlib.suppress(Exception):
        await done
