"""Durable agent inboxes, presence, and DONE bound to the agent's own subject, on a
real nats-server.

Agents here are ``AgentInbox`` objects, each on its own connection with the credentials of
its own role (closing it is the agent dying), so the agent side does only what the server
lets an ``agent NAME`` do; the node runs a scripted model whose first round hands work to an
agent. Every wait is on an event or a condition (``until``), never a sleep.
"""

from __future__ import annotations

import argparse
import asyncio
import io
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from actline import messages
from actline.actors.client.agent import REPLY_HEADER, STORED, AgentInbox
from actline.actors.client.client import Client, TurnHandle
from actline.actors.node.node import Node
from actline.actors.services.task_book import TaskBook, TaskEntry
from actline.agents import list_agents
from actline.bus import Bus, EmbeddedNats, Envelope, TaskStream
from actline.cli.agent import run_agents
from actline.messages import Ack, AgentTask, DoneSignal, ErrorReply, Subjects
from tests.actors.harness import BlockViews, Scripted, say, start_node
from tests.waiting import until

TIMEOUT = 15.0
REVIEWER = "reviewer"
BEAT_S = 0.2
"""The agents' beat in these tests: an agent gone is absent after three (0.6 s)."""
NOT_CONNECTED = f"{REVIEWER} is not connected; the task is queued"


def asks(agent: str = REVIEWER) -> list[str]:
    """A turn that hands work to ``agent``, then answers."""
    return [
        say("Asking for a review.", calls=[("agent.send", {"name": agent, "text": "review it"})]),
        say("Going on.", answer="The plan is reviewed."),
    ]


@dataclass
class Setup(BlockViews):
    nats: EmbeddedNats
    bus: Bus
    model: Scripted
    node: Node
    client: Client

    async def submit(self, cid: str, outputs: list[str], **kwargs: Any) -> TurnHandle:
        self.model.script(cid, outputs)
        return await self.client.submit("Get the plan reviewed.", conversation_id=cid, **kwargs)

    async def held(self) -> list[AgentTask]:
        """The tasks the task stream holds (the open ones), oldest first."""
        s = self.bus.subjects
        stream = TaskStream.bind(self.bus, name=s.tasks_stream)
        found = [messages.decode(data) for _, data in await stream.held(s.agent_inbox_any)]
        return [t for t in found if isinstance(t, AgentTask)]

    async def empty(self) -> bool:
        return not await self.held()

    async def connect(self, name: str) -> Bus:
        """A connection of its own for the agent ``name``, with the credentials of its role
        (``agent NAME``: its hello, its DONE subject, its consumer's pulls and acks)."""
        prefix = self.bus.subjects.prefix
        creds = self.nats.creds_path("agent", name=name, prefix=prefix)
        return await Bus.connect(
            self.nats.url, name=f"agent-{name}", subject_names=self.bus.subjects, creds=creds
        )

    @asynccontextmanager
    async def agent(self, name: str = REVIEWER) -> AsyncIterator[AgentInbox]:
        """An agent that said its first hello; it dies (connection closed) on exit."""
        bus = await self.connect(name)
        inbox = AgentInbox(bus, name, pull_s=0.5)
        try:
            await inbox.start(within=TIMEOUT)
            yield inbox
        finally:
            await inbox.close()
            await bus.close()


@pytest.fixture
async def setup(bus: Bus, nats_server: EmbeddedNats, tmp_path: Path) -> AsyncIterator[Setup]:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model, agent_beat_s=BEAT_S)
    client = Client(bus)
    try:
        yield Setup(nats_server, bus, model, node, client)
    finally:
        await client.close()
        await node.stop()


def held_id(tasks: list[AgentTask]) -> str:
    [task] = tasks
    return task.task_id


async def next_task(inbox: AgentInbox) -> AgentTask:
    task = await inbox.next(timeout=TIMEOUT)
    assert task is not None, "no task within the timeout"
    return task


async def completed(handle: TurnHandle) -> messages.ReActResult:
    result = await handle.wait(TIMEOUT)
    assert result.status == "completed", (result.status, result.error)
    return result


async def verdict_on(bus: Bus, subject: str, signal: DoneSignal) -> Ack | ErrorReply:
    """Store ``signal`` on ``subject`` (any subject: tests of refusals) and wait for the
    node's final verdict."""
    verdicts: asyncio.Queue[Ack | ErrorReply] = asyncio.Queue()

    async def on_verdict(msg: messages.Message, env: Envelope) -> None:
        if isinstance(msg, Ack | ErrorReply):
            verdicts.put_nowait(msg)

    inbox = bus.nc.new_inbox()
    sub = await bus.subscribe(inbox, on_verdict)
    try:
        await bus.publish_stored(subject, signal, headers={REPLY_HEADER: inbox})
        async with asyncio.timeout(TIMEOUT):
            while True:
                verdict = await verdicts.get()
                if not (isinstance(verdict, Ack) and verdict.detail.startswith(STORED)):
                    return verdict
    finally:
        await sub.unsubscribe()


