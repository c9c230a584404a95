"""The interop scenarios: whole actline turns against a model server nobody here controls.

Each scenario runs against an ``Endpoint`` (``tests.interop.endpoints``) in a fresh
``ACTLINE_HOME`` and returns the ``TurnRecord`` of every turn it ran; the tests assert on
them and ``bench.interop`` sums them up. They use actline as its users do: the command line
in a child process, or ``actline.Runtime`` with an embedded nats-server and a node in this
process, the model configured as a ``[models.NAME]`` table.

- ``ask``: ``actline ask --model --base-url --api --json`` as a child process with a clean
  environment (its own embedded NATS), the repair rounds read from the timeline it stored;
- ``conversation``: two turns of one conversation (the node serves the next turn);
- ``followup``: a followup sent once the model is writing (or a model that streams no
  channel is in its second call) joins the running turn;
- ``handoff``: an outside agent (``AgentInbox`` with its own credentials) answers every
  task the turn sends it; a model that never calls ``agent.send`` is recorded as such;
- ``stream``: ``Runtime.stream`` to the turn's result.

Each scenario runs as few turns as shows what it is for: against llama-server on two
cores a turn of a model that never keeps the protocol takes about a minute.

Every wait has a timeout (``TURN_TIMEOUT_S`` per turn): a hang fails the scenario
instead of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from actline.actors.client.agent import AgentInbox
from actline.actors.client.client import TurnHandle
from actline.config import Config
from actline.messages import Ack, AgentTask, ReActResult, StreamDelta
from actline.runtime import Runtime
from actline.storage import Store
from actline.timeline.blocks import USER_FOLLOWUP

from .endpoints import ROOT, Endpoint
from .records import TurnRecord, from_events, repair_runs_stored

TURN_TIMEOUT_S = 600.0
"""The longest a turn may take before the scenario fails it as hung (read at each wait).
A guard against hangs, not a speed target: the bench reports the turns that took longer
than ``records.TURN_TARGET_S``."""
START_TIMEOUT_S = 60.0
"""For a child process to start its own NATS and node, beyond its turn."""
AGENT = "reviewer"
QUESTION = "How do the pricing tiers differ?"
CONVERSATION = (
    "How do the pricing tiers differ?",
    "What did you tell me earlier about the pricing tiers?",
)
FOLLOWUP = ("What is the default retention?", "Also mention the backup schedule.")
HANDOFF = f"Check the retention settings and ask {AGENT} to review them."
REVIEW = "reviewed: the retention settings look right"
STREAM = "How do I rotate the signing key?"
Scenario = Callable[[Endpoint, Path], Coroutine[Any, Any, list[TurnRecord]]]


@contextlib.asynccontextmanager
async def runtime(endpoint: Endpoint, home: Path) -> AsyncIterator[Runtime]:
    """An embedded nats-server and a node in this process, serving ``endpoint``'s model."""
    async with Runtime(endpoint.config(home)) as rt:
        yield rt


async def turn(rt: Runtime, scenario: str, index: int, text: str, cid: str | None) -> TurnRecord:
    """Submit a turn, wait for its result, record it."""
    handle = await rt.submit(text, cid)
    result = await handle.wait(TURN_TIMEOUT_S)
    return from_events(scenario, index, handle.request, handle.events, result)


async def model_at_work(handle: TurnHandle) -> None:
    """Return once the turn's model writes (a streamed piece) or, for a model that writes
    no channel, once a second model call started; a turn that ended first returns too."""
    async with asyncio.timeout(TURN_TIMEOUT_S):
        while not handle.deltas and not handle.result.done():
            if any(c.phase == "thinking" and c.round >= 2 for c in handle.cards):
                return
            handle.changed.clear()
            await handle.changed.wait()


# -- (a) actline ask in a child process ---------------------------------------------------------


