"""The kill loop: a batch of multi-turn conversations served by real node processes that are
SIGKILLed at seeded random moments, compared with the same batch run without kills.

Used by ``tests/actors/node/test_kill_loop.py`` (single mode), ``tests/cluster/
test_kill_loop_cluster.py`` (cluster mode) and ``bench/resume.py`` (``make soak``).

A run (``run_batch``):

- **nodes**: ``python -m actline.cli.node`` processes (``nodeprocs``). Single mode: one process
  on one home, restarted on the same home after each kill without ``--node-id`` (a new id
  each start, as ``actline serve`` with default settings). Cluster mode (``ACTLINE_CLUSTER``):
  two or three processes ``n1``.. each on its own home, a killed one restarted under the
  same id and home (as a supervisor or the Ray job does). Node settings are the defaults
  except the offline extractive model with a small ``--model-delay`` (so that a kill lands
  mid-turn), the ``examples/kb`` knowledge folder and the followup grace.
- **the batch** (``plan_batch``): C conversations of T turns over ``examples/kb``, later turns
  referring to earlier ones ("what did you say earlier about ..."), each turn's answer
  depending on what the earlier turns read. Each conversation's turns are submitted in
  order by ``actline.actors.client.client.Client`` with one of three pacings: all at once (the whole
  conversation queued), each after the previous turn's ``turn.accepted`` (a turn submitted
  while the one before is unfinished) or each after the previous turn's result.
- **kills** (``KillPlan``, seeded): the first kill lands right after the first turn of an
  "after accepted" conversation is accepted, so that its second turn is submitted after the
  restart while the first is unfinished (the reordering to rule out); later kills land right
  after some ``turn.accepted`` or after a random delay. The killed node is restarted at once.
- **what is collected**: every ``turn.result`` of every turn with its arrival time (on the
  client's connection, which stays up), every ``turn.accepted``, and after the run, each
  conversation's stored timeline (turn order, headers, prompts, statuses, notices): from the
  single node's home, or in cluster mode from the durable copy in JetStream
  (``actline.actors.ownership.durable.JetStreamCopy``) that every node adopts from.

``killreport.compare`` holds a run against the same batch without kills; ``killreport.Report``
sums it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actline import messages
from actline.actors.client.client import Client
from actline.actors.errors import CopyBroken
from actline.actors.ownership.durable import JetStreamCopy
from actline.bus import Bus, Envelope, Subscription
from actline.messages import ReActResult, Subjects, TurnAccepted, TurnRequest, new_id
from actline.storage import Store
from actline.timeline.blocks import NOTICE, TURN_HEADER, USER_PROMPT
from tests.waiting import until

from .nodeprocs import Fleet, NodeOptions, NodeProcess

Mode = Literal["single", "cluster"]
Pacing = Literal["all_at_once", "after_accepted", "after_result"]
PACINGS: tuple[Pacing, ...] = ("after_accepted", "all_at_once", "after_result")

SCRIPTS: tuple[tuple[str, ...], ...] = (
    (
        "How do the pricing tiers differ?",
        "What are the quotas of each tier?",
        "What did you say earlier about pricing, and how do rate limits work?",
        "Remind me what we discussed before about quotas, and how is billing done?",
    ),
    (
        "How do backups work?",
        "How do I restore a cluster from a backup?",
        "What did you tell me earlier about backups, and how is retention configured?",
        "Recall the restore steps: how do upgrades work?",
    ),
    (
        "How is data encrypted at rest?",
        "How are signing keys rotated?",
        "What did you say before about encryption, and how does authentication work?",
        "Remind me what we discussed about keys: what changed in release 3.2.0?",
    ),
    (
        "What are the delivery semantics?",
        "How do webhooks retry failed deliveries?",
        "What did you say earlier about delivery, and how does the Kafka integration work?",
        "Recall what we discussed about webhooks: how are routing rules configured?",
    ),
    (
        "How does clustering and replication work?",
        "What should I monitor in production?",
        "What did you tell me earlier about clustering, and what are the system requirements?",
        "Remind me about monitoring: what does the SLA promise?",
    ),
)


# --- the batch ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnPlan:
    conversation_id: str
    turn_id: str
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ConversationPlan:
    conversation_id: str
    pacing: Pacing
    turns: tuple[TurnPlan, ...]


def plan_batch(conversations: int, turns: int) -> list[ConversationPlan]:
    """C conversations of T turns; ids are fixed so that two runs can be compared."""
    plans = []
    for c in range(conversations):
        cid = f"kc{c:03d}"
        script = SCRIPTS[c % len(SCRIPTS)]
        texts = [
            script[i % len(script)] + ("" if i < len(script) else f" (part {i + 1})")
            for i in range(turns)
        ]
        plan = tuple(TurnPlan(cid, f"{cid}-t{i + 1}", i, t) for i, t in enumerate(texts))
        plans.append(ConversationPlan(cid, PACINGS[c % len(PACINGS)], plan))
    return plans


@dataclass(frozen=True, slots=True)
class KillPlan:
    """``kills`` SIGKILLs, seeded: the first right after the first turn of an "after
    accepted" conversation is accepted, then each either right after a ``turn.accepted``
    (``after_accepted`` of them) or after a random delay in ``delay_s``."""

    kills: int
    seed: int = 1
    after_accepted: float = 0.4
    delay_s: tuple[float, float] = (0.3, 2.0)


# --- what the client sees -----------------------------------------------------------------------


@dataclass
class TurnTrace:
    plan: TurnPlan
    submitted_at: float | None = None
    accepted: list[tuple[float, str]] = field(default_factory=list)
    results: list[tuple[float, ReActResult]] = field(default_factory=list)
    was_accepted: asyncio.Event = field(default_factory=asyncio.Event)
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def first_result(self) -> ReActResult | None:
        return self.results[0][1] if self.results else None


AcceptHook = Callable[[TurnTrace, str], None]


class Observer:
    """Every ``turn.accepted`` and every ``turn.result`` of the batch, with arrival times.

    ``hook`` (set by the killer) runs synchronously on each ``turn.accepted`` before the
    turn's ``was_accepted`` is set, so a submitter that waits on both sees the kill."""

    def __init__(self, bus: Bus, plans: Sequence[ConversationPlan]) -> None:
        self.bus = bus
        self.traces = {t.turn_id: TurnTrace(t) for c in plans for t in c.turns}
        self.hook: AcceptHook | None = None
        self.all_answered = asyncio.Event()
        self._subs: list[Subscription] = []
        self._plans = plans

    async def start(self) -> None:
        subjects = self.bus.subjects
        for conv in self._plans:
            self._subs.append(
                await self.bus.subscribe(subjects.stream(conv.conversation_id), self._on_stream)
            )
            for turn in conv.turns:
                self._subs.append(
                    await self.bus.subscribe(subjects.result(turn.turn_id), self._on_result)
                )

    async def close(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()

    def unanswered(self) -> list[TurnTrace]:
        return [t for t in self.traces.values() if not t.results]

    async def _on_stream(self, msg: messages.Message, env: Envelope) -> None:
        if not isinstance(msg, TurnAccepted):
            return
        trace = self.traces.get(msg.turn_id)
        if trace is None:
            return
        trace.accepted.append((time.monotonic(), msg.node))
        if self.hook is not None:
            self.hook(trace, msg.node)
        trace.was_accepted.set()

    async def _on_result(self, msg: messages.Message, env: Envelope) -> None:
        if not isinstance(msg, ReActResult):
            return
        trace = self.traces.get(msg.turn_id)
        if trace is None:
            return
        trace.results.append((time.monotonic(), msg))
        trace.answered.set()
        if not self.unanswered():
            self.all_answered.set()


# --- the fleet and the killer -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KillEvent:
    """One SIGKILL: when, which node, the turns running there, when it was ready again."""

    at: float
    node: str
    how: str
    running: tuple[str, ...]
    ready_at: float
    start_s: float


class Killer:
    """Carries out a ``KillPlan`` on a fleet while the batch runs."""

    def __init__(
        self, fleet: Fleet, observer: Observer, kills: KillPlan, *, patience_s: float
    ) -> None:
        self.fleet = fleet
        self.patience_s = patience_s
        """How long to wait for a ``turn.accepted`` to kill after (none comes: stop)."""
        self.observer = observer
        self.plan = kills
        self.rng = random.Random(kills.seed)
        self.events: list[KillEvent] = []
        self._want: Callable[[TurnTrace], bool] | None = None
        self._hit: asyncio.Future[tuple[TurnTrace, str]] | None = None
        observer.hook = self._on_accepted

    def arm_first(self, plans: Sequence[ConversationPlan]) -> None:
        """The first kill: right after the first turn of an "after accepted" conversation
        is accepted (its second turn then goes in after the restart). Call before submitting."""
        target = next((c.turns[0].turn_id for c in plans if c.pacing == "after_accepted"), None)
        self._arm(lambda t: target is None or t.plan.turn_id == target)

    def _arm(self, want: Callable[[TurnTrace], bool]) -> None:
        self._want = want
        self._hit = asyncio.get_running_loop().create_future()

    def _on_accepted(self, trace: TurnTrace, node: str) -> None:
        if self._want is None or self._hit is None or self._hit.done() or trace.results:
            return
        if self._want(trace):
            self.fleet.up.clear()  # submitters waiting on this acceptance wait for the restart
            self._hit.set_result((trace, node))
            self._want = None

    async def run(self) -> None:
        done = asyncio.ensure_future(self.observer.all_answered.wait())
        try:
            for k in range(self.plan.kills):
                if k == 0 or self.rng.random() < self.plan.after_accepted:
                    hit = await self._next_accepted(done)
                    if hit is None:
                        return
                    trace, node_id = hit
                    target = self.fleet.by_id(node_id) or self.rng.choice(self.fleet.nodes)
                    how = f"after accepted {trace.plan.turn_id}"
                else:
                    delay = self.rng.uniform(*self.plan.delay_s)
                    target = self.rng.choice(self.fleet.nodes)
                    await asyncio.wait({done}, timeout=delay)  # the fault's moment, not a wait
                    if done.done():
                        return
                    how = f"after {delay:.2f} s"
                await self._kill(target, how)
        finally:
            done.cancel()
            self._want = None

    async def _next_accepted(self, done: asyncio.Future[Any]) -> tuple[TurnTrace, str] | None:
        """The next ``turn.accepted`` the kill is armed for; None when all is answered first."""
        if self._hit is None:
            self._arm(lambda t: True)
        assert self._hit is not None
        hit = self._hit
        waiters: set[asyncio.Future[Any]] = {done, hit}
        await asyncio.wait(waiters, timeout=self.patience_s, return_when=asyncio.FIRST_COMPLETED)
        self._hit = None
        self._want = None
        return hit.result() if hit.done() else None

    async def _kill(self, node: NodeProcess, how: str) -> None:
        self.fleet.up.clear()
        killed_id, spawned_at = node.node_id, node.spawned_at
        at = await node.kill()
        # After the process is reaped: a result it published just before is in by now.
        running = tuple(  # the turns this incarnation of the process took and ran
            t.plan.turn_id
            for t in self.observer.traces.values()
            if t.accepted
            and not t.results
            and t.accepted[-1][1] == killed_id
            and spawned_at < t.accepted[-1][0] < at
        )
        start_s = await node.start()
        self.fleet.start_s.append(start_s)
        self.events.append(KillEvent(at, killed_id, how, running, node.ready_at, start_s))
        self.fleet.up.set()


# --- one run ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredConversation:
    """A conversation's timeline as stored: turn ids in block order (consecutive repeats
    collapsed: ``t1, t2, t1`` is interleaving), header and prompt counts, turn statuses,
    and each turn's notices (path and text, in block order)."""

    runs: tuple[str, ...]
    headers: dict[str, int]
    prompts: dict[str, int]
    statuses: dict[str, str]
    notices: dict[str, tuple[str, ...]]


@dataclass
class RunRecord:
    """One run: what the client saw, what was stored, the kills; times are ``monotonic``."""

    mode: Mode
    plans: list[ConversationPlan]
    traces: dict[str, TurnTrace]
    stored: dict[str, StoredConversation]
    kills: list[KillEvent]
    start_s: list[float]
    wall_s: float
    drained: bool
    workdir: Path

    def timeline(self) -> dict[str, Any]:
        """The run as seen by the client, in seconds from its first kill (or first submit):
        for the post-mortem of a mismatch (``run_batch`` writes it to ``trace.json``)."""
        submits = [t.submitted_at for t in self.traces.values() if t.submitted_at is not None]
        t0 = self.kills[0].at if self.kills else min(submits, default=0.0)
        turns = {
            tid: {
                "submitted": None if t.submitted_at is None else round(t.submitted_at - t0, 3),
                "accepted": [[round(at - t0, 3), node] for at, node in t.accepted],
                "results": [[round(at - t0, 3), r.status] for at, r in t.results],
            }
            for tid, t in self.traces.items()
        }
        kills = [
            {
                "at": round(k.at - t0, 3),
                "node": k.node,
                "how": k.how,
                "running": list(k.running),
                "ready": round(k.ready_at - t0, 3),
            }
            for k in self.kills
        ]
        stored = {cid: list(c.runs) for cid, c in self.stored.items()}
        return {"mode": self.mode, "kills": kills, "turns": turns, "stored_order": stored}


def _stored(blocks: Iterable[dict[str, Any]], records: dict[str, str]) -> StoredConversation:
    runs: list[str] = []
    headers: Counter[str] = Counter()
    prompts: Counter[str] = Counter()
    notices: dict[str, list[str]] = {}
    for block in blocks:
        tid = str(block.get("turn_id", ""))
        if not runs or runs[-1] != tid:
            runs.append(tid)
        if block.get("type") == TURN_HEADER:
            headers[tid] += 1
        elif block.get("type") == USER_PROMPT:
            prompts[tid] += 1
        elif block.get("type") == NOTICE:
            notices.setdefault(tid, []).append(f"{block.get('path')} {block.get('text')}")
    said = {tid: tuple(texts) for tid, texts in notices.items()}
    return StoredConversation(tuple(runs), dict(headers), dict(prompts), records, said)


def read_home(home: Path, plans: Sequence[ConversationPlan]) -> dict[str, StoredConversation]:
    """Each conversation as stored in one node's LMDB home (the node stopped)."""
    out = {}
    with Store(home) as store:
        for conv in plans:
            cid = conv.conversation_id
            statuses = {}
            for turn in conv.turns:
                record = store.turn_record(cid, turn.turn_id)
                statuses[turn.turn_id] = str(record.get("status")) if record else "missing"
            blocks = list(store.iter_blocks(cid)) if store.header(cid) is not None else []
            out[cid] = _stored(blocks, statuses)
    return out


async def _read_settled(copy: JetStreamCopy, cid: str, timeout: float = 30.0) -> Any:
    """The durable copy of ``cid`` once every replica serving its reads holds the rounds
    its head names: a server just back from a fault (a freeze, a kill) catches up on the
    stream a moment after the head moved, and a read it serves meanwhile is incomplete."""
    got: list[Any] = []

    async def whole() -> bool:
        try:
            got.append(await copy.read(cid))
        except CopyBroken:
            return False
        return True

    await until(whole, timeout)
    return got[-1]


async def read_durable(
    bus: Bus, plans: Sequence[ConversationPlan]
) -> dict[str, StoredConversation]:
    """Each conversation as stored in cluster mode's durable copy (what every node adopts)."""
    copy = JetStreamCopy(bus)
    await copy.start()
    out = {}
    for conv in plans:
        rebuilt = await _read_settled(copy, conv.conversation_id)
        blocks = rebuilt.blocks if rebuilt is not None else []
        records = rebuilt.records if rebuilt is not None else {}
        statuses = {
            t.turn_id: str(records[t.turn_id].get("status")) if t.turn_id in records else "missing"
            for t in conv.turns
        }
        out[conv.conversation_id] = _stored(blocks, statuses)
    return out


async def paced(conv: ConversationPlan, previous: TurnTrace | None) -> None:
    """Wait until the conversation's next turn may be submitted after ``previous``."""
    if previous is not None and conv.pacing == "after_accepted":
        # its result proves it was accepted too: a turn.accepted lost on the wire (a client
        # reconnecting while a NATS server fails over) does not hold the next turn back
        waits = [
            asyncio.ensure_future(e.wait()) for e in (previous.was_accepted, previous.answered)
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
    elif previous is not None and conv.pacing == "after_result":
        await previous.answered.wait()


async def _submit(client: Client, observer: Observer, fleet: Fleet, conv: ConversationPlan) -> None:
    previous: TurnTrace | None = None
    for turn in conv.turns:
        await paced(conv, previous)
        await fleet.up.wait()
        trace = observer.traces[turn.turn_id]
        request = TurnRequest(
            conversation_id=turn.conversation_id, turn_id=turn.turn_id, text=turn.text
        )
        trace.submitted_at = time.monotonic()
        await client.submit_request(request)
        previous = trace


async def _drain(bus: Bus, timeout: float) -> bool:
    """Wait until the turn queue holds no message (every turn acked), so that a late
    redelivery (a second answer) is seen; False when it still holds some after ``timeout``."""
    js = bus.nc.jetstream()

    async def empty() -> bool:
        info = await js.stream_info(bus.subjects.turn_stream)
        return int(info.state.messages) == 0

    try:
        await until(empty, timeout)
    except TimeoutError:
        return False
    return True


async def run_batch(
    url: str,
    workdir: Path,
    plans: list[ConversationPlan],
    *,
    mode: Mode = "single",
    nodes: int = 1,
    kills: KillPlan | None = None,
    options: NodeOptions | None = None,
    settle_s: float = 180.0,
    drain_s: float = 40.0,
) -> RunRecord:
    """Serve the batch on fresh node processes (and a fresh subject prefix), killing them
    per ``kills``; wait up to ``settle_s`` after the submissions for every result."""
    options = options or NodeOptions()
    prefix = f"kl{new_id().lower()}"
    count = 1 if mode == "single" else max(2, nodes)
    fleet = Fleet(
        [
            NodeProcess(
                url,
                prefix,
                workdir / (f"n{i + 1}" if mode == "cluster" else "home"),
                workdir / "logs",
                options,
                node_id=f"n{i + 1}" if mode == "cluster" else None,
                cluster=mode == "cluster",
            )
            for i in range(count)
        ],
        workdir,
    )
    bus = await Bus.connect(url, subject_names=Subjects(prefix), name="killloop")
    observer = Observer(bus, plans)
    client = Client(bus)
    try:
        return await _run(bus, observer, client, fleet, plans, mode, kills, settle_s, drain_s)
    finally:
        await observer.close()
        await client.close()
        await bus.close()


async def _run(
    bus: Bus,
    observer: Observer,
    client: Client,
    fleet: Fleet,
    plans: list[ConversationPlan],
    mode: Mode,
    kills: KillPlan | None,
    settle_s: float,
    drain_s: float,
) -> RunRecord:
    killer = None
    if kills is not None and kills.kills > 0:
        killer = Killer(fleet, observer, kills, patience_s=settle_s)
    tasks: list[asyncio.Task[None]] = []
    began = time.monotonic()
    try:
        await observer.start()
        await fleet.start()
        if killer is not None:
            killer.arm_first(plans)
            tasks.append(asyncio.create_task(killer.run(), name="killloop:killer"))
        submitters = [
            asyncio.create_task(
                _submit(client, observer, fleet, conv), name=f"submit {conv.conversation_id}"
            )
            for conv in plans
        ]
        tasks += submitters
        if killer is not None:
            await tasks[0]  # it returns after its kills, or once everything is answered
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(observer.all_answered.wait(), settle_s)
        for task in submitters:  # a submit that failed is the run's failure, not a lost turn
            if task.done() and task.exception() is not None:
                raise RuntimeError(f"{task.get_name()} failed") from task.exception()
        wall = time.monotonic() - began
        drained = await _drain(bus, drain_s) if not observer.unanswered() else False
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await fleet.stop()
    if mode == "single":
        stored = await asyncio.to_thread(read_home, fleet.nodes[0].home, plans)
    else:
        stored = await read_durable(bus, plans)
    record = RunRecord(
        mode=mode,
        plans=plans,
        traces=observer.traces,
        stored=stored,
        kills=killer.events if killer is not None else [],
        start_s=fleet.start_s,
        wall_s=wall,
        drained=drained,
        workdir=fleet.workdir,
    )
    trace = json.dumps(record.timeline(), indent=1)
    await asyncio.to_thread((fleet.workdir / "trace.json").write_text, trace)
    return record


__all__ = [
    "ConversationPlan",
    "KillEvent",
    "KillPlan",
    "Mode",
    "NodeOptions",
    "RunRecord",
    "StoredConversation",
    "TurnPlan",
    "TurnTrace",
    "paced",
    "plan_batch",
    "run_batch",
]
