"""The decision loop's own cost per round, with an instant model, against the raw NATS floor.

Everything runs on one embedded nats-server, in this process but for the node of
part 4: ``actors.Node`` (its conversation, decision and streamer actors) on one
connection and an ``actors.Client`` on another. The model is ``InstantModel``: every
call answers at once, in one chunk, with a line of thinking and a decision calling
``react.search_knowledge`` (``top_k`` 1 over ``examples/kb``; a new query each round,
so the identical-call guard never fires) until the turn's last round, which
completes. A round then costs only the loop: the checkpoint (one LMDB commit,
fsync-ed with ``storage_sync=True``), the render, the model request to the node's
streamer and its reply, the thinking deltas and three progress cards published, the
tool call and result blocks appended and the tool itself (its own in-process cost is
reported apart, as ``tool``).

1. Per round. Conversations of ``N`` blocks (``--sizes``; turns of header, prompt, 1-6
   rounds of notes, tool call and result, and a completion; texts of 60-400
   characters; a day old; 50 sources) are written with ``Store.persist`` into the
   store handed to the node, before the node loads them: one conversation per
   measured turn, so that every turn starts near ``N`` blocks. Each size runs with
   ``storage_sync`` on and off, each case with its own store, node, client and subject
   prefix. A warm-up turn of two rounds loads and fully renders each conversation;
   then the ``--turns`` measured turns of ``--rounds`` rounds run, interleaved across
   the cases. A round is the time between the ``ts`` of consecutive ``thinking`` cards
   (stamped on the node, so delivery to the client is not in it): ``rounds - 1``
   samples per turn. Reported with it: the turn's wall time at the client (submit to
   result) over its rounds, its pickup (submit to the node's ``turn.accepted``), and
   the legs of a round: thinking card to ``tool_call`` card (checkpoint, render, model
   call, decision checked) and ``tool_call`` to ``tool_result`` (blocks appended, tool
   run). The nodes have a 1,000,000-token context window so that the prefilled blocks
   stay visible: compaction is not measured here.
2. Floor, in blocks between those turns: plain nats-py, no actline code. One publish
   of a progress card (to a subscriber on a second connection) and one request/reply
   to a trivial responder on the same connection (the node's streamer shares the
   node's connection), with the byte sizes of the loop's card, model request (a
   context reference) and model reply. The loop does more per round (three cards, a
   delta, the tool); the floor is what no runtime can avoid.
   The durable floor adds what no durable round can avoid either: one LMDB commit of
   the bytes a round persists, in an environment of its own per case (``sync`` and
   ``metasync`` as the case's ``storage_sync``; one write transaction putting that many
   bytes under a new key), sampled after every batch too. The bytes are measured, not
   assumed: after each measured turn, the msgpack of the block dicts the turn appended
   (read back from the node's store above the cursor recorded before it) over its
   rounds, plus the msgpack of the header rows (sources pool, plans) the turn added or
   changed (packed rows compared before and after it; a row changed by several rounds
   counts once) over its rounds, plus the header row and the turn record that every
   round rewrites.
   Durable floor = NATS floor p50 + commit p50 (likewise p90).
3. Throughput. ``--conversations`` new conversations on one node each run turns of 2
   or 3 rounds, one after another, until ``--total-turns`` turns are done
   (``followup_grace_s`` 0): turns per second over the wall time, and this process's
   CPU time per turn (the loop runs on one event loop, so that bounds the rate).
4. Memory. A node in a child process (fresh, so that memory freed by the parts before
   is not reused unseen) takes ``--waiting`` turns, each in a new conversation, whose
   model calls ``agent.send`` to an agent nobody answers (wait timeout one hour). The
   growth of that process's resident memory (``/proc/self/statm``, after
   ``gc.collect()``) from before the batch to when every turn has shown its ``waiting``
   card, over the count, is the memory per conversation waiting on a DONE. A first
   batch of a tenth as many turns warms the node up. Then every turn is cancelled and
   must end ``cancelled``.

Targets (``storage_sync=True``, as in production), in ``targets``: a round's p50 within
3x of the NATS floor's p50 at every size, and under 5 ms at the largest. In
``floor_targets``: a round's p50 within 2x of the durable floor's p50 at every size.

``--baseline PATH`` reads an earlier run's JSON (``bench/results/loop_baseline_main.json``
records main before the loop work) and reports this run beside it: round p50 per size and
mode, turns/s and CPU per turn per throughput run. Its targets (``baseline.targets``, sync
runs): CPU per turn at most half the baseline's, turns/s at least twice. They are judged
only when the baseline saw a machine of the same speed (its NATS floor p50 within
``MACHINE_DRIFT``, 1.25x, of this run's); otherwise its ratios are shown, its targets are
not judged, and the note names ``bench.loop_split --against`` for both trees in one run.
The exit status is 1 when any judged target is missed.

    python -m bench.loop [--quick] [--sizes 100,5000] [--rounds 10] [--turns 12]
        [--conversations 50] [--total-turns 1000] [--waiting 200] [--no-nosync]
        [--commit-block 25] [--baseline bench/results/loop_baseline_main.json]
        [--out bench/results/loop.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import multiprocessing
import os
import platform
import random
import resource
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import nats
from nats.aio.msg import Msg
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from actline.actors import Client, Node, NodeSettings, TurnHandle
from actline.bus import Bus, EmbeddedNats
from actline.bus.embedded import running_authority
from actline.llm.protocol import Chunk
from actline.messages import (
    GenerateRequest,
    GenerateResult,
    ReActProgress,
    ReActResult,
    Subjects,
    Usage,
    encode,
)
from actline.storage import StorageError, Store
from actline.timeline import Block, Timeline
from actline.timeline.blocks import COMPLETION, REACT_NOTES, TOOL_CALL, TOOL_RESULT, USER_PROMPT
from actline.timeline.paths import ar_path, tc_path
from actline.timeline.snapshot import split
from actline.timeline.tokens import DEFAULT_COUNTER
from actline.tools import KnowledgeSpace
from bench.common import RESULTS, SanityCheckFailed, corpus, percentile, summary_ms, write_result
from bench.storage import sources

KB = Path(__file__).resolve().parents[1] / "examples" / "kb"
SIZES = (100, 5_000)
ROUNDS = 10
TURNS = 12
FLOOR_BLOCK = 200
"""Floor samples taken after every interleaved batch of turns."""
COMMIT_BLOCK = 25
"""Commits of the durable floor sampled per case after every interleaved batch of turns."""
COMMIT_MAP_SIZE = 1 << 30
CONVERSATIONS = 50
TOTAL_TURNS = 1_000
WAITING = 200
QUICK: dict[str, Any] = {
    "sizes": [100, 1_000],
    "rounds": 4,
    "turns": 2,
    "conversations": 8,
    "total_turns": 16,
    "waiting": 20,
    "floor_block": 50,
    "commit_block": 10,
}
CONTEXT_TOKENS = 1_000_000
SEED = 5
AGE_S = 86_400.0
"""The prefilled conversations ended this long ago."""
TURN_TIMEOUT_S = 60.0
NOBODY = "nobody"
QUESTION = "Which plan fits a team of twelve, and how do I move to it?"
TOPICS = ("pricing tiers", "rate limits", "install on linux", "release notes", "sso setup")
TARGET_RATIO = 3.0
TARGET_P50_MS = 5.0
TARGET_DURABLE_RATIO = 2.0
TARGET_CPU_RATIO = 0.5
"""CPU per turn at most this fraction of the baseline's."""
TARGET_TPUT_RATIO = 2.0
"""Turns per second at least this multiple of the baseline's."""
MACHINE_DRIFT = 1.25
"""A baseline whose NATS floor p50 is more than this factor away from this run's was taken
on a machine of another speed: its ratios are shown, its targets not judged."""
FLOOR_MODEL = "bench.loop.floor.model"
FLOOR_CARD = "bench.loop.floor.card"


