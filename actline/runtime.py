"""``actline.Runtime``: the public Python API, and what the CLI is a thin layer over.

    async with Runtime() as rt:                       # embedded NATS + an in-process node
        result = await rt.ask("How do the tiers differ?")
        async for event in rt.stream("And the limits?", conversation_id=result.conversation_id):
            ...                                       # StreamDelta, ReActProgress, ..., ReActResult

A ``Runtime`` connects to ``config.nats_url`` (or starts an embedded nats-server with JetStream
when there is none), optionally runs a node in this process (``node=True``, the default: LMDB
under ``config.node.home``, the configured model, the knowledge folder) and submits turns with
an ``actline.actors.Client``. Start-up problems raise ``ConfigError`` with one line naming the fix.

The runtime composes that client rather than re-wrapping it: ``rt.client`` is the connected
``Client`` for the whole turn protocol (``fetch_result``, ``watch``, ``pending``, ``decide``,
``followup`` by ids, ...). ``Runtime`` keeps only what adds to it: starting and closing the
node and the connection, the channel subscribers of ``submit`` / ``ask`` / ``stream``, the
facade's errors (``ConfigError``) and defaults (who decides an approval, the reason a control
gives, the latest turn for ``feedback``), and the few short forms the documentation shows
(``followup(handle, ...)``, ``skip_waiting``, ``cancel``, ``send_done``, ``result``).

Per-channel subscribers: ``rt.subscribe("canvas", fn)`` calls ``fn(delta)`` with every
``StreamDelta`` of that channel (``"*"``: every channel) of each turn this runtime submits
(``submit``, ``ask``, ``stream``), in arrival order, from a task of the runtime (``ask``
returns once they have had every delta of its turn); it returns a function that
unsubscribes. ``fn`` may be a coroutine function (awaited before the next
delta). A subscriber that raises is logged and the others go on. Canvas deltas carry
``key`` (one panel per key, see ``messages.StreamDelta``)::

    panels: dict[str, str] = {}
    rt.subscribe("canvas", lambda d: panels.__setitem__(
        d.key, ("" if d.replace else panels.get(d.key, "")) + d.text))
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from actline import messages
from actline.actors import Node
from actline.actors.client.client import Client, TurnHandle
from actline.actors.configuration.checks import RATINGS
from actline.actors.errors import NoTurnQueue
from actline.actors.pools.tool_executor import ToolRegistry
from actline.bus import Bus, BusError, EmbeddedNats, NoResponders, RequestTimeout
from actline.llm.protocol import Model
from actline.messages import Ack, Attachment, ErrorReply, ReActResult, StreamDelta
from actline.storage import StorageError, Store
from actline.tools import KnowledgeError, KnowledgeSpace
from actline.tools.hooks import Permission, ToolHooks
from actline.tools.typed import TypedTool

from .config import Config, ConfigError, local_user
from .conversations import Conversations
from .errors import RuntimeNotStarted

__all__ = ["Runtime", "follow"]

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT = 300.0
CREDS_CHECK_S = 3600.0
"""How often a runtime looks at the credentials its home keeps (renewed past half their
life: 15 days for a node's, 6 h for an agent's)."""
ChannelCallback = Callable[[StreamDelta], object]
"""A ``Runtime.subscribe`` callback: a function or coroutine function of one delta."""


async def follow(handle: TurnHandle, *, timeout: float = DEFAULT_TIMEOUT) -> AsyncIterator[Any]:
    """Every event of a submitted turn in arrival order, then its ``ReActResult``.

    Raises ``TimeoutError`` when no result came within ``timeout`` and none is stored in
    the results stream either (one read when the time is up)."""
    seen = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                while seen < len(handle.events):
                    yield handle.events[seen]
                    seen += 1
                if handle.result.done():
                    yield handle.result.result()
                    return
                handle.changed.clear()
                if seen < len(handle.events) or handle.result.done():
                    continue
                await handle.changed.wait()
    except TimeoutError:
        try:
            stored = await handle.fetch()
        except BusError:
            stored = None
        if stored is None:
            raise
    yield stored


class Runtime:
    """An actline runtime: a NATS connection, the ``Client`` on it (``client``), and
    optionally a node in this process."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        node: bool = True,
        model: Model | None = None,
        registry: ToolRegistry | None = None,
        knowledge: KnowledgeSpace | None = None,
        role: str | None = None,
        agent_name: str = "",
        tools: Sequence[TypedTool] = (),
        hooks: ToolHooks | None = None,
        can_use_tool: Permission | None = None,
    ) -> None:
        """``role`` picks the credentials (default: ``node`` with a node, else ``client``;
        ``agent`` with ``agent_name`` for an outside agent). ``tools`` are ``@tool``
        functions the node serves (beside ``registry``'s), ``hooks`` and ``can_use_tool``
        run around every tool call of its turns (``actline.tools.hooks``; see ``hooks``)."""
        self.config = config or Config.load()
        self.run_node = node
        self.role = role or ("node" if node else "client")
        self.agent_name = agent_name
        self._model = model
        if not node and (tools or hooks or can_use_tool):
            raise ConfigError(
                "tools, hooks and can_use_tool run in the node of this process, and "
                "Runtime(node=False) has none: use node=True, or give them to the process "
                "that runs the node (a pool started with `actline pool tools` does not run "
                "hooks registered here)"
            )
        self._hooks = hooks if hooks is not None else ToolHooks()
        if can_use_tool is not None:
            self._hooks.permission(can_use_tool)
        if tools:
            registry = registry if registry is not None else ToolRegistry()
            for typed in tools:
                registry.add(typed)
        self._registry = registry
        self._knowledge = knowledge
        self.server: EmbeddedNats | None = None
        self._bus: Bus | None = None
        self._client: Client | None = None
        self.node: Node | None = None
        self.store: Store | None = None
        self._channel_subs: dict[str, list[ChannelCallback]] = {}
        self._dispatching: dict[str, asyncio.Task[None]] = {}
        """Turn id -> the task handing its deltas to the channel subscribers."""
        self._renewing: asyncio.Task[None] | None = None
        self._conversations: Conversations | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    async def __aenter__(self) -> Runtime:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def nats_url(self) -> str:
        if self.server is not None:
            return self.server.url
        return self.config.nats_url or ""

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeNotStarted("Runtime.bus")
        return self._bus

    @property
    def conversations(self) -> Conversations:
        """The stored conversations: list, search, get, rename, delete, export, fork
        (``actline.conversations``)."""
        if self._conversations is None:
            self._conversations = Conversations(self)
        return self._conversations

    @property
    def hooks(self) -> ToolHooks:
        """The hooks and permission callback around this node's tool calls; add to them with
        ``@rt.hooks.pre``, ``@rt.hooks.post``, ``@rt.hooks.permission``
        (``ConfigError`` without a node here)."""
        if not self.run_node:
            raise ConfigError(
                "Runtime(node=False) runs no node here, so it has no tool hooks: use node=True"
            )
        return self._hooks

    @property
    def client(self) -> Client:
        """The connected client of the turn protocol (``RuntimeNotStarted`` before ``start``)."""
        if self._client is None:
            raise RuntimeNotStarted("Runtime.client")
        return self._client

    async def start(self) -> Runtime:
        """Connect (or start an embedded server) and start the node; ``ConfigError`` on failure."""
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise
        return self

    async def _start(self) -> None:
        config = self.config
        settings = config.node
        if self.run_node:
            if self._model is None:
                config.check_model()
                await config.check_model_server()
            self.store = await asyncio.to_thread(_open_store, settings.home, settings.storage_sync)
            if self._knowledge is None and settings.knowledge_dir is not None:
                self._knowledge = await asyncio.to_thread(
                    _open_knowledge, settings.knowledge_dir, settings.embeddings
                )
        creds = config.creds_for(self.role, self.agent_name)
        if creds is not None:
            # kept by this home: renewed here; given (--creds): renewed by whoever holds
            # the keys (actline creds renew FILE). Either way taken before they expire.
            self._renewing = asyncio.create_task(self._renew_creds(), name="runtime:creds")
        if config.insecure:  # the one warning (the embedded server logs it at INFO)
            log.warning(
                "running WITHOUT authentication (--insecure / ACTLINE_INSECURE=1): any process "
                "that reaches NATS can submit turns, read every stream and answer for agents"
            )
        if config.nats_url is None:
            authority = None if config.insecure else config.authority()
            self.server = await EmbeddedNats(
                port=config.nats_port,
                store_dir=_nats_dir(settings.home),
                authority=authority,
                insecure=config.insecure,
            ).astart()
        try:
            self._bus = await Bus.connect(
                self.nats_url, name="actline", connect_attempts=2, creds=creds or None
            )
        except BusError as exc:
            raise ConfigError(str(exc)) from None
        if self.run_node:
            self.node = Node(
                self._bus,
                settings,
                model=self._model,
                llm=config.llm,
                registry=self._registry,
                store=self.store,
                knowledge=self._knowledge,
                hooks=self._hooks,
            )
            await self.node.start()
        self._client = Client(self._bus)

    async def _renew_creds(self) -> None:
        """Every ``CREDS_CHECK_S``: credentials this home keeps are renewed once half their
        life is gone (``Authority.creds_path``), and a renewed file (here or by
        ``actline creds renew``) is reconnected with; a failure is logged and tried again
        next time."""
        while True:
            await asyncio.sleep(CREDS_CHECK_S)
            try:
                if self.config.nats_creds is None:
                    await asyncio.to_thread(self.config.creds_for, self.role, self.agent_name)
                if self._bus is not None:
                    await self._bus.take_renewed_creds()
            except (ConfigError, BusError) as exc:
                log.warning("could not renew this runtime's credentials: %s", exc)

    async def close(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
            self._renewing = None
        for task in list(self._dispatching.values()):
            task.cancel()
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self.node is not None:
            await self.node.stop()
            self.node = None
        if self._bus is not None:
            await self._bus.close()
            self._bus = None
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
            self.server = None

    # -- turns -------------------------------------------------------------------------------------
    async def submit(
        self,
        text: str,
        conversation_id: str | None = None,
        *,
        attachments: Sequence[Attachment] = (),
        config: dict[str, Any] | None = None,
        timezone: str = "UTC",
    ) -> TurnHandle:
        """Submit a turn; follow it with ``follow(handle)`` or ``await handle.wait()``.

        A new ``conversation_id`` starts that conversation (``check_conversation`` first when
        it must exist already)."""
        try:
            handle = await self.client.submit(
                text,
                conversation_id=conversation_id,
                attachments=attachments,
                config=config,
                timezone=timezone,
            )
        except NoTurnQueue as exc:
            raise ConfigError(str(exc)) from None
        if self._channel_subs:
            tid = handle.turn_id
            task = asyncio.create_task(self._dispatch(handle), name=f"subs-{tid}")
            self._dispatching[tid] = task
            task.add_done_callback(lambda _: self._dispatching.pop(tid, None))
        return handle

    # -- per-channel subscribers -------------------------------------------------------------
    def subscribe(self, channel: str, callback: ChannelCallback) -> Callable[[], None]:
        """Call ``callback`` with every ``StreamDelta`` of ``channel`` (``"*"``: all) of
        the turns submitted from now on (module docstring); returns the unsubscribe."""
        self._channel_subs.setdefault(channel, []).append(callback)

        def unsubscribe() -> None:
            callbacks = self._channel_subs.get(channel, [])
            if callback in callbacks:
                callbacks.remove(callback)
            if not callbacks:
                self._channel_subs.pop(channel, None)

        return unsubscribe

    async def _dispatch(self, handle: TurnHandle) -> None:
        """The turn's deltas to the subscribers of their channel, until its result."""
        seen = 0
        while True:
            while seen < len(handle.events):
                event = handle.events[seen]
                seen += 1
                if isinstance(event, StreamDelta):
                    await self._deliver_delta(event)
            if handle.result.done():
                return
            handle.changed.clear()
            if seen < len(handle.events) or handle.result.done():
                continue
            await handle.changed.wait()

    async def _deliver_delta(self, delta: StreamDelta) -> None:
        callbacks = [*self._channel_subs.get(delta.channel, ()), *self._channel_subs.get("*", ())]
        for callback in callbacks:
            try:
                outcome = callback(delta)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:  # one subscriber's failure must not stop the others
                log.exception("channel subscriber %r failed on %s", callback, delta.channel)

    async def ask(
        self,
        text: str,
        conversation_id: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        **kwargs: Any,
    ) -> ReActResult:
        """Run one turn to its result (the channel subscribers have had all its deltas)."""
        handle = await self.submit(text, conversation_id, **kwargs)
        result = await handle.wait(timeout)
        dispatching = self._dispatching.get(handle.turn_id)
        if dispatching is not None:
            await dispatching
        return result

    async def stream(
        self,
        text: str,
        conversation_id: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """The turn's ``turn.accepted``, ``stream.delta`` and ``react.progress`` events as
        they arrive, then its ``ReActResult``."""
        handle = await self.submit(text, conversation_id, **kwargs)
        async for event in follow(handle, timeout=timeout):
            yield event

    # -- short forms of the client's calls (documented; the rest: ``rt.client``) ------------------
    async def result(self, turn_id: str) -> ReActResult | None:
        """``client.fetch_result``: the stored result of any turn (the results stream keeps
        each for ``ACTLINE_RESULT_RETENTION``); None when it is unknown, unfinished or
        expired. Raises ``StreamMissing`` when this NATS has no results stream."""
        return await self.client.fetch_result(turn_id)

    async def followup(
        self, handle: TurnHandle, text: str, *, attachments: Sequence[Attachment] = ()
    ) -> Ack | ErrorReply:
        """A user message (and its files) that joins the running turn of ``handle``
        (``client.followup`` by ids)."""
        return await self.client.followup(
            handle.conversation_id, handle.turn_id, text, attachments=attachments
        )

    async def skip_waiting(self, turn_id: str) -> None:
        """Stop the turn waiting for outside agents, giving the user as the reason."""
        await self.client.skip_waiting(turn_id, "the user skipped waiting")

    async def cancel(self, turn_id: str) -> None:
        """Cancel the turn, giving the user as the reason."""
        await self.client.cancel(turn_id, "the user cancelled the turn")

    async def send_done(
        self,
        agent: str,
        summary: str,
        *,
        task_id: str | None = None,
        turn_id: str | None = None,
        artifacts: Sequence[messages.ArtifactRef] = (),
    ) -> Ack | ErrorReply:
        """Answer an outside agent's task (``agent.done``); the node says if it applied
        (``client.send_done``, which also takes ``signal_id``, ``timeout``, ...)."""
        return await self.client.send_done(
            agent, summary, task_id=task_id, turn_id=turn_id, artifacts=artifacts
        )

    # -- feedback and approvals: the facade's defaults and errors around the client --------------
    async def feedback(
        self,
        conversation_id: str,
        text: str = "",
        *,
        turn_id: str | None = None,
        rating: int = 0,
        timeout: float = 5.0,
    ) -> Ack | ErrorReply:
        """Feedback on a turn of ``conversation_id`` (``rating`` -1, 0 or +1, and ``text``);
        the model sees it announced next turn. ``turn_id`` None: the conversation's latest
        turn in this runtime's store (``ConfigError`` without a node here: name the turn).
        The node answers ``Ack``, or ``ErrorReply`` (``unknown_turn``, ``invalid_input``
        naming the limit, ``no_node`` when nothing answered)."""
        if rating not in RATINGS:
            raise ConfigError(f"rating {rating!r}: write -1, 0 or 1")
        turn = turn_id or self.last_turn(conversation_id)
        try:
            return await self.client.feedback(conversation_id, turn, rating, text, timeout=timeout)
        except (NoResponders, RequestTimeout):
            return ErrorReply(
                code="no_node",
                message=f"no node serves conversation {conversation_id}: nothing answered "
                f"within {timeout:g} s (is a node running on {self.nats_url}?)",
            )

    def last_turn(self, conversation_id: str) -> str:
        """The latest turn of a stored conversation; ``ConfigError`` when there is no store
        here, no such conversation or no turn yet."""
        if self.store is None:
            raise ConfigError(
                "which turn? name it (--turn TURN_ID): without a node here the conversation's "
                "turns are not known (the turn ids are in actline ask's output)"
            )
        self.check_conversation(conversation_id)
        turns = self.store.load(conversation_id).timeline.turn_ids()
        if not turns:
            raise ConfigError(f"conversation {conversation_id!r} has no turn yet")
        return turns[-1]

    async def approve(
        self,
        turn_id: str,
        *,
        approval_id: str | None = None,
        reason: str = "",
        by: str = "",
        timeout: float = 10.0,
    ) -> Ack | ErrorReply:
        """Approve the turn's pending tool call ``approval_id`` (None: every pending one);
        the node running the turn says whether it applied (``ErrorReply`` ``no_node`` when
        none answered, ``not_waiting``, ``unknown_approval``). ``by`` defaults to the
        outside agent's name, else the local user."""
        return await self.client.decide(
            turn_id,
            True,
            approval_id=approval_id,
            by=by or self._who(),
            reason=reason,
            timeout=timeout,
        )

    async def deny(
        self,
        turn_id: str,
        *,
        approval_id: str | None = None,
        reason: str = "",
        by: str = "",
        timeout: float = 10.0,
    ) -> Ack | ErrorReply:
        """Deny a pending tool call (None: every pending one): it does not run, and the
        model sees the denial (who, why) next round. Answers as ``approve``."""
        return await self.client.decide(
            turn_id,
            False,
            approval_id=approval_id,
            by=by or self._who(),
            reason=reason,
            timeout=timeout,
        )

    def _who(self) -> str:
        """Who decides where the credentials cannot say it (no authentication, or this
        runtime's own node connection): the local user. Otherwise the approver is the
        credential's identity, whatever this says."""
        return local_user()

    # -- stored conversations ----------------------------------------------------------------------
    def check_conversation(self, conversation_id: str) -> None:
        """``ConfigError`` when this node's store has no such conversation."""
        if self.store is None:
            return
        if self.store.header(conversation_id) is None:
            raise ConfigError(
                f"conversation {conversation_id!r} does not exist in "
                f"{self.config.node.home}; omit --conversation to start a new one"
            )


def _nats_dir(home: Path) -> Path:
    return home / "nats"


def _open_store(home: Path, sync: bool) -> Store:
    try:
        return Store(home, sync=sync)
    except (StorageError, OSError) as exc:
        raise ConfigError(
            f"ACTLINE_HOME={home} is not writable ({exc}); choose a writable folder "
            "(ACTLINE_HOME=... or home = ... in actline.toml)"
        ) from None


def _open_knowledge(path: Path, dense: bool) -> KnowledgeSpace:
    """The knowledge space at ``path``: hybrid when ``dense`` (``ACTLINE_EMBEDDINGS``) and the
    embeddings extra is installed, BM25 alone otherwise."""
    try:
        return KnowledgeSpace(path, embedder="default" if dense else None)
    except KnowledgeError as exc:
        raise ConfigError(f"the knowledge folder {path} cannot be used: {exc}") from None
