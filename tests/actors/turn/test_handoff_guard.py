"""One hand-off to an outside agent per decision: the first ``agent.send`` of a model reply
goes out, every further one is not sent and becomes a notice the model sees next round.

The classification is checked directly; the behaviour on a real node (scripted model, real
nats-server and LMDB): exactly one task lands in the agents' durable inbox, the turn waits
on it alone, and the next round's context carries the notice, also when the node stops
while the turn waits and a new node resumes it. Every wait is on a condition or an event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from actline import messages
from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.actors.turn import events as ev
from actline.actors.turn.protocol import CallLedger
from actline.actors.turn.reply import AGENT_ABSENT, ONE_HANDOFF, classify_reply
from actline.bus import Bus, TaskStream
from actline.messages import Ack, AgentTask, GenerateRequest
from actline.timeline.blocks import NOTICE, TOOL_CALL, TOOL_RESULT
from tests.actors.harness import Scripted, say, start_node
from tests.waiting import until

TIMEOUT = 30.0
CID = "c-handoff"
REVIEWER, TESTER, CRITIC = "reviewer", "tester", "critic"
NOTICE_CODE = f"protocol_violation.{ONE_HANDOFF}"


def send(agent: str, text: str = "do it") -> tuple[str, dict[str, Any]]:
    return ("agent.send", {"name": agent, "text": text})


def decide(*calls: tuple[str, dict[str, Any]]) -> dict[str, str]:
    """The channels of a reply whose decision makes ``calls``."""
    decision = say("Handing off.", calls=calls)
    start = decision.index("<channel:decision>") + len("<channel:decision>")
    return {"decision": decision[start : decision.index("</channel:decision>")]}


def classify(channels: dict[str, str], ledger: CallLedger | None = None) -> Any:
    return classify_reply(
        1, channels, ledger=ledger or CallLedger(), external=[], max_calls=5, tokens=10
    )


# -- the classification ----------------------------------------------------------------------


def test_the_first_agent_send_goes_out_and_the_others_become_notices() -> None:
    read = ("react.read", {"paths": ["ks:pricing/tiers.md"]})
    classified = classify(decide(send(REVIEWER), read, send(TESTER), send(CRITIC)))
    event = classified.event
    assert isinstance(event, ev.ModelDecided)
    assert [c.agent for c in event.agent_calls] == [REVIEWER]
    assert [c.tool for c in event.calls] == ["react.read"]  # other calls still run
    refused = [n for n in classified.notices if n.code == ONE_HANDOFF]
    assert [n.tool for n in refused] == ["agent.send", "agent.send"]
    task = event.agent_calls[0].task_id
    assert f"to {TESTER} was not sent" in refused[0].message
    assert f"to {CRITIC} was not sent" in refused[1].message
    for notice in refused:
        assert "One hand-off per decision" in notice.message
        assert f"handed work to {REVIEWER} (task {task})" in notice.message
        assert "next hand-off after this one" in notice.message


def test_a_refused_agent_send_is_not_counted_as_a_call_of_the_turn() -> None:
    ledger = CallLedger()
    classify(decide(send(REVIEWER), send(TESTER)), ledger)
    assert sum(ledger.counts().values()) == 1


def test_an_agent_send_that_cannot_go_out_does_not_use_up_the_hand_off() -> None:
    classified = classify(decide(send("not a name!"), send(TESTER), send(CRITIC)))
    event = classified.event
    assert isinstance(event, ev.ModelDecided)
    assert [c.agent for c in event.agent_calls] == [TESTER]
    assert [n.code for n in classified.notices] == ["bad_params", ONE_HANDOFF]


def test_one_agent_send_gives_no_notice() -> None:
    classified = classify(decide(send(REVIEWER)))
    assert isinstance(classified.event, ev.ModelDecided)
    assert len(classified.event.agent_calls) == 1 and classified.notices == ()


# -- on a real node ---------------------------------------------------------------------------


@dataclass
class Running:
    bus: Bus
    node: Node
    client: Client
    model: Scripted

    async def held(self) -> list[AgentTask]:
        """The tasks the agents' durable inbox holds, oldest first."""
        s = self.bus.subjects
        stream = TaskStream.bind(self.bus, name=s.tasks_stream)
        found = [messages.decode(data) for _, data in await stream.held(s.agent_inbox_any)]
        return [t for t in found if isinstance(t, AgentTask)]

    async def inbox_empty(self) -> bool:
        return not await self.held()

    def blocks(self, kind: str) -> list[Any]:
        return [b for b in self.node.conversations[CID].tl.blocks if b.type == kind]