class LoopCheckFailed(Exception):
    """A part of the benchmark did not behave as the runtime promises: its numbers mean nothing."""

    def __init__(self, part: str, what: str) -> None:
        super().__init__(part, what)
        self.part = part
        self.what = what

    def __str__(self) -> str:
        return f"{self.part}: {self.what}"


def _summary(samples: Sequence[float]) -> dict[str, Any]:
    """``summary_ms`` plus the p99 and the maximum."""
    return {
        **summary_ms(samples),
        "p99_ms": percentile(samples, 0.99) * 1e3,
        "max_ms": max(samples) * 1e3,
    }


def rss_bytes() -> tuple[int, str]:
    """This process's resident memory now (Linux), else its peak, and which it is."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE"), "/proc/self/statm"
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak * (1 if platform.system() == "Darwin" else 1024), "ru_maxrss (peak)"


# -- the instant model ----------------------------------------------------------------------------
def query(round_: int) -> str:
    """The search query of a round: a new one each round of a turn."""
    return f"{TOPICS[round_ % len(TOPICS)]} round {round_}"


@dataclass(frozen=True, slots=True)
class Plan:
    """What a turn's model calls decide: ``rounds`` rounds, or first ``agent.send`` to ``agent``."""

    rounds: int = 3
    agent: str | None = None


class InstantModel:
    """A ``actline.llm.protocol.Model`` that answers each call at once, in one chunk (see the
    docstring)."""

    name = "instant"

    def __init__(self, default: Plan | None = None) -> None:
        self.default = default or Plan()
        self.plans: dict[str, Plan] = {}

    def output(self, request: GenerateRequest) -> str:
        """The raw output of round ``request.round`` of the turn's plan."""
        plan = self.plans.get(request.turn_id, self.default)
        r = request.round
        out = f"<channel:thinking>Round {r}: checking the docs.</channel:thinking>"
        if plan.agent is not None and r == 1:
            params: dict[str, Any] = {"name": plan.agent, "text": "Review the rollout plan."}
            decision: dict[str, Any] = {"action": "call_tools"}
            decision["calls"] = [{"tool": "agent.send", "params": params}]
        elif r < plan.rounds:
            params = {"query": query(r), "top_k": 1}
            decision = {"action": "call_tools"}
            decision["calls"] = [{"tool": "react.search_knowledge", "params": params}]
        else:
            out += '<channel:decision>{"action": "complete"}</channel:decision>'
            out += "<channel:answer>The Team plan; upgrade from the billing page.</channel:answer>"
            return out + "<channel:followup>[]</channel:followup>"
        return out + f"<channel:decision>{json.dumps(decision)}</channel:decision>"

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        text = self.output(request)
        yield text
        yield Usage(model=self.name, output_tokens=DEFAULT_COUNTER.count(text))


# -- the prefilled conversation -------------------------------------------------------------------
def prefill(blocks: int, cid: str, *, end: float, seed: int = SEED) -> Timeline:
    """Whole turns until at least ``blocks`` blocks, all stamped before ``end`` (deterministic)."""
    rng = random.Random(seed)
    text = corpus(seed)

    def words(low: int, high: int) -> str:
        size = rng.randint(low, high)
        start = rng.randrange(0, len(text) - size)
        return text[start : start + size]

    tl = Timeline(cid)
    tl.sources.add_rows(sources())
    ts = end - 10.0 * blocks
    turn = 0
    while len(tl) < blocks:
        turn += 1
        tid = f"t{turn}"
        ts += 10.0
        tl.begin_turn(tid, ts)
        tl.append(
            Block.new(USER_PROMPT, tid, ts, path=ar_path(tid, "user.prompt"), text=words(60, 400))
        )
        for r in range(1, rng.randint(1, 6) + 1):
            call = f"c{r}-1"
            ts += 10.0
            path = ar_path(tid, f"react.notes.{r}")
            tl.append(Block.new(REACT_NOTES, tid, ts, path=path, text=words(40, 200)))
            params = {"query": words(20, 80), "top_k": 1}
            data = {"tool": "react.search_knowledge", "params": params}
            path = tc_path(tid, call, "call")
            tl.append(
                Block.new(
                    TOOL_CALL, tid, ts, path=path, call_id=call, mime="application/json", data=data
                )
            )
            hit = {"path": "ks:pricing/tiers.md", "title": "Tiers", "snippet": words(60, 400)}
            path = tc_path(tid, call, "result")
            tl.append(
                Block.new(
                    TOOL_RESULT,
                    tid,
                    ts,
                    path=path,
                    call_id=call,
                    mime="application/json",
                    data={"status": "ok", "hits": [hit]},
                    meta={"tool": "react.search_knowledge", "ok": True},
                )
            )
        path = ar_path(tid, "assistant.completion")
        tl.append(Block.new(COMPLETION, tid, ts, path=path, text=words(60, 400)))
    return tl


def node_settings(home: Path, node_id: str, sync: bool, **changes: Any) -> NodeSettings:
    """A node that answers at once (no followup grace) with a context the prefill fits in."""
    return NodeSettings(
        home=home,
        node_id=node_id,
        followup_grace_s=0.0,
        storage_sync=sync,
        max_context_tokens=CONTEXT_TOKENS,
    ).with_(**changes)


# -- part 1: rounds on prefilled conversations ---------------------------------------------------
@dataclass
class Case:
    """One size and sync mode: its store, node and client, a conversation per measured turn."""

    blocks: int
    sync: bool
    store: Store
    node: Node
    client: Client
    model: InstantModel
    buses: list[Bus]
    stored: dict[str, int]
    """Conversation id -> blocks prefilled."""
    rounds: list[float] = field(default_factory=list)
    per_round: list[float] = field(default_factory=list)
    turn: list[float] = field(default_factory=list)
    model_leg: list[float] = field(default_factory=list)
    tools_leg: list[float] = field(default_factory=list)
    pickup: list[float] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Blocks of the conversation before and after each measured turn."""
    commit: CommitFloor | None = None
    persisted: list[dict[str, Any]] = field(default_factory=list)
    """What a round of each measured turn persisted (``persisted_bytes``)."""
    store_commits: list[tuple[int, float, int]] = field(default_factory=list)
    """The node's own commits during each measured turn: transactions, seconds, inline."""

    def timeline(self, cid: str) -> Timeline:
        return self.node.conversations[cid].tl

    def round_bytes(self) -> int:
        """The median bytes a round persisted over the measured turns so far."""
        if not self.persisted:
            raise LoopCheckFailed(self.label, "no measured turn to take the round's bytes from")
        return round(statistics.median(int(p["bytes"]) for p in self.persisted))

    @property
    def label(self) -> str:
        return f"{self.blocks}-{'sync' if self.sync else 'nosync'}"

    async def close(self) -> None:
        await self.client.close()
        await self.node.stop()
        for bus in self.buses:
            await bus.close()
        self.store.close()
        if self.commit is not None:
            self.commit.close()