def clean_env(endpoint: Endpoint, home: Path) -> dict[str, str]:
    """The caller's environment without NATS, keys, base URLs or actline settings, plus the
    run's own settings (its home, its TOML file, the knowledge folder)."""
    dropped = ("NATS_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("ACTLINE_")}
    env.update(endpoint.env(home), COLUMNS="120", PYTHONPATH=str(ROOT))
    return env


async def ask(endpoint: Endpoint, home: Path) -> list[TurnRecord]:
    """``actline ask`` as a user runs it: one turn, the result printed as JSON."""
    argv = [
        sys.executable, "-m", "actline", "ask",
        "--model", endpoint.model, "--base-url", endpoint.base_url, "--api", endpoint.api,
        "--timeout", f"{TURN_TIMEOUT_S:g}", "--json", QUESTION,
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=home,
        env=clean_env(endpoint, home),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(TURN_TIMEOUT_S + START_TIMEOUT_S):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = [line for line in out.decode(errors="replace").splitlines() if line.startswith("{")]
    if proc.returncode not in (0, 1) or not lines:
        tail = err.decode(errors="replace")[-3000:]
        if "actline: no result for turn" in tail:
            raise TimeoutError(f"actline ask: {tail.strip()}")
        raise AssertionError(f"actline ask exited {proc.returncode} without a result:\n{tail}")
    result = ReActResult.model_validate(json.loads(lines[-1]))
    if (proc.returncode == 0) != (result.status == "completed"):
        raise AssertionError(f"actline ask exited {proc.returncode} on a {result.status} turn")
    store = await asyncio.to_thread(Store, home)
    try:
        blocks = store.load(result.conversation_id).timeline.turn_blocks(result.turn_id)
    finally:
        store.close()
    violations, runs = repair_runs_stored(blocks, result.status)
    record = TurnRecord(
        scenario="ask",
        turn=0,
        status=result.status,
        answer=result.answer,
        error=result.error,
        rounds=result.rounds,
        violations=violations,
        repair_runs=runs,
        sources=tuple(result.sources_used),
        conversation_id=result.conversation_id,
        turn_id=result.turn_id,
    )
    return [record]


# -- (b) a conversation ------------------------------------------------------------------------


async def conversation(endpoint: Endpoint, home: Path) -> list[TurnRecord]:
    """Two turns of one conversation, the second seeing the first."""
    records: list[TurnRecord] = []
    async with runtime(endpoint, home) as rt:
        cid: str | None = None
        for index, text in enumerate(CONVERSATION):
            records.append(await turn(rt, "conversation", index, text, cid))
            cid = records[0].conversation_id
    return records


# -- (c) a followup joins a running turn ----------------------------------------------------------


def turn_blocks(rt: Runtime, cid: str, tid: str) -> list[Any]:
    """The blocks of a turn of the node in ``rt``."""
    assert rt.node is not None
    return list(rt.node.conversations[cid].tl.turn_blocks(tid))


async def followup(endpoint: Endpoint, home: Path) -> list[TurnRecord]:
    """A followup sent while the model is at work."""
    async with runtime(endpoint, home) as rt:
        handle = await rt.submit(FOLLOWUP[0])
        await model_at_work(handle)
        reply = await rt.followup(handle, FOLLOWUP[1])
        result = await handle.wait(TURN_TIMEOUT_S)
        record = from_events("followup", 0, handle.request, handle.events, result)
        cid, tid = handle.conversation_id, handle.turn_id
        stored = [b.text for b in turn_blocks(rt, cid, tid) if b.type == USER_FOLLOWUP]
        record.followup_joined = isinstance(reply, Ack) and stored == [FOLLOWUP[1]]
        if not isinstance(reply, Ack):
            record.notes.append(f"followup refused: {reply.code}: {reply.message}")
        return [record]


# -- (d) work handed to an outside agent -------------------------------------------------------


@contextlib.asynccontextmanager
async def outside_agent(
    endpoint: Endpoint, home: Path, rt: Runtime
) -> AsyncIterator[list[AgentTask]]:
    """The outside agent ``AGENT`` on its own connection (its own credentials), answering
    every task it receives with ``REVIEW``; yields the tasks as they come."""
    config = Config.load(env=endpoint.env(home), nats_url=rt.nats_url)
    tasks: list[AgentTask] = []
    async with Runtime(config, node=False, role="agent", agent_name=AGENT) as agent:
        inbox = AgentInbox(agent.bus, AGENT, pull_s=0.5)
        await inbox.start(within=START_TIMEOUT_S)

        async def answer() -> None:
            async for task in inbox:
                tasks.append(task)
                await inbox.done(task, REVIEW)

        worker = asyncio.create_task(answer(), name=f"agent:{AGENT}")
        try:
            yield tasks
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
            await inbox.close()


async def handoff(endpoint: Endpoint, home: Path) -> list[TurnRecord]:
    """A turn asked to hand a review to the outside agent."""
    async with runtime(endpoint, home) as rt, outside_agent(endpoint, home, rt) as tasks:
        handle = await rt.submit(HANDOFF)
        result = await handle.wait(TURN_TIMEOUT_S)
        record = from_events("handoff", 0, handle.request, handle.events, result)
        record.handed_off = any(t.turn_id == handle.turn_id for t in tasks)
        if not record.handed_off:
            record.notes.append(f"the model sent {AGENT} no task")
        return [record]


# -- (e) Runtime.stream -------------------------------------------------------------------------


async def stream(endpoint: Endpoint, home: Path) -> list[TurnRecord]:
    """A turn through ``Runtime.stream``, timed as its events arrive."""
    loop = asyncio.get_running_loop()
    async with runtime(endpoint, home) as rt:
        started = loop.time()
        first: float | None = None
        events: list[Any] = []
        async for event in rt.stream(STREAM, timeout=TURN_TIMEOUT_S):
            if first is None and isinstance(event, StreamDelta):
                first = loop.time() - started
            events.append(event)
    result = events[-1]
    assert isinstance(result, ReActResult), result
    record = from_events("stream", 0, None, events, result)
    record.seconds, record.first_token_s = loop.time() - started, first
    answer = "".join(e.text for e in events if isinstance(e, StreamDelta) and e.channel == "answer")
    if not answer.strip():
        record.notes.append("no answer was streamed")
    return [record]


SCENARIOS: Mapping[str, Scenario] = {
    "ask": ask,
    "conversation": conversation,
    "followup": followup,
    "handoff": handoff,
    "stream": stream,
}
"""Every scenario by name, in the order a run takes them."""
