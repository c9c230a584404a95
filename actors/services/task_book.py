"""The agent tasks this node's turns sent, for routing the DONE signals that answer them.

``TaskBook`` is durable through the turns' checkpoints (a node that starts recovers the
open tasks of the turns a killed node left mid-way); ``AgentInboxes`` is what it stores a
task with (``actline.actors.agents.inboxes``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from actline.actors.base import Ref
from actline.messages import AgentTask


@dataclass(slots=True)
class TaskEntry:
    """One agent task this node sent."""

    task_id: str
    agent: str
    conversation_id: str
    turn_id: str
    sent_at: float
    answered: bool = False
    seq: int = 0
    """Its sequence in the task stream (0: not known, e.g. taken in from a checkpoint)."""
    present: bool = True
    """Whether its agent was connected when it was sent (or said hello since)."""


@dataclass(frozen=True, slots=True)
class StoredTask:
    """A task stored in the task stream: its sequence, and whether its agent is connected."""

    seq: int
    present: bool


class AgentInboxes(Protocol):
    """The agents' durable inboxes (``actline.actors.agents.inboxes.AgentTasks``)."""

    async def send(self, task: AgentTask) -> StoredTask:
        """Store ``task`` in its agent's inbox (``BusError`` when it could not be)."""
        ...