async def open_case(
    url: str,
    root: Path,
    blocks: int,
    sync: bool,
    knowledge: KnowledgeSpace,
    *,
    rounds: int,
    conversations: int,
) -> Case:
    """Prefill the conversations into a store, start a node on it, connect a client."""
    label = f"{blocks}-{'sync' if sync else 'nosync'}"
    home = root / label
    store = Store(home, sync=sync)
    stored = {}
    for k in range(1, conversations + 1):
        tl = prefill(blocks, f"c-loop-{k}", end=time.time() - AGE_S)
        store.persist(tl)
        stored[tl.conversation_id] = len(tl)
    subjects = Subjects(f"bench-loop-{label}")
    node_bus, client_bus = await node_and_client(url, label, subjects)
    model = InstantModel()
    settings = node_settings(home, f"n-{label}", sync, max_iterations=max(15, rounds + 1))
    node = Node(node_bus, settings, model=model, store=store, knowledge=knowledge)
    await node.start()
    client = Client(client_bus)
    case = Case(blocks, sync, store, node, client, model, [client_bus, node_bus], stored)
    case.commit = CommitFloor.open(root / f"commit-{label}", sync)
    return case


async def warm_up(case: Case) -> None:
    """A two-round turn in every conversation: it loads and renders it in full."""
    for cid, stored in case.stored.items():
        await run_turn(case.client, case.model, cid, f"{cid}-warm", 2)
        tl = case.timeline(cid)
        if len(tl) < stored:
            raise SanityCheckFailed(case.blocks, f"{cid}: {len(tl):,} blocks loaded of {stored:,}")
        if tl.latest_summary is not None:
            raise SanityCheckFailed(case.blocks, f"{cid} was compacted")


def _seconds(a: ReActProgress, b: ReActProgress) -> float:
    return (b.ts - a.ts).total_seconds()


async def run_turn(
    client: Client, model: InstantModel, cid: str, tid: str, rounds: int
) -> tuple[TurnHandle, float, float]:
    """Submit one turn of ``rounds`` rounds and wait for its result and its last card.

    Returns the handle, the wall time from submit to result and the pickup time (from
    submit to the ``turn.accepted`` the node stamps when it takes the request).
    """
    model.plans[tid] = Plan(rounds)
    submitted = time.time()
    t0 = time.perf_counter()
    handle = await client.submit(QUESTION, conversation_id=cid, turn_id=tid)
    result = await handle.wait(TURN_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    _check_result(result, rounds, cid)
    await handle.wait_for("complete", timeout=TURN_TIMEOUT_S)
    accepted = handle.accepted
    if accepted is None:
        raise LoopCheckFailed(cid, f"turn {tid} completed without a turn.accepted")
    return handle, elapsed, accepted.ts.timestamp() - submitted


def _check_result(result: ReActResult, rounds: int, where: str) -> None:
    if result.status != "completed" or result.rounds != rounds:
        raise LoopCheckFailed(
            where,
            f"turn {result.turn_id} ended {result.status} after {result.rounds} rounds "
            f"(expected completed after {rounds}): {result.error}",
        )


async def measure_turn(case: Case, cid: str, rounds: int) -> None:
    """One turn in ``cid``; its rounds, legs and wall time go to the case's samples."""
    tid = f"{cid}-measured"
    before = len(case.timeline(cid))
    since = stored_seq(case.store, cid)
    rows_before = packed_rows(case.store, case.timeline(cid), cid)
    commits_before = case.node.stats()["commits"]
    handle, elapsed, pickup = await run_turn(case.client, case.model, cid, tid, rounds)
    commits = case.node.stats()["commits"]
    case.store_commits.append(
        (
            commits["transactions"] - commits_before["transactions"],
            commits["seconds"] - commits_before["seconds"],
            commits["inline"] - commits_before["inline"],
        )
    )
    case.pickup.append(pickup)
    case.spans.append((before, len(case.timeline(cid))))
    since = before if since is None else since
    case.persisted.append(
        persisted_bytes(
            case.store,
            case.timeline(cid),
            cid,
            tid,
            since=since,
            rounds=rounds,
            rows_before=rows_before,
        )
    )
    cards = handle.cards
    thinking = sorted((c for c in cards if c.phase == "thinking"), key=lambda c: c.round)
    if [c.round for c in thinking] != list(range(1, rounds + 1)):
        got = [c.round for c in thinking]
        raise SanityCheckFailed(case.blocks, f"turn {tid}: thinking cards of rounds {got}")
    case.turn.append(elapsed)
    case.per_round.append(elapsed / rounds)
    first = {(c.phase, c.round): c for c in reversed(cards)}
    for a, b in itertools.pairwise(thinking):
        case.rounds.append(_seconds(a, b))
        call, result = first.get(("tool_call", a.round)), first.get(("tool_result", a.round))
        if call is None or result is None:
            raise SanityCheckFailed(case.blocks, f"turn {tid}: round {a.round} has no tool cards")
        case.model_leg.append(_seconds(a, call))
        case.tools_leg.append(_seconds(call, result))


def role(url: str, name: str, subjects: Subjects | None = None) -> str | None:
    """Credentials of role ``name`` on the embedded server at ``url`` (None: it is open)."""
    authority = running_authority(url)
    if authority is None:
        return None
    prefix = (subjects or Subjects()).prefix
    return str(authority.creds_path(name, prefix=prefix))


async def node_and_client(url: str, label: str, subjects: Subjects) -> tuple[Bus, Bus]:
    """A node's and a client's connection under ``subjects``, each with its role's creds."""
    buses = [
        await Bus.connect(
            url,
            name=f"bench-loop-{who}-{label}",
            subject_names=subjects,
            creds=role(url, who, subjects),
        )
        for who in ("node", "client")
    ]
    return buses[0], buses[1]


# -- part 2: the floor ----------------------------------------------------------------------------
@dataclass
class Floor:
    """Raw nats-py: a card published to another connection, a request to a trivial responder."""

    nc: Any
    peer: Any
    card: bytes
    request: bytes
    reply: bytes
    samples: list[float] = field(default_factory=list)

    @classmethod
    async def open(cls, url: str) -> Floor:
        card, request, reply = floor_payloads()
        auth = {"user_credentials": role(url, "admin", Subjects())} if role(url, "admin") else {}
        nc = await nats.connect(url, name="bench-loop-floor", **auth)
        peer = await nats.connect(url, name="bench-loop-floor-peer", **auth)

        async def respond(msg: Msg) -> None:
            await msg.respond(reply)

        async def ignore(msg: Msg) -> None:
            return None

        await nc.subscribe(FLOOR_MODEL, cb=respond)
        await peer.subscribe(FLOOR_CARD, cb=ignore)
        await nc.flush()
        await peer.flush()
        return cls(nc, peer, card, request, reply)

    async def once(self) -> float:
        t0 = time.perf_counter()
        await self.nc.publish(FLOOR_CARD, self.card)
        await self.nc.request(FLOOR_MODEL, self.request, timeout=5)
        return time.perf_counter() - t0

    async def sample(self, n: int, *, record: bool = True) -> None:
        for _ in range(n):
            elapsed = await self.once()
            if record:
                self.samples.append(elapsed)

    async def close(self) -> None:
        await self.nc.close()
        await self.peer.close()


@dataclass
class CommitFloor:
    """The commit of the durable floor: one write transaction putting ``nbytes`` under a new
    key, in an LMDB environment of its own, synced like the case's store."""

    env: Any
    sync: bool
    keys: Iterator[int] = field(default_factory=itertools.count)
    samples: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path, sync: bool) -> CommitFloor:
        path.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(str(path), map_size=COMMIT_MAP_SIZE, sync=sync, metasync=sync)
        return cls(env, sync)

    def sample(self, n: int, nbytes: int, *, record: bool = True) -> None:
        payload = os.urandom(nbytes)
        for _ in range(n):
            key = f"{next(self.keys):012d}".encode()
            t0 = time.perf_counter()
            with self.env.begin(write=True) as txn:
                txn.put(key, payload)
            elapsed = time.perf_counter() - t0
            if record:
                self.samples.append(elapsed)
                self.sizes.append(nbytes)

    def close(self) -> None:
        self.env.close()