@pytest.fixture
async def running(bus: Bus, tmp_path: Path) -> AsyncIterator[Running]:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    setup = Running(bus, node, client, model)
    try:
        yield setup
    finally:
        await client.close()
        await setup.node.stop()


TWO_SENDS = say("Asking both.", calls=[send(REVIEWER, "review it"), send(TESTER, "test it")])


def context_text(request: GenerateRequest) -> str:
    return "\n".join(str(block.get("text", "")) for block in request.blocks)


async def test_two_agent_sends_in_one_decision_put_one_task_in_the_inbox(
    running: Running,
) -> None:
    running.model.script(CID, [TWO_SENDS, say("Reviewed.", answer="Reviewed by one agent.")])
    handle = await running.client.submit("Get it reviewed and tested.", conversation_id=CID)
    await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
    [task] = await running.held()
    assert (task.agent, task.turn_id) == (REVIEWER, handle.turn_id)
    waiting = [c for c in handle.cards if c.phase == "waiting"]
    assert TESTER not in waiting[-1].detail  # the turn waits for the one task it sent
    notices = [c for c in handle.cards if c.phase == "notice" and NOTICE_CODE in c.detail]
    assert len(notices) == 1

    reply = await running.client.send_done(
        REVIEWER, "looks fine", turn_id=handle.turn_id, task_id=task.task_id, timeout=TIMEOUT
    )
    assert isinstance(reply, Ack) and reply.detail == "applied", reply
    result = await handle.wait(TIMEOUT)
    assert result.status == "completed", result.error
    await until(running.inbox_empty, TIMEOUT)  # the one task is answered, no other was sent

    requests = running.model.models[CID].requests
    assert len(requests) == 2
    assert "One hand-off per decision" not in context_text(requests[0])
    seen = context_text(requests[1])
    assert seen.count(f"{NOTICE_CODE}: One hand-off per decision") == 1
    assert f"agent.send to {TESTER} was not sent" in seen

    # every tool call on the timeline has its result; the refused call left its notice
    calls = {b.call_id for b in running.blocks(TOOL_CALL)}
    results = {b.call_id for b in running.blocks(TOOL_RESULT)}
    assert calls == results and len(calls) == 1
    codes = [b.meta["code"] for b in running.blocks(NOTICE)]
    assert sorted(codes) == sorted([NOTICE_CODE, AGENT_ABSENT])  # no agent is connected here


async def test_a_turn_resumed_while_it_waits_sends_no_second_task(
    running: Running, bus: Bus, tmp_path: Path
) -> None:
    running.model.script(CID, [TWO_SENDS])
    handle = await running.client.submit("Get it reviewed and tested.", conversation_id=CID)
    await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
    [task] = await running.held()
    await running.node.stop()  # the Waiting checkpoint is stored: round 1 and its task

    after = Scripted({CID: [say("Reviewed.", answer="Reviewed by one agent.")]})
    running.node = await start_node(bus, tmp_path / "home", after)
    await handle.wait_for("notice", detail="resumed after round 1", timeout=TIMEOUT)

    def waits_again() -> bool:
        details = [(c.phase, c.detail) for c in handle.cards]
        resumed = next(i for i, (_, d) in enumerate(details) if d.startswith("resumed after"))
        return any(phase == "waiting" for phase, _ in details[resumed:])

    await until(waits_again, TIMEOUT)
    assert [t.task_id for t in await running.held()] == [task.task_id]

    reply = await running.client.send_done(
        REVIEWER, "looks fine", turn_id=handle.turn_id, task_id=task.task_id, timeout=TIMEOUT
    )
    assert isinstance(reply, Ack) and reply.detail == "applied", reply
    result = await handle.wait(TIMEOUT)
    assert result.status == "completed", result.error
    assert {t.task_id for t in await running.held()} <= {task.task_id}  # never a second task
    [request] = after.models[CID].requests  # the decision was not replayed
    assert context_text(request).count(f"{NOTICE_CODE}: One hand-off per decision") == 1