def saw(handle: TurnHandle, setup: Setup, cid: str, text: str) -> bool:
    """Whether a model call after the first one was shown ``text``."""
    return any(
        text in (part.get("text") or "")
        for request in setup.model.models[cid].requests[1:]
        for part in request.blocks
    )


# --- durable inboxes ---------------------------------------------------------------------


async def test_an_agent_started_after_its_task_was_sent_receives_it_and_its_done_completes(
    setup: Setup,
) -> None:
    handle = await setup.submit("c1", asks())
    await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
    [stored] = await setup.held()

    async with setup.agent() as agent:
        task = await next_task(agent)
        assert (task.task_id, task.turn_id) == (stored.task_id, handle.turn_id)
        assert task.done_subject == setup.bus.subjects.agent_done_of(REVIEWER)
        assert task.done_subject in task.text  # the text tells the agent where to answer
        verdict = await agent.done(task, "looks right")
        assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
        await completed(handle)
        assert await agent.next(timeout=1.0) is None  # each task once while connected
    [block] = setup.signals("c1", task.task_id)
    assert "looks right" in block.text
    await until(setup.empty, TIMEOUT)  # answered: gone from the inbox


async def test_an_agent_that_restarts_mid_task_gets_it_again_and_a_second_done_is_not_applied(
    setup: Setup,
) -> None:
    async with setup.agent() as first:
        handle = await setup.submit("c1", asks())
        task = await next_task(first)
        await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
        assert "not connected" not in handle.cards[-1].detail
    # the first one died mid-task (its task acked on receipt, unanswered)
    async with setup.agent() as second:
        again = await next_task(second)
        assert again.task_id == task.task_id
        verdict = await second.done(again, "reviewed after a restart")
        assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
        await completed(handle)
        # the instance that died comes back to life with its answer: not applied again
        late = await second.done(task, "reviewed before the restart")
    assert isinstance(late, ErrorReply) and late.code == "done_already_answered", late
    [block] = setup.signals("c1", task.task_id)
    assert "after a restart" in block.text
    assert not setup.notices("c1", "agent_absent")
    await until(setup.empty, TIMEOUT)


async def test_tasks_for_two_agents_go_to_each_agent_only(setup: Setup) -> None:
    # one hand-off per decision: the reviewer's, then, once it is done, the critic's
    both = [
        say("A review first.", calls=[("agent.send", {"name": REVIEWER, "text": "review it"})]),
        say("Then a critique.", calls=[("agent.send", {"name": "critic", "text": "criticise it"})]),
        say("Both answered.", answer="Reviewed and criticised."),
    ]
    async with setup.agent() as reviewer, setup.agent("critic") as critic:
        handle = await setup.submit("c1", both)
        mine = await next_task(reviewer)
        assert mine.agent == REVIEWER
        verdict = await reviewer.done(mine, f"{REVIEWER} says fine")
        assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
        theirs = await next_task(critic)
        assert theirs.agent == "critic"
        assert await reviewer.next(timeout=0.5) is None
        verdict = await critic.done(theirs, "critic says fine")
        assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
        await completed(handle)


# --- presence ----------------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["skip", "timeout"])
async def test_a_task_for_an_absent_agent_is_a_notice_and_a_waiting_card_and_the_turn_ends(
    setup: Setup, ending: str
) -> None:
    config = {"wait_timeout_s": 0.5} if ending == "timeout" else {}
    handle = await setup.submit("c1", asks(), config=config)
    card = await handle.wait_for("waiting", detail="not connected", timeout=TIMEOUT)
    assert card.detail.startswith(f"{REVIEWER} is not connected, the task is queued; ")
    assert card.detail.endswith(f"waiting for {REVIEWER} (task {held_id(await setup.held())})")
    [held] = await setup.held()  # queued for when the agent comes
    if ending == "skip":
        await setup.client.skip_waiting(handle.turn_id, "no reviewer today")
    await completed(handle)
    [notice] = setup.notices("c1", "agent_absent")
    assert NOT_CONNECTED in notice.text
    assert saw(handle, setup, "c1", NOT_CONNECTED)  # the model was told
    assert saw(handle, setup, "c1", "wait_skipped" if ending == "skip" else "wait_timeout")
    await until(setup.empty, TIMEOUT)  # nobody waits for it: withdrawn
    async with setup.agent() as agent:  # so the agent that comes later does not get it
        assert await agent.next(timeout=1.0) is None
    assert held.task_id not in [t.task_id for t in await setup.held()]


