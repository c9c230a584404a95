"""Parts 1 and 2 of the loop benchmark, interleaved: rounds on prefilled conversations beside
the floors.

A ``Case`` is one size and sync mode: its store (the prefilled conversations, one per
measured turn), node, client and the floor of its commits. ``per_round`` warms every case
up, then runs the measured turns interleaved across the cases, sampling the floors after
every batch; each case becomes a row of round, legs and pickup summaries against the NATS
floor and the durable floor (``case_row``).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import Progress

from actline.actors import Client, Node, TurnHandle
from actline.bus import Bus
from actline.messages import (
    ReActProgress,
    ReActResult,
    Subjects,
)
from actline.storage import Store
from actline.timeline import Timeline
from actline.tools import KnowledgeSpace
from bench.harness import SanityCheckFailed, judge
from bench.loop.floor import CommitFloor, Floor, packed_rows, persisted_bytes, stored_seq
from bench.loop.model import (
    AGE_S,
    QUESTION,
    TURN_TIMEOUT_S,
    InstantModel,
    LoopCheckFailed,
    Plan,
    node_and_client,
    node_settings,
    prefill,
    tail_summary,
)

NO_EDITS = {"profile": {"extends": "balanced", "context_policy": "append"}}
"""The turns' profile: compaction is not measured here, and under the ``cost`` context policy
a turn boundary of a conversation of thousands of blocks would compact it for cost."""

TARGET_RATIO = 3.0
TARGET_P50_MS = 5.0
TARGET_DURABLE_RATIO = 2.0
COMMIT_BLOCK = 25
"""Commits of the durable floor sampled per case after every interleaved batch of turns."""


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
    handle = await client.submit(QUESTION, conversation_id=cid, turn_id=tid, config=NO_EDITS)
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


def _case_row(case: Case, floor: dict[str, Any]) -> dict[str, Any]:
    round_ = tail_summary(case.rounds)
    return {
        "blocks": case.blocks,
        "sync": case.sync,
        "conversations": len(case.stored),
        "stored_blocks": min(case.stored.values()),
        "blocks_before": min(before for before, _ in case.spans),
        "blocks_after": max(after for _, after in case.spans),
        "turns": len(case.turn),
        "round": round_,
        "turn_per_round": tail_summary(case.per_round),
        "turn": tail_summary(case.turn),
        "model_leg": tail_summary(case.model_leg),
        "tools_leg": tail_summary(case.tools_leg),
        "pickup": tail_summary(case.pickup),
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
    commit = tail_summary(case.commit.samples)
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
    floor_row = {**tail_summary(floor.samples), "payload_bytes": sizes_bytes}
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
    return judge(targets)


def check_floor_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round p50 against the durable floor (NATS floor + synced commit) at every size (sync)."""
    return judge(
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