class TaskBook:
    """The agent tasks sent by this node's turns, for routing DONE signals.

    A task is *open* while unanswered and its turn runs (or is about to resume here).
    A DONE without ids goes to the agent's oldest open task; when the agent has open
    tasks in more than one turn the signal is ambiguous. Entries of ended turns stay
    (``keep`` of them) so a late DONE still finds its conversation; an entry still queued
    (its turn awaits it, however many turns wait) is never dropped.

    Durable: the tasks of a running turn are in its checkpoint (``actline.actors.turn.state``), so a
    node that starts ``recover``s the open tasks of the turns a killed node left
    mid-way; those turns are *resuming* until their queue message comes back and they
    run again (``turn_started``), and a DONE for them waits for that (``wait_running``).

    Inboxes: a task is *queued* (in its agent's durable inbox) from ``add`` until its turn
    stops awaiting it: its DONE applied (``answered``), a skip or wait timeout
    (``awaiting``), its turn ended (``turn_ended(settled=True)``). It is then handed to
    ``withdrawn``, whose reader removes it from the inbox. A turn handed to another node
    (``turn_ended`` not settled) keeps its tasks queued: that node takes them in.
    """

    def __init__(self, keep: int = 10_000) -> None:
        self.keep = keep
        self._tasks: dict[str, TaskEntry] = {}
        self._running: dict[str, RunningTurn] = {}
        self._resuming: dict[str, str] = {}
        """Turns left mid-way in this node's store (turn id -> conversation id)."""
        self._started: dict[str, asyncio.Event] = {}
        self._queued: dict[str, dict[str, TaskEntry]] = {}
        """Tasks in their agent's inbox, by turn id and task id."""
        self._withdrawn: list[TaskEntry] = []
        self._withdrawing = asyncio.Event()
        self._closed: dict[str, None] = {}
        """Task ids no turn awaits any more, oldest first: the entries ``keep`` bounds."""

    def add(self, entry: TaskEntry) -> None:
        self._tasks[entry.task_id] = entry
        if not entry.answered:
            self._queued.setdefault(entry.turn_id, {})[entry.task_id] = entry
        else:
            self._close(entry.task_id)

    def _close(self, task_id: str) -> None:
        self._closed[task_id] = None
        while len(self._closed) > self.keep:
            oldest = next(iter(self._closed))
            del self._closed[oldest]
            entry = self._tasks.get(oldest)
            if entry is not None and oldest not in self._queued.get(entry.turn_id, {}):
                del self._tasks[oldest]

    def recover(self, unfinished: Iterable[tuple[str, Mapping[str, Any]]]) -> int:
        """Take in the open tasks of turns stored ``running`` (``Store.unfinished_turns``);
        returns how many tasks are open."""
        count = 0
        for cid, record in unfinished:
            tid = str(record.get("turn_id") or "")
            if not tid or tid in self._running:
                continue
            self._resuming[tid] = cid
            for task in record.get("tasks", ()):
                task_id, agent, answered = str(task[0]), str(task[1]), bool(task[3])
                entry = self._tasks.get(task_id)
                if entry is None:
                    self.add(TaskEntry(task_id, agent, cid, tid, 0.0, answered))
                elif not entry.answered:  # back here after a turn handed to another node
                    self._queued.setdefault(tid, {})[task_id] = entry
                count += not answered
        return count

    def get(self, task_id: str) -> TaskEntry | None:
        return self._tasks.get(task_id)

    def answered(self, task_id: str) -> None:
        entry = self._tasks.get(task_id)
        if entry is not None:
            entry.answered = True
            self._withdraw(entry.turn_id, [task_id])

    def awaiting(self, turn_id: str, task_ids: Collection[str]) -> None:
        """The turn awaits only ``task_ids`` now: its other queued tasks are withdrawn."""
        queued = self._queued.get(turn_id)
        if queued:
            self._withdraw(turn_id, [t for t in queued if t not in task_ids])

    def _withdraw(self, turn_id: str, task_ids: Iterable[str]) -> None:
        queued = self._queued.get(turn_id, {})
        for task_id in task_ids:
            entry = queued.pop(task_id, None)
            if entry is not None:
                self._withdrawn.append(entry)
                self._withdrawing.set()
                self._close(task_id)
        if not queued:
            self._queued.pop(turn_id, None)

    async def withdrawn(self) -> list[TaskEntry]:
        """The tasks no turn awaits any more, once there are some (each handed out once)."""
        await self._withdrawing.wait()
        self._withdrawing.clear()
        entries, self._withdrawn = self._withdrawn, []
        return entries

    def seen(self, agent: str) -> None:
        """``agent`` said hello: its queued tasks' agent is connected."""
        for queued in self._queued.values():
            for entry in queued.values():
                if entry.agent == agent:
                    entry.present = True

    def absent(self, turn_id: str) -> list[str]:
        """The agents of the turn's queued tasks that were not connected, by name."""
        return sorted({e.agent for e in self._queued.get(turn_id, {}).values() if not e.present})

    def turn_started(self, turn: RunningTurn) -> None:
        self._running[turn.turn_id] = turn
        self._resuming.pop(turn.turn_id, None)
        started = self._started.pop(turn.turn_id, None)
        if started is not None:
            started.set()

    def turn_ended(self, turn_id: str, *, settled: bool = False) -> None:
        """The turn stopped running here: ``settled`` when it has its result (its tasks
        are withdrawn), else it was handed to another node (they stay queued)."""
        if settled:
            self._withdraw(turn_id, list(self._queued.get(turn_id, ())))
        else:
            for task_id in self._queued.pop(turn_id, {}):
                self._close(task_id)
        self._running.pop(turn_id, None)
        self._resuming.pop(turn_id, None)
        started = self._started.pop(turn_id, None)
        if started is not None:
            started.set()

    def running(self, turn_id: str | None) -> RunningTurn | None:
        """The turn ``turn_id`` when it runs on this node."""
        return None if turn_id is None else self._running.get(turn_id)

    def resuming(self, turn_id: str | None) -> bool:
        """True when ``turn_id`` was left mid-way here and has not run again yet."""
        return turn_id is not None and turn_id in self._resuming

    async def wait_running(self, turn_id: str, timeout: float) -> RunningTurn | None:
        """The turn once it runs here (within ``timeout`` seconds), else None."""
        if turn_id in self._running:
            return self._running[turn_id]
        started = self._started.setdefault(turn_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(started.wait(), timeout)
        return self._running.get(turn_id)

    def open_tasks(self, agent: str) -> list[TaskEntry]:
        """The agent's unanswered tasks of running (or resuming) turns, oldest first."""
        return [
            t
            for t in self._tasks.values()
            if t.agent == agent
            and not t.answered
            and (t.turn_id in self._running or t.turn_id in self._resuming)
        ]


@dataclass(frozen=True, slots=True)
class RunningTurn:
    """A turn running on this node: its conversation and its DecisionActor."""

    turn_id: str
    conversation_id: str
    decision: Ref
