"""An outside agent called ``reviewer``: it takes its ``agent.task`` over NATS and answers DONE.

    python examples/reviewer.py --nats nats://127.0.0.1:4222 [--delay 1.5] [--name reviewer]

It listens on ``al.agent.<name>.inbox``; for each task it "reviews" the text (counts the cited
sources and the points, picks the first point), waits ``--delay`` seconds as a person or a tool
would, then sends ``agent.done`` with the turn and task ids the task carries
(``Client.send_done``: stored by JetStream, then the node's verdict on a private inbox) and
prints the verdict. It runs until SIGINT/SIGTERM. Any program that can publish msgpack on NATS
can play this part (a plain publish on the task's ``done_subject`` is stored too);
``actline agent NAME -- CMD`` wraps a shell command the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import sys

from actors.client import Client
from bus import Bus, Envelope
from messages import AgentTask, Message, new_id

CITATION = re.compile(r"\[\[S:(\d+)\]\]|\[S:(\d+)\]")


def review(text: str) -> str:
    """A short review of the task text."""
    body = text.split("\n---\n", 1)[0]
    sids = {a or b for a, b in CITATION.findall(body)}
    points = [line.strip("-• ").strip() for line in body.splitlines() if line.strip()]
    first = points[0][:120] if points else "the task"
    cited = f"{len(sids)} cited source(s)" if sids else "no citations to check"
    return f"Reviewed '{first}': {cited}; the plan is sound, go ahead."


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="reviewer", description=__doc__.split("\n")[0])
    parser.add_argument("--nats", required=True, help="NATS URL, e.g. nats://127.0.0.1:4222")
    parser.add_argument("--name", default="reviewer")
    parser.add_argument("--delay", type=float, default=1.5, help="seconds before answering")
    args = parser.parse_args(argv)
    bus = await Bus.connect(args.nats, name=f"agent-{args.name}")
    client = Client(bus)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def on_task(msg: Message, env: Envelope) -> None:
        if not isinstance(msg, AgentTask):
            return
        print(f"[{args.name}] task {msg.task_id} of turn {msg.turn_id} received", flush=True)
        await asyncio.sleep(args.delay)
        reply = await client.send_done(
            args.name,
            review(msg.text),
            turn_id=msg.turn_id,
            task_id=msg.task_id,
            signal_id=new_id("sig-"),
            timeout=10.0,
        )
        print(f"[{args.name}] DONE sent for {msg.task_id}: {reply.kind}", flush=True)

    await bus.subscribe(bus.subjects.agent_inbox(args.name), on_task)
    print(f"[{args.name}] listening on {bus.subjects.agent_inbox(args.name)}", flush=True)
    await stop.wait()
    await client.close()
    await bus.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
