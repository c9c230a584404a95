"""A batch of multi-turn conversations on in-process nodes, for the NATS failover tests: the
same batch as the kill loop's (``tests.actors.killloop.plan_batch``, the offline extractive
model over ``examples/kb``), served by ``harness.start`` nodes on a fresh subject prefix,
watched by the kill loop's ``Observer`` and read back into its ``RunRecord`` (so that
``killreport.compare`` holds a faulted run against one without the fault).

    async with Batch(cluster.url, tmp_path / "run", plans, nodes=2) as batch:
        await batch.submit()                    # every conversation, each at its pacing
        await batch.answered(n)                 # n results are in (the fault's moment)
        ...                                     # kill a nats-server, a node, ...
        record = await batch.record()           # all answered, queue drained, durable copy
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actline.actors import Node
from actline.actors.client.client import Client
from actline.actors.client.results import ResultLog
from actline.bus import Bus, BusError, NoQuorum
from actline.messages import Subjects, TurnRequest, new_id
from tests.actors.killloop import (
    ConversationPlan,
    Observer,
    RunRecord,
    TurnTrace,
    _stored,
    paced,
    read_durable,
)
from tests.cluster.harness import start
from tests.waiting import until


class Batch:
    """``nodes`` in-process nodes (``n1``..), cluster mode unless ``cluster=False``, and a
    client connection that submits and watches the batch; all on ``url``."""

    def __init__(
        self,
        url: str,
        workdir: Path,
        plans: Sequence[ConversationPlan],
        *,
        nodes: int = 2,
        cluster: bool = True,
        **settings: Any,
    ) -> None:
        self.url = url
        self.workdir = workdir
        self.plans = list(plans)
        self.subjects = Subjects(f"fo{new_id().lower()}")
        self.count = nodes
        self.cluster = cluster
        self.settings = settings
        self.nodes: list[Node] = []
        self._began = 0.0
        self._submitters: list[asyncio.Task[None]] = []
        self.refused = 0
        """Submits refused with ``NoQuorum`` (the NATS cluster without quorum) and made
        again."""
        self.submit_errors: list[str] = []
        """Submits that failed otherwise (the batch cannot finish: said by its stall)."""

    async def __aenter__(self) -> Batch:
        self.bus = await Bus.connect(self.url, subject_names=self.subjects, name="failover")
        self.observer = Observer(self.bus, self.plans)
        self.client = Client(self.bus)
        self.result_log = ResultLog.bind(self.bus)
        await self.observer.start()
        for i in range(self.count):
            self.nodes.append(await self.start_node(f"n{i + 1}"))
        return self

    async def start_node(self, node_id: str) -> Node:
        """A node of this batch (its own home under the workdir)."""
        return await start(
            self.url,
            self.workdir,
            node_id,
            subject_names=self.subjects,
            cluster=self.cluster,
            **self.settings,
        )

    async def __aexit__(self, *exc: object) -> None:
        for task in self._submitters:
            task.cancel()
        await asyncio.gather(*self._submitters, return_exceptions=True)
        for node in self.nodes:
            with contextlib.suppress(Exception):
                await node.stop()
            with contextlib.suppress(Exception):
                await node.bus.close()
        await self.observer.close()
        await self.client.close()
        await self.bus.close()

    # -- the batch ---------------------------------------------------------------------------
    async def submit(self) -> None:
        """Start submitting every conversation (each at its pacing); returns at once."""
        self._began = time.monotonic()
        for conv in self.plans:
            self._submitters.append(asyncio.create_task(self._submit(conv)))

    async def _submit(self, conv: ConversationPlan) -> None:
        previous: TurnTrace | None = None
        for turn in conv.turns:
            await paced(conv, previous)
            trace = self.observer.traces[turn.turn_id]
            trace.submitted_at = time.monotonic()
            request = TurnRequest(
                conversation_id=turn.conversation_id, turn_id=turn.turn_id, text=turn.text
            )
            while True:
                try:
                    await self.client.submit_request(request)
                    break
                except NoQuorum:  # not stored: submitted again, as its message says
                    self.refused += 1
                except BaseException as exc:
                    self.submit_errors.append(f"{turn.turn_id}: {type(exc).__name__}: {exc}")
                    raise
            previous = trace

    def results(self) -> int:
        """Turns answered so far."""
        return sum(1 for t in self.observer.traces.values() if t.results)

    async def _caught_up(self) -> bool:
        """Every turn answered. A result published while the watching connection was
        reconnecting (its server killed) reached no subscription: read it from the results
        stream, as ``actline.actors.client.client.Client`` does after a reconnect."""
        for trace in self.observer.unanswered():
            if not trace.accepted:
                continue
            try:
                stored = await self.result_log.get(trace.plan.turn_id)
            except BusError:
                return False  # the results stream is electing a leader: next poll
            if stored is not None and not trace.results:
                trace.results.append((time.monotonic(), stored))
                trace.answered.set()
        return not self.observer.unanswered()

    async def describe_stall(self) -> str:
        """What a batch that did not finish waits on: its unanswered turns and the queue."""
        js = self.bus.nc.jetstream()
        lines = [
            f"{t.plan.turn_id}: submitted={t.submitted_at is not None} accepted={t.accepted}"
            for t in self.observer.unanswered()
        ]
        with contextlib.suppress(Exception):
            info = await js.consumer_info(self.subjects.turn_stream, self.subjects.turn_consumer)
            lines.append(
                f"turn consumer: pending {info.num_pending}, ack pending {info.num_ack_pending}, "
                f"redelivered {info.num_redelivered}, waiting {info.num_waiting}"
            )
        for task in self._submitters:
            if task.done() and not task.cancelled() and task.exception() is not None:
                lines.append(f"a submission failed: {task.exception()!r}")
        for node in self.nodes:
            lines.append(
                f"{node.node_id}: taken {node.turns_taken}, settled {node.turns_settled}, "
                f"active {node.queue.active}, conversations {sorted(node.conversations)}"
            )
        return "the batch did not finish:\n" + "\n".join(lines)

    def resumed_after(self, moment: float) -> float:
        """Seconds from ``moment`` (monotonic, a fault's) to the first result of a turn
        accepted after it: when the batch resumed (inf: none yet)."""
        times = [
            t.results[0][0]
            for t in self.observer.traces.values()
            if t.results and t.accepted and t.accepted[-1][0] > moment
        ]
        return min(times, default=float("inf")) - moment

    async def answered(self, count: int, timeout: float = 60.0) -> None:
        """Wait until ``count`` turns are answered."""
        await until(lambda: self.results() >= count, timeout)

    async def record(self, timeout: float = 60.0) -> RunRecord:
        """Wait until every turn is answered and the turn queue is empty (a late
        redelivery would be seen), then read each conversation's durable copy (cluster
        mode) or the single node's store."""
        try:
            await until(self._caught_up, timeout)
        except TimeoutError:
            raise AssertionError(await self.describe_stall()) from None
        await asyncio.gather(*self._submitters)
        js = self.bus.nc.jetstream()

        async def drained() -> bool:
            info = await js.stream_info(self.subjects.turn_stream)
            return int(info.state.messages) == 0

        await until(drained, timeout)

        def copied() -> bool:  # rounds whose copy failed in the fault are sent again
            return all(getattr(n.ownership, "unpublished", 0) == 0 for n in self.nodes)

        await until(copied, timeout)
        wall = time.monotonic() - self._began
        if self.cluster:
            stored = await read_durable(self.bus, self.plans)
        else:
            stored = {}
            store = self.nodes[0].store
            for conv in self.plans:
                cid = conv.conversation_id
                statuses = {
                    t.turn_id: str((store.turn_record(cid, t.turn_id) or {}).get("status"))
                    for t in conv.turns
                }
                stored[cid] = _stored(store.iter_blocks(cid), statuses)
        return RunRecord(
            mode="cluster" if self.cluster else "single",
            plans=self.plans,
            traces=self.observer.traces,
            stored=stored,
            kills=[],
            start_s=[],
            wall_s=wall,
            drained=True,
            workdir=self.workdir,
        )