_STORE_API_ERRORS = (AttributeError, TypeError, ValueError, LookupError, lmdb.Error, StorageError)
"""What a changed ``Store`` read API may raise here: the helpers below then fall back."""


def _packed(value: Any) -> int:
    return len(msgpack.packb(value, use_bin_type=True, default=str))


def stored_seq(store: Store, cid: str) -> int | None:
    """Where the stored block sequence of ``cid`` ends (``Store.cursor``), or None if unknown."""
    try:
        return int(store.cursor(cid)[1])
    except _STORE_API_ERRORS:
        return None


def packed_rows(store: Store, tl: Timeline, cid: str) -> dict[str, bytes]:
    """Every header row of ``cid`` (sources pool, plans: ``Store.header_rows``), packed.

    From the timeline (its rows as ``Timeline.full_snapshot`` holds them) if the store's
    read API no longer fits.
    """
    try:
        rows: Mapping[str, Any] = store.header_rows(cid)
    except _STORE_API_ERRORS:
        rows = split(tl.full_snapshot())[1]
    return {
        str(key): msgpack.packb(value, use_bin_type=True, default=str)
        for key, value in rows.items()
    }


def changed_rows(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> dict[str, bytes]:
    """The rows of ``after`` that are new or differ from ``before`` (what a turn wrote)."""
    return {key: value for key, value in after.items() if before.get(key) != value}


def persisted_bytes(
    store: Store,
    tl: Timeline,
    cid: str,
    turn_id: str,
    *,
    since: int,
    rounds: int,
    rows_before: Mapping[str, bytes] | None = None,
) -> dict[str, Any]:
    """The bytes a round of turn ``turn_id`` persisted: the msgpack of the block dicts the
    turn appended (seq >= ``since``) and of the header rows it added or changed (against
    ``rows_before``, from ``packed_rows`` before the turn; None: every row counts), each
    over its ``rounds``, plus the header row and the turn record that every round rewrites.

    Read back from the store; if its read API no longer fits, from the node's timeline
    (blocks, snapshot and rows, no turn record) -- ``source`` says which.
    """
    try:
        try:
            stored = list(store.iter_blocks(cid, since))
        except TypeError:
            stored = list(store.iter_blocks(cid))
        blocks = [b for b in stored if int(b["seq"]) >= since]
        header: Any = store.header(cid) or {}
        record: Any = store.turn_record(cid, turn_id) or {}
        source = "store"
    except _STORE_API_ERRORS:
        blocks = [b.to_dict() for b in tl.blocks_since(since)]
        header, record, source = tl.snapshot(), {}, "timeline"
    if not blocks:
        raise LoopCheckFailed(cid, f"turn {turn_id} persisted no blocks above seq {since}")
    block_bytes = sum(_packed(b) for b in blocks)
    per_round = round(block_bytes / max(1, rounds))
    rows = changed_rows(rows_before or {}, packed_rows(store, tl, cid))
    row_bytes = sum(len(value) for value in rows.values())
    rows_per_round = round(row_bytes / max(1, rounds))
    header_bytes, record_bytes = _packed(header), _packed(record)
    return {
        "source": source,
        "turn_blocks": len(blocks),
        "turn_block_bytes": block_bytes,
        "blocks_per_round_bytes": per_round,
        "turn_rows": len(rows),
        "turn_row_bytes": row_bytes,
        "rows_per_round_bytes": rows_per_round,
        "header_bytes": header_bytes,
        "turn_record_bytes": record_bytes,
        "bytes": per_round + rows_per_round + header_bytes + record_bytes,
    }


def floor_payloads() -> tuple[bytes, bytes, bytes]:
    """The loop's encoded card, a small model request and the model reply of a tool round
    (today's main sent a request by reference to the node's own streamer; a node now calls
    its own streamer in process, so this request/reply is a hop the round no longer makes)."""
    cid, tid = "c-loop", "t-loop-1"
    card = ReActProgress(
        conversation_id=cid, turn_id=tid, phase="thinking", round=2, detail="round 2"
    )
    request = GenerateRequest(conversation_id=cid, turn_id=tid, round=2, model="instant-x")
    text = InstantModel().output(request)
    call = text.split("<channel:decision>")[1].split("</channel:decision>")[0]
    reply = GenerateResult(
        conversation_id=cid,
        turn_id=tid,
        round=2,
        channels={"thinking": "Round 2: checking the docs.", "decision": call},
        usage=Usage(model=InstantModel.name, output_tokens=DEFAULT_COUNTER.count(text)),
        seq_end=4,
    )
    return encode(card), encode(request), encode(reply)


# -- part 3: throughput ---------------------------------------------------------------------------
async def throughput(
    url: str,
    root: Path,
    knowledge: KnowledgeSpace,
    conversations: int,
    total: int,
    sync: bool,
    tag: str = "",
) -> dict[str, Any]:
    """``conversations`` workers, each running turns of 2-3 rounds in its own conversation."""
    label = f"tput{tag}-{'sync' if sync else 'nosync'}"
    subjects = Subjects(f"bench-loop-{label}")
    node_bus, client_bus = await node_and_client(url, label, subjects)
    model = InstantModel()
    settings = node_settings(root / label, f"n-{label}", sync)
    node = Node(node_bus, settings, model=model, knowledge=knowledge)
    await node.start()
    client = Client(client_bus)
    latencies: list[float] = []
    rounds_done = 0
    counter = itertools.count()
    try:
        await run_turn(client, model, "c-tput-warm", "t-tput-warm", 2)

        async def worker(c: int) -> None:
            nonlocal rounds_done
            cid = f"c-tput-{c}"
            while (i := next(counter)) < total:
                rounds = 2 + i % 2
                _, elapsed, _ = await run_turn(client, model, cid, f"t-tput-{i}", rounds)
                latencies.append(elapsed)
                rounds_done += rounds

        t0, cpu0 = time.perf_counter(), time.process_time()
        async with asyncio.TaskGroup() as tg:
            for c in range(conversations):
                tg.create_task(worker(c))
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await client.close()
        await node.stop()
        await client_bus.close()
        await node_bus.close()
    if len(latencies) != total:
        raise LoopCheckFailed("throughput", f"{len(latencies)} of {total} turns completed")
    return {
        "sync": sync,
        "conversations": conversations,
        "turns": total,
        "rounds": rounds_done,
        "seconds": seconds,
        "turns_per_s": total / seconds,
        "rounds_per_s": rounds_done / seconds,
        "cpu_ms_per_turn": cpu / total * 1e3,
        "turn": _summary(latencies),
    }


async def auth_cost(
    secured: str,
    open_url: str,
    root: Path,
    knowledge: KnowledgeSpace,
    conversations: int,
    total: int,
) -> dict[str, Any]:
    """Throughput (sync) with authentication (node and client roles) and without, run
    open, authenticated, authenticated, open so that drift hits both alike."""
    runs: dict[str, list[dict[str, Any]]] = {"open": [], "auth": []}
    for i, mode in enumerate(("open", "auth", "auth", "open")):
        url = secured if mode == "auth" else open_url
        runs[mode].append(
            await throughput(url, root, knowledge, conversations, total, True, f"-{mode}{i}")
        )

    def mean(mode: str, key: str) -> float:
        return statistics.fmean(r[key] for r in runs[mode])

    return {
        "turns": total,
        "conversations": conversations,
        "open_turns_per_s": mean("open", "turns_per_s"),
        "auth_turns_per_s": mean("auth", "turns_per_s"),
        "open_cpu_ms_per_turn": mean("open", "cpu_ms_per_turn"),
        "auth_cpu_ms_per_turn": mean("auth", "cpu_ms_per_turn"),
        "turns_per_s_ratio": mean("auth", "turns_per_s") / mean("open", "turns_per_s"),
        "cpu_ratio": mean("auth", "cpu_ms_per_turn") / mean("open", "cpu_ms_per_turn"),
    }


# -- part 4: memory per waiting conversation ------------------------------------------------------
def memory_node(
    url: str, prefix: str, capacity: int, conn: Connection, creds: str | None = None
) -> None:
    """The child process of part 4: a node that reports its resident memory when asked."""
    try:
        asyncio.run(_memory_node(url, prefix, capacity, conn, creds))
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


async def _memory_node(
    url: str, prefix: str, capacity: int, conn: Connection, creds: str | None
) -> None:
    with tempfile.TemporaryDirectory(prefix="actline-bench-loop-memory-") as tmp:
        bus = await Bus.connect(
            url, name="bench-loop-node-memory", subject_names=Subjects(prefix), creds=creds
        )
        settings = node_settings(
            Path(tmp), "n-memory", True, max_active_turns=capacity, wait_timeout_s=3600.0
        )
        model = InstantModel(Plan(2, NOBODY))
        node = Node(bus, settings, model=model, knowledge=KnowledgeSpace(KB))
        await node.start()
        try:
            conn.send(("ready", {}))
            while (command := await asyncio.to_thread(conn.recv)) != "stop":
                gc.collect()
                rss, source = rss_bytes()
                running = sum(1 for c in node.conversations.values() if c.running_turn)
                conn.send((command, {"rss": rss, "source": source, "running": running}))
        finally:
            await node.stop()
            await bus.close()


async def _ask(conn: Connection, command: str | None, timeout: float) -> dict[str, Any]:
    """Send ``command`` (if any) to the node process and wait for its answer to it."""
    if command is not None:
        conn.send(command)
    if not await asyncio.to_thread(conn.poll, timeout):
        raise LoopCheckFailed("memory", f"the node process did not answer {command} in {timeout} s")
    tag, value = conn.recv()
    if tag == "error" or (command is not None and tag != command):
        raise LoopCheckFailed("memory", f"the node process answered {tag}: {value}")
    answer: dict[str, Any] = value
    return answer


async def memory(url: str, count: int) -> dict[str, Any]:
    """Resident memory of a node process per conversation waiting on an outside agent's DONE."""
    warmup = max(2, count // 10)
    prefix = "bench-loop-memory"
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    child = spawn.Process(
        target=memory_node,
        args=(url, prefix, count + warmup + 8, theirs, role(url, "node", Subjects(prefix))),
        daemon=True,
    )
    child.start()
    bus = await Bus.connect(
        url,
        name="bench-loop-client-memory",
        subject_names=Subjects(prefix),
        creds=role(url, "client", Subjects(prefix)),
    )
    client = Client(bus)

    async def batch(tag: str, n: int) -> list[TurnHandle]:
        handles = []
        for i in range(n):
            cid = f"c-wait-{tag}-{i}"
            handles.append(await client.submit(QUESTION, conversation_id=cid, turn_id=f"{cid}-t"))
        await asyncio.gather(*(h.wait_for("waiting", timeout=TURN_TIMEOUT_S) for h in handles))
        return handles

    async def cancel(handles: list[TurnHandle]) -> list[str]:
        for handle in handles:
            await client.cancel(handle.turn_id, "benchmark over")
        results = await asyncio.gather(*(h.wait(TURN_TIMEOUT_S) for h in handles))
        return [r.status for r in results]

    try:
        await _ask(ours, None, 4 * TURN_TIMEOUT_S)
        warm = await cancel(await batch("warm", warmup))
        before = await _ask(ours, "before", TURN_TIMEOUT_S)
        handles = await batch("k", count)
        after = await _ask(ours, "after", TURN_TIMEOUT_S)
        statuses = await cancel(handles)
    finally:
        with contextlib.suppress(OSError):
            ours.send("stop")
        await client.close()
        await bus.close()
        await asyncio.to_thread(child.join, 30)
        if child.is_alive():
            child.terminate()
    if after["running"] != count:
        raise LoopCheckFailed("memory", f"{after['running']} turns running, expected {count}")
    if set(warm) != {"cancelled"} or set(statuses) != {"cancelled"}:
        ended = sorted(set(warm) | set(statuses))
        raise LoopCheckFailed("memory", f"the cancelled turns ended {ended}")
    return {
        "waiting": count,
        "warmup": warmup,
        "rss_before_bytes": before["rss"],
        "rss_after_bytes": after["rss"],
        "per_conversation_bytes": (after["rss"] - before["rss"]) / count,
        "rss_source": after["source"],
        "cancelled": len(statuses),
    }


# -- the run --------------------------------------------------------------------------------------
def tool_cost(knowledge: KnowledgeSpace, rounds: int, samples: int = 200) -> dict[str, Any]:
    """The in-process cost of the tool the instant model calls (part of every round)."""
    queries = [query(r) for r in range(1, rounds)]
    times = []
    for i in range(samples):
        t0 = time.perf_counter()
        knowledge.search(queries[i % len(queries)], 1)
        times.append(time.perf_counter() - t0)
    return {"tool": "react.search_knowledge", "top_k": 1, "search": _summary(times)}


def _case_row(case: Case, floor: dict[str, Any]) -> dict[str, Any]:
    round_ = _summary(case.rounds)
    return {
        "blocks": case.blocks,
        "sync": case.sync,
        "conversations": len(case.stored),
        "stored_blocks": min(case.stored.values()),
        "blocks_before": min(before for before, _ in case.spans),
        "blocks_after": max(after for _, after in case.spans),
        "turns": len(case.turn),
        "round": round_,
        "turn_per_round": _summary(case.per_round),
        "turn": _summary(case.turn),
        "model_leg": _summary(case.model_leg),
        "tools_leg": _summary(case.tools_leg),
        "pickup": _summary(case.pickup),
        "ratio_p50": round_["p50_ms"] / floor["p50_ms"],
        "ratio_p99": round_["p99_ms"] / floor["p99_ms"],
        **_durable_figures(case, floor, round_),
    }


def _durable_figures(case: Case, floor: dict[str, Any], round_: dict[str, Any]) -> dict[str, Any]:
    """The round against the durable floor: the NATS floor plus the commit of its bytes."""
    if case.commit is None or not case.commit.samples:
        raise LoopCheckFailed(case.label, "no commit of the durable floor was sampled")
    persisted = {
        key: round(statistics.median(p[key] for p in case.persisted))
        for key in (
            "turn_blocks",
            "turn_block_bytes",
            "blocks_per_round_bytes",
            "turn_rows",
            "turn_row_bytes",
            "rows_per_round_bytes",
            "header_bytes",
            "turn_record_bytes",
            "bytes",
        )
    }
    persisted["source"] = ",".join(sorted({p["source"] for p in case.persisted}))
    persisted["turns"] = len(case.persisted)
    commit = _summary(case.commit.samples)
    durable = {q: floor[q] + commit[q] for q in ("p50_ms", "p90_ms", "mean_ms")}
    return {
        "persisted": persisted,
        "commit": {
            **commit,
            "sync": case.commit.sync,
            "bytes": round(statistics.median(case.commit.sizes)),
        },
        "durable_floor": durable,
        "ratio_nats_p50": round_["p50_ms"] / floor["p50_ms"],
        "ratio_durable_p50": round_["p50_ms"] / durable["p50_ms"],
        "ratio_durable_p90": round_["p90_ms"] / durable["p90_ms"],
        "store_commit": store_commit(case, commit, round_, durable),
    }


def store_commit(
    case: Case, commit: dict[str, Any], round_: dict[str, Any], durable: dict[str, Any]
) -> dict[str, Any]:
    """The node's own commits over the measured turns, beside the floor's commit.

    One conversation runs at a time here, so each commit runs on the event loop and the
    round waits for it whole: ``round_less_commit_p50_ms`` (the round p50 less the mean
    commit) is what the round's own work costs, and its ratio to the durable floor says how
    far the round would be from it with a commit that cost nothing. None when some commit
    ran on the writer thread (then it overlapped other work and cannot be subtracted)."""
    transactions = sum(n for n, _, _ in case.store_commits)
    if transactions == 0:
        raise LoopCheckFailed(case.label, "the node committed nothing over the measured turns")
    seconds = sum(s for _, s, _ in case.store_commits)
    inline = sum(i for _, _, i in case.store_commits)
    mean_ms = seconds / transactions * 1e3
    less = round_["p50_ms"] - mean_ms if inline == transactions else None
    return {
        "transactions": transactions,
        "per_turn": transactions / len(case.store_commits),
        "inline": inline,
        "mean_ms": mean_ms,
        "vs_floor_commit": mean_ms / commit["mean_ms"],
        "round_less_commit_p50_ms": less,
        "ratio_durable_less_commit": None if less is None else less / durable["p50_ms"],
    }


async def per_round(
    url: str,
    root: Path,
    knowledge: KnowledgeSpace,
    sizes: Sequence[int],
    modes: Sequence[bool],
    *,
    rounds: int,
    turns: int,
    floor_block: int,
    commit_block: int = COMMIT_BLOCK,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Parts 1 and 2: the floor's summary and a row per case, measured interleaved."""
    cases: list[Case] = []
    floor = await Floor.open(url)
    try:
        with Progress(transient=True) as progress:
            task = progress.add_task("prefilling and warming up", total=len(sizes) * len(modes))
            for blocks in sizes:
                for sync in modes:
                    cases.append(
                        await open_case(
                            url, root, blocks, sync, knowledge, rounds=rounds, conversations=turns
                        )
                    )
                    await warm_up(cases[-1])
                    progress.advance(task)
            await floor.sample(floor_block, record=False)
            task = progress.add_task("turns, interleaved", total=turns)
            for i in range(1, turns + 1):
                for case in cases if i % 2 else cases[::-1]:
                    await measure_turn(case, f"c-loop-{i}", rounds)
                await floor.sample(floor_block)
                for case in cases:
                    if case.commit is None:
                        continue
                    if i == 1:
                        case.commit.sample(commit_block, case.round_bytes(), record=False)
                    case.commit.sample(commit_block, case.round_bytes())
                progress.advance(task)
    finally:
        for case in cases:
            await case.close()
        await floor.close()
    sizes_bytes = {
        "card": len(floor.card),
        "request": len(floor.request),
        "reply": len(floor.reply),
    }
    floor_row = {**_summary(floor.samples), "payload_bytes": sizes_bytes}
    return floor_row, [_case_row(case, floor_row) for case in cases]


def check_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round p50 against the floor at every size, and in milliseconds at the largest (sync)."""
    synced = [row for row in rows if row["sync"]]
    targets = [
        {
            "blocks": r["blocks"],
            "figure": "ratio_p50",
            "maximum": TARGET_RATIO,
            "value": r["ratio_p50"],
        }
        for r in synced
    ]
    top = max(synced, key=lambda r: r["blocks"])
    targets.append(
        {
            "blocks": top["blocks"],
            "figure": "round_p50_ms",
            "maximum": TARGET_P50_MS,
            "value": top["round"]["p50_ms"],
        }
    )
    return _judged(targets)


def _judged(targets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target with ``met``: its value at most its ``maximum``, or at least its ``minimum``."""
    for target in targets:
        if "maximum" in target:
            target["met"] = target["value"] <= target["maximum"]
        else:
            target["met"] = target["value"] >= target["minimum"]
    return targets


def check_floor_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round p50 against the durable floor (NATS floor + synced commit) at every size (sync)."""
    return _judged(
        [
            {
                "blocks": r["blocks"],
                "figure": "ratio_durable_p50",
                "maximum": TARGET_DURABLE_RATIO,
                "value": r["ratio_durable_p50"],
            }
            for r in rows
            if r["sync"]
        ]
    )


def _ratio(today: float | None, before: float | None) -> float | None:
    return None if today is None or not before else today / before


def _get(row: dict[str, Any] | None, *keys: str) -> Any:
    """``row[k1][k2]...``, or None where a key is missing (an older JSON)."""
    value: Any = row
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def compare(result: dict[str, Any], baseline: dict[str, Any], path: str) -> dict[str, Any]:
    """This run beside an earlier run's JSON: round p50 per case, throughput and CPU per turn.

    Cases match on size and sync mode; throughput runs on sync mode and conversations (else
    sync mode alone, noted in ``baseline_conversations``). Targets on the sync throughput:
    CPU per turn at most ``TARGET_CPU_RATIO`` of the baseline's, turns/s at least
    ``TARGET_TPUT_RATIO`` times. They are judged only when both runs saw a machine of the
    same speed (``comparable``: their NATS floor p50s within ``MACHINE_DRIFT`` of each
    other); otherwise each target's ``met`` is None and ``speed`` says why.
    """
    floor, baseline_floor = _get(result, "floor", "p50_ms"), _get(baseline, "floor", "p50_ms")
    speed = _ratio(floor, baseline_floor)
    comparable = speed is not None and 1 / MACHINE_DRIFT <= speed <= MACHINE_DRIFT
    rounds = []
    for row in result["cases"]:
        old = next(
            (
                b
                for b in baseline.get("cases", [])
                if b.get("blocks") == row["blocks"] and b.get("sync") == row["sync"]
            ),
            None,
        )
        if old is None:
            continue
        today, before = row["round"]["p50_ms"], _get(old, "round", "p50_ms")
        rounds.append(
            {
                "blocks": row["blocks"],
                "sync": row["sync"],
                "round_p50_ms": today,
                "baseline_round_p50_ms": before,
                "ratio": _ratio(today, before),
                "ratio_durable_p50": row.get("ratio_durable_p50"),
                "baseline_ratio_durable_p50": old.get("ratio_durable_p50"),
            }
        )
    tput = []
    targets: list[dict[str, Any]] = []
    olds = baseline.get("throughput", [])
    for run in result["throughput"]:
        same_mode = [b for b in olds if b.get("sync") == run["sync"]]
        old = next(
            (b for b in same_mode if b.get("conversations") == run["conversations"]),
            same_mode[0] if same_mode else None,
        )
        if old is None:
            continue
        figures = {
            "sync": run["sync"],
            "conversations": run["conversations"],
            "baseline_conversations": old.get("conversations"),
        }
        for key in ("turns_per_s", "cpu_ms_per_turn"):
            figures[key] = run[key]
            figures[f"baseline_{key}"] = old.get(key)
            figures[f"{key}_ratio"] = _ratio(run[key], old.get(key))
        tput.append(figures)
        if not run["sync"]:
            continue
        for key, bound, limit in (
            ("cpu_ms_per_turn", "maximum", TARGET_CPU_RATIO),
            ("turns_per_s", "minimum", TARGET_TPUT_RATIO),
        ):
            value = figures[f"{key}_ratio"]
            if value is not None:
                targets.append(
                    {
                        "conversations": run["conversations"],
                        "figure": f"{key}_ratio",
                        bound: limit,
                        "value": value,
                    }
                )
    if comparable:
        targets = _judged(targets)
    else:
        for target in targets:
            target["met"] = None
    return {
        "path": path,
        "floor_p50_ms": floor,
        "baseline_floor_p50_ms": baseline_floor,
        "speed": speed,
        "comparable": comparable,
        "rounds": rounds,
        "throughput": tput,
        "targets": targets,
    }


async def run_async(
    sizes: Sequence[int],
    rounds: int,
    turns: int,
    conversations: int,
    total_turns: int,
    waiting: int,
    *,
    floor_block: int = FLOOR_BLOCK,
    commit_block: int = COMMIT_BLOCK,
    nosync: bool = True,
) -> dict[str, Any]:
    """Every part on one embedded nats-server (see the module docstring)."""
    started = time.perf_counter()
    sizes = sorted(set(sizes))
    rounds = max(2, rounds)
    modes = (True, False) if nosync else (True,)
    knowledge = KnowledgeSpace(KB)
    with tempfile.TemporaryDirectory(prefix="actline-bench-loop-") as tmp:
        root = Path(tmp)
        async with EmbeddedNats() as server, EmbeddedNats(insecure=True) as open_server:
            floor, rows = await per_round(
                server.url,
                root,
                knowledge,
                sizes,
                modes,
                rounds=rounds,
                turns=turns,
                floor_block=floor_block,
                commit_block=commit_block,
            )
            with Progress(transient=True) as progress:
                progress.add_task("throughput, then memory", total=None)
                tput = [
                    await throughput(server.url, root, knowledge, conversations, total_turns, sync)
                    for sync in modes
                ]
                mem = await memory(server.url, waiting)
                auth = await auth_cost(
                    server.url, open_server.url, root, knowledge, conversations, total_turns
                )
    targets = check_targets(rows)
    floor_targets = check_floor_targets(rows)
    return {
        "benchmark": "loop.round_overhead",
        "model": InstantModel.name,
        "rounds": rounds,
        "turns": turns,
        "context_tokens": CONTEXT_TOKENS,
        "tool": tool_cost(knowledge, rounds),
        "floor": floor,
        "cases": rows,
        "throughput": tput,
        "auth": auth,
        "memory": mem,
        "targets": targets,
        "targets_met": all(t["met"] for t in targets),
        "floor_targets": floor_targets,
        "floor_targets_met": all(t["met"] for t in floor_targets),
        "commit_block": commit_block,
        "seconds": time.perf_counter() - started,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def run(**kwargs: Any) -> dict[str, Any]:
    """``run_async`` in a fresh event loop."""
    return asyncio.run(run_async(**kwargs))


# -- report ---------------------------------------------------------------------------------------
def _ms(value: float) -> str:
    return (
        f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms" if value >= 1 else f"{value:.3f} ms"
    )


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _met(met: bool | None) -> str:
    if met is None:
        return "[yellow]not judged[/]"
    return "[green]met[/]" if met else "[red]missed[/]"


def not_comparable(comparison: dict[str, Any]) -> str:
    """Why the baseline's targets were not judged, and what to run instead."""
    before, now = comparison["baseline_floor_p50_ms"], comparison["floor_p50_ms"]
    how = (
        "records no NATS floor"
        if comparison["speed"] is None
        else f"measured a NATS floor p50 of {before:.3f} ms against {now:.3f} ms in this run"
    )
    return (
        f"[yellow]the baseline {comparison['path']} {how}: it was taken on a machine of "
        f"another speed (more than {MACHINE_DRIFT:g}x apart), so its ratios are shown but its "
        "targets are not judged.[/] For figures of both trees in one run: python -m "
        "bench.loop_split --against DIR (DIR: the other tree, e.g. from git archive)"
    )


def _mode(sync: bool) -> str:
    return "sync" if sync else "no sync"


def _verdict(result: dict[str, Any], row: dict[str, Any]) -> str:
    if not row["sync"]:
        return ""
    mine = [t for t in result["targets"] if t["blocks"] == row["blocks"]]
    mine += [t for t in result.get("floor_targets", []) if t["blocks"] == row["blocks"]]
    parts = []
    for target in mine:
        what = {
            "ratio_p50": f"≤{TARGET_RATIO:.0f}x NATS",
            "ratio_durable_p50": f"≤{TARGET_DURABLE_RATIO:.0f}x durable",
        }.get(target["figure"], f"<{target['maximum']:.0f} ms")
        parts.append(f"{what} {_met(target['met'])}")
    return ", ".join(parts)


def table(result: dict[str, Any]) -> Table:
    floor = result["floor"]
    out = Table(
        title=(
            f"decision loop with an instant model: {result['turns']} turns of "
            f"{result['rounds']} rounds per case"
        ),
        caption=(
            "round: between consecutive thinking cards (node timestamps); model leg: thinking "
            "to tool_call card (checkpoint, render, model call, decision); tools leg: tool_call "
            "to tool_result (blocks appended, react.search_knowledge run); NATS floor: nats-py "
            "publish + request/reply, no actline code; commit: one LMDB write txn of the bytes a "
            "round persists (blocks/round + rows/round + header + turn record), synced like the "
            "case; durable floor: NATS floor + commit; targets on the sync rows"
        ),
    )
    for column in ("measure", "p50", "p90", "p99", "x NATS", "x durable", "detail", "verdict"):
        left = column in ("measure", "detail", "verdict")
        out.add_column(column, justify="left" if left else "right")
    for row in result["cases"]:
        r = row["round"]
        out.add_row(
            f"round, {row['blocks_before']:,} blocks, {_mode(row['sync'])}",
            _ms(r["p50_ms"]),
            _ms(r["p90_ms"]),
            _ms(r["p99_ms"]),
            _x(row["ratio_p50"]),
            _x(row.get("ratio_durable_p50")),
            f"model {_ms(row['model_leg']['p50_ms'])}, tools {_ms(row['tools_leg']['p50_ms'])}; "
            f"pickup p50 {_ms(row['pickup']['p50_ms'])}; n={r['n']}",
            _verdict(result, row),
        )
    out.add_section()
    sizes = floor["payload_bytes"]
    out.add_row(
        "NATS floor (nats-py)",
        _ms(floor["p50_ms"]),
        _ms(floor["p90_ms"]),
        _ms(floor["p99_ms"]),
        "1.00x",
        "",
        f"publish {sizes['card']} B + request {sizes['request']} B / reply {sizes['reply']} B; "
        f"n={floor['n']}",
    )
    for row in result["cases"]:
        commit, persisted, durable = row["commit"], row["persisted"], row["durable_floor"]
        out.add_row(
            f"commit, {row['blocks']:,} blocks, {_mode(commit['sync'])}",
            _ms(commit["p50_ms"]),
            _ms(commit["p90_ms"]),
            _ms(commit["p99_ms"]),
            "",
            "",
            f"{commit['bytes']:,} B = blocks {persisted['blocks_per_round_bytes']:,} + rows "
            f"{persisted['rows_per_round_bytes']:,} + header {persisted['header_bytes']:,} + "
            f"turn record {persisted['turn_record_bytes']:,}; "
            f"durable floor p50 {_ms(durable['p50_ms'])} p90 {_ms(durable['p90_ms'])}; "
            f"n={commit['n']}",
        )
    for row in result["cases"]:
        own = row["store_commit"]
        less = own["round_less_commit_p50_ms"]
        rest = (
            "some on the writer thread: not subtracted"
            if less is None
            else f"round p50 less it: {_ms(less)}, {_x(own['ratio_durable_less_commit'])} "
            "the durable floor"
        )
        out.add_row(
            f"node's own commit, {row['blocks']:,} blocks, {_mode(row['sync'])}",
            "",
            "",
            "",
            "",
            "",
            f"mean {_ms(own['mean_ms'])} ({_x(own['vs_floor_commit'])} the floor's commit), "
            f"{own['per_turn']:.1f} per turn, {own['inline']}/{own['transactions']} on the event "
            f"loop; {rest}",
        )
    search = result["tool"]["search"]
    out.add_row(
        "tool alone (in process)",
        _ms(search["p50_ms"]),
        _ms(search["p90_ms"]),
        _ms(search["p99_ms"]),
        "",
        "",
        "KnowledgeSpace.search(query, 1) over examples/kb",
    )
    out.add_section()
    for tput in result["throughput"]:
        turn = tput["turn"]
        out.add_row(
            f"throughput, {tput['conversations']} conversations, {_mode(tput['sync'])}",
            _ms(turn["p50_ms"]),
            _ms(turn["p90_ms"]),
            _ms(turn["p99_ms"]),
            "",
            "",
            f"{tput['turns_per_s']:.0f} turns/s, {tput['rounds_per_s']:.0f} rounds/s, "
            f"{tput['cpu_ms_per_turn']:.1f} ms CPU/turn ({tput['turns']} turns in "
            f"{tput['seconds']:.1f} s; p50-p99: turn latency)",
        )
    auth = result["auth"]
    out.add_row(
        "authentication: throughput authenticated / open",
        "",
        "",
        "",
        "",
        "",
        f"{auth['turns_per_s_ratio']:.2f}x turns/s ({auth['auth_turns_per_s']:.0f} vs "
        f"{auth['open_turns_per_s']:.0f}), {auth['cpu_ratio']:.2f}x CPU/turn; sync, "
        f"{auth['turns']} turns each run, open/auth/auth/open",
    )
    mem = result["memory"]
    growth = mem["rss_after_bytes"] - mem["rss_before_bytes"]
    out.add_row(
        "memory per waiting conversation",
        "",
        "",
        "",
        "",
        "",
        f"{mem['per_conversation_bytes'] / 1024:.1f} KB ({mem['waiting']} waiting on a DONE; "
        f"RSS +{growth / 1e6:.1f} MB, {mem['rss_source']})",
    )
    return out


def baseline_table(comparison: dict[str, Any]) -> Table:
    """This run beside the baseline's JSON (``compare``)."""
    out = Table(
        title=f"this run vs baseline {comparison['path']}",
        caption=(
            f"targets on the sync throughput: CPU/turn ≤{TARGET_CPU_RATIO:g}x the baseline's, "
            f"turns/s ≥{TARGET_TPUT_RATIO:g}x"
        ),
    )
    for column in ("measure", "this run", "baseline", "ratio", "verdict"):
        out.add_column(column, justify="left" if column in ("measure", "verdict") else "right")
    for row in comparison["rounds"]:
        before = row["baseline_round_p50_ms"]
        out.add_row(
            f"round p50, {row['blocks']:,} blocks, {_mode(row['sync'])}",
            _ms(row["round_p50_ms"]),
            "" if before is None else _ms(before),
            _x(row["ratio"]),
            "",
        )
    targets = {(t["conversations"], t["figure"]): t for t in comparison["targets"]}
    for run in comparison["throughput"]:
        where = f"{run['conversations']} conversations, {_mode(run['sync'])}"
        if run["baseline_conversations"] != run["conversations"]:
            where += f" (baseline: {run['baseline_conversations']})"
        for key, label, fmt in (
            ("turns_per_s", "turns/s", "{:.0f}"),
            ("cpu_ms_per_turn", "CPU ms/turn", "{:.2f}"),
        ):
            before = run[f"baseline_{key}"]
            target = targets.get((run["conversations"], f"{key}_ratio")) if run["sync"] else None
            out.add_row(
                f"{label}, {where}",
                fmt.format(run[key]),
                "" if before is None else fmt.format(before),
                _x(run[f"{key}_ratio"]),
                "" if target is None else _met(target["met"]),
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loop", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small counts (the smoke test)")
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x.strip()],
        default=None,
        help="prefilled blocks, comma-separated",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds per measured turn")
    parser.add_argument("--turns", type=int, default=None, help="measured turns per case")
    parser.add_argument("--conversations", type=int, default=None, help="throughput: at once")
    parser.add_argument("--total-turns", type=int, default=None, help="throughput: turns in all")
    parser.add_argument("--waiting", type=int, default=None, help="memory: waiting turns")
    parser.add_argument("--floor-block", type=int, default=None, help="floor samples per batch")
    parser.add_argument(
        "--commit-block", type=int, default=None, help="durable floor: commits per case per batch"
    )
    parser.add_argument("--no-nosync", action="store_true", help="skip the storage_sync=False runs")
    parser.add_argument(
        "--baseline", type=Path, default=None, help="an earlier run's JSON to report beside"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "loop.json")
    args = parser.parse_args(argv)
    defaults: dict[str, Any] = {
        "sizes": list(SIZES),
        "rounds": ROUNDS,
        "turns": TURNS,
        "conversations": CONVERSATIONS,
        "total_turns": TOTAL_TURNS,
        "waiting": WAITING,
        "floor_block": FLOOR_BLOCK,
        "commit_block": COMMIT_BLOCK,
    }
    if args.quick:
        defaults.update(QUICK)
    options = {k: v if getattr(args, k) is None else getattr(args, k) for k, v in defaults.items()}
    console = Console()
    baseline = None
    if args.baseline is not None:
        try:
            baseline = json.loads(args.baseline.read_text())
        except (OSError, ValueError) as exc:
            console.print(f"[red]cannot read the baseline {args.baseline}:[/] {exc}")
            return 2
        if not isinstance(baseline, dict):
            kind = type(baseline).__name__
            console.print(
                f"[red]the baseline {args.baseline} holds a JSON {kind}, not a bench.loop "
                "result (an object):[/] pass a file this benchmark wrote with --out"
            )
            return 2
    try:
        result = run(**options, nosync=not args.no_nosync)
    except (SanityCheckFailed, LoopCheckFailed) as exc:
        console.print(f"[red]sanity check failed:[/] {exc}")
        return 1
    result["quick"] = args.quick
    console.print(table(result))
    met = result["targets_met"] and result["floor_targets_met"]
    if baseline is not None:
        result["baseline"] = compare(result, baseline, str(args.baseline))
        console.print(baseline_table(result["baseline"]))
        if result["baseline"]["comparable"]:
            met = met and all(t["met"] for t in result["baseline"]["targets"])
        else:
            console.print(not_comparable(result["baseline"]))
    console.print(
        f"{result['seconds']:.1f} s in all; every turn completed with its rounds, every waiting "
        "turn was cancelled"
    )
    write_result(console, args.out, result)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