async def test_an_agent_that_stops_saying_hello_is_absent_after_three_beats(
    setup: Setup,
) -> None:
    async with setup.agent():
        [row] = (await list_agents(setup.bus)).agents
        assert (row.agent, row.present, row.open_tasks) == (REVIEWER, True, [])
    await until(lambda: _absent(setup.bus), TIMEOUT)
    handle = await setup.submit("c1", asks())
    await handle.wait_for("waiting", detail="not connected", timeout=TIMEOUT)
    await setup.client.cancel(handle.turn_id)
    assert (await handle.wait(TIMEOUT)).status == "cancelled"
    await until(setup.empty, TIMEOUT)  # its turn ended: withdrawn


async def _absent(bus: Bus) -> bool:
    return not [row for row in (await list_agents(bus)).agents if row.present]


async def test_agents_lists_presence_and_open_tasks(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with setup.agent("critic") as critic:
        handle = await setup.submit("c1", asks())
        await handle.wait_for("waiting", detail="not connected", timeout=TIMEOUT)
        listed = {row.agent: row for row in (await list_agents(setup.bus)).agents}
        assert set(listed) == {REVIEWER, "critic"}
        assert listed["critic"].present and listed["critic"].last_seen is not None
        assert not listed["critic"].open_tasks and critic.counters["hellos"] >= 1
        reviewer = listed[REVIEWER]
        assert not reviewer.present
        [open_task] = reviewer.open_tasks
        assert (open_task.turn_id, open_task.conversation_id) == (handle.turn_id, "c1")

        out = io.StringIO()  # `actline agents`, as a client of this test's tenant
        prefix = setup.bus.subjects.prefix
        monkeypatch.setenv("ACTLINE_SUBJECT_PREFIX", prefix)
        monkeypatch.setenv("ACTLINE_HOME", str(tmp_path / "client"))
        creds = setup.nats.creds_path("client", prefix=prefix)
        monkeypatch.setenv("ACTLINE_NATS_CREDS", str(creds))
        args = argparse.Namespace(config=None, nats=setup.nats.url, json=False)
        assert await run_agents(args, Console(file=out, width=200)) == 0
        lines = {line.split()[0]: line for line in out.getvalue().splitlines()[1:] if line}
        assert lines["critic"].split()[1] == "yes" and "s ago" in lines["critic"]
        assert lines[REVIEWER].split()[1] == "no"
        assert f"{open_task.task_id} (turn {handle.turn_id})" in lines[REVIEWER]

        await setup.client.skip_waiting(handle.turn_id)
        await completed(handle)
    await until(lambda: _no_open_tasks(setup.bus), TIMEOUT)


async def _no_open_tasks(bus: Bus) -> bool:
    return not [row for row in (await list_agents(bus)).agents if row.open_tasks]


# --- DONE bound to the agent's own subject -------------------------------------------------


async def test_a_done_on_an_agents_subject_naming_another_agent_is_refused(
    setup: Setup,
) -> None:
    async with setup.agent() as agent:
        handle = await setup.submit("c1", asks())
        task = await next_task(agent)
        await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
        subject = setup.bus.subjects.agent_done_of(REVIEWER)
        forged = DoneSignal(
            agent="critic", turn_id=task.turn_id, task_id=task.task_id, summary="forged"
        )
        refused = await verdict_on(setup.bus, subject, forged)
        assert isinstance(refused, ErrorReply) and refused.code == "agent_mismatch", refused
        assert "critic" in refused.message and subject in refused.message
        assert not setup.signals("c1", task.task_id) and not handle.result.done()
        no_ids = DoneSignal(agent="critic", summary="forged, no ids")
        refused = await verdict_on(setup.bus, subject, no_ids)
        assert isinstance(refused, ErrorReply) and refused.code == "agent_mismatch", refused

        verdict = await agent.done(task, "the real review")
        assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
        await completed(handle)
    [block] = setup.signals("c1", task.task_id)
    assert "the real review" in block.text


async def test_another_agents_done_for_a_task_on_its_own_subject_is_a_notice_not_applied(
    setup: Setup,
) -> None:
    async with setup.agent() as reviewer, setup.agent("critic") as critic:
        handle = await setup.submit("c1", asks())
        task = await next_task(reviewer)
        verdict = await critic.done(task, "I review for the reviewer")  # critic's own subject
        assert isinstance(verdict, ErrorReply) and verdict.code == "done_wrong_agent", verdict
        assert not setup.signals("c1", task.task_id) and not handle.result.done()
        verdict = await reviewer.done(task, "reviewed")
        assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
        await completed(handle)
    [notice] = setup.notices("c1", "done_wrong_agent")  # the model was told
    assert "critic" in notice.text
    [block] = setup.signals("c1", task.task_id)
    assert block.meta["agent"] == REVIEWER


@pytest.mark.parametrize("authenticated", [False, True])
async def test_the_shared_done_subject_is_refused_only_with_authentication(
    setup: Setup, authenticated: bool
) -> None:
    setup.bus.authenticated = authenticated  # the node's bus: as connected with credentials
    handle = await setup.submit("c1", asks())
    await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
    [task] = await setup.held()
    signal = DoneSignal(agent=REVIEWER, task_id=task.task_id, summary="on the shared subject")
    verdict = await verdict_on(setup.bus, setup.bus.subjects.agent_done, signal)
    if not authenticated:
        assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
        await completed(handle)
        return
    assert isinstance(verdict, ErrorReply) and verdict.code == "shared_done_refused", verdict
    assert setup.bus.subjects.agent_done_of(REVIEWER) in verdict.message
    assert not setup.signals("c1", task.task_id) and not handle.result.done()
    own = signal.model_copy(update={"signal_id": "sig-own"})
    verdict = await verdict_on(setup.bus, setup.bus.subjects.agent_done_of(REVIEWER), own)
    assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
    await completed(handle)


async def test_a_done_without_ids_on_an_agents_subject_answers_that_agents_oldest_task(
    setup: Setup,
) -> None:
    a = await setup.submit("c1", asks("critic"))
    await a.wait_for("waiting", detail="critic", timeout=TIMEOUT)
    b = await setup.submit("c2", asks())
    await b.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
    plain = DoneSignal(agent=REVIEWER, summary="fine")
    verdict = await verdict_on(setup.bus, setup.bus.subjects.agent_done_of(REVIEWER), plain)
    assert isinstance(verdict, Ack) and verdict.detail == "applied", verdict
    await completed(b)
    assert not a.result.done()  # the critic's task is still open
    assert [t.agent for t in await setup.held()] == ["critic"]
    await setup.client.cancel(a.turn_id)
    await a.wait(TIMEOUT)


def _names(rows: Sequence[Any]) -> list[str]:
    return [row.agent for row in rows]


async def test_a_hello_on_another_agents_subject_is_refused(setup: Setup) -> None:
    bus = setup.bus
    hello = messages.AgentHello(agent="critic", first=True)
    reply = await bus.request(bus.subjects.agent_hello(REVIEWER), hello, raise_remote=False)
    assert isinstance(reply, ErrorReply) and reply.code == "agent_mismatch", reply
    assert _names((await list_agents(bus)).agents) == []


def test_subjects_of_an_agent_parse_back() -> None:
    s = Subjects("al")
    assert s.agent_of(s.agent_done_of("reviewer"), "done") == "reviewer"
    assert s.agent_of(s.agent_hello("reviewer"), "hello") == "reviewer"


# --- the TaskBook: which tasks leave their inbox ----------------------------------------------


def entry(task_id: str, turn_id: str = "t1", agent: str = REVIEWER) -> TaskEntry:
    return TaskEntry(task_id, agent, "c1", turn_id, 0.0)


async def withdrawn(book: TaskBook) -> list[str]:
    """What the book hands out now (nothing: an empty list)."""
    try:
        return [e.task_id for e in await asyncio.wait_for(book.withdrawn(), 0.01)]
    except TimeoutError:
        return []


async def test_a_task_is_withdrawn_once_when_no_turn_awaits_it() -> None:
    book = TaskBook()
    for task_id in ("k1", "k2", "k3"):
        book.add(entry(task_id))
    book.add(entry("other", turn_id="t2"))
    book.awaiting("t1", ["k1", "k2", "k3"])
    assert await withdrawn(book) == []
    book.answered("k1")  # its DONE applied
    book.awaiting("t1", ["k2", "k3"])
    assert await withdrawn(book) == ["k1"]
    book.awaiting("t1", [])  # skipped or timed out
    assert await withdrawn(book) == ["k2", "k3"]
    book.turn_ended("t1", settled=True)
    assert await withdrawn(book) == []


async def test_a_turn_handed_to_another_node_keeps_its_tasks_queued() -> None:
    book = TaskBook()
    book.add(entry("k1"))
    book.turn_ended("t1")  # the lease lapsed: the turn resumes elsewhere
    assert await withdrawn(book) == []
    record = {"turn_id": "t1", "tasks": [["k1", REVIEWER, 1, False, True]]}
    assert book.recover([("c1", record)]) == 1  # back here: queued again
    book.turn_ended("t1", settled=True)
    assert await withdrawn(book) == ["k1"]


def test_the_absent_agents_of_a_turn_are_those_not_seen_since() -> None:
    book = TaskBook()
    book.add(entry("k1"))
    book.add(entry("k2", agent="critic"))
    for task_id in ("k1", "k2"):
        found = book.get(task_id)
        assert found is not None
        found.present = False
    assert book.absent("t1") == ["critic", REVIEWER]
    book.seen(REVIEWER)
    assert book.absent("t1") == ["critic"]
