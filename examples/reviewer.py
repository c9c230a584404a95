"""An outside agent called ``reviewer``: it takes its ``agent.task`` over NATS and answers DONE.

    python examples/reviewer.py --nats nats://127.0.0.1:4222 [--delay 1.5] [--name reviewer]

It joins its durable inbox (``actline.actors.client.agent.AgentInbox``: a hello to the nodes, then
its tasks pulled from its own consumer, a hello every beat so nodes know it is connected; tasks
sent while it was away are waiting for it). For each task it "reviews" the text (counts the
cited sources and the points, picks the first point), waits ``--delay`` seconds as a person or
a tool would, then sends ``agent.done`` with the turn and task ids the task carries, on its own
DONE subject (stored by JetStream, then the node's verdict on a private inbox), and prints the
verdict. It runs until SIGINT/SIGTERM. Any program that can speak msgpack on NATS can play
this part (``actors/client/agent.py`` shows it in plain nats-py); ``actline agent NAME -- CMD``
wraps a shell command the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import sys

from actline.actors.client.agent import AgentInbox
from actline.bus import Bus

CITATION = re.compile(r"\[\[S:(\d+)\]\]|\[S:(\d+)\]")


def review(text: str) -> str:
    """A short review of the task text: what the draft under it says, and how well it is
    sourced (the draft's points, its first one or two quoted, the sources they cite)."""
    body = text.split("\n---\n", 1)[0]
    ask, _, draft = body.partition("Draft answer:")
    sids = {a or b for a, b in CITATION.findall(draft or body)}
    points = [
        CITATION.sub("", line).strip("-• ").strip()
        for line in (draft or body).splitlines()
        if line.strip().startswith(("-", "•"))
    ]
    if not points:
        first = ask.strip().splitlines()[0][:120] if ask.strip() else "the task"
        return f"Reviewed '{first}': there is no draft with sources to check yet."
    quoted = "; ".join(f"'{p[:100]}'" for p in points[:2])
    cited = f"{len(sids)} cited source(s)" if sids else "no citations"
    verdict = (
        "every point is cited, the plan is sound, go ahead"
        if all(
            CITATION.search(line) for line in draft.splitlines() if line.lstrip()[:1] in ("-", "•")
        )
        else "add sources for the uncited points before going ahead"
    )
    return f"Reviewed the draft ({len(points)} point(s), {cited}): it says {quoted}; {verdict}."


async def serve(inbox: AgentInbox, delay: float) -> None:
    async for task in inbox:
        print(f"[{inbox.name}] task {task.task_id} of turn {task.turn_id} received", flush=True)
        await asyncio.sleep(delay)
        reply = await inbox.done(task, review(task.text), timeout=10.0)
        print(f"[{inbox.name}] DONE sent for {task.task_id}: {reply.kind}", flush=True)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="reviewer", description=__doc__.split("\n")[0])
    parser.add_argument("--nats", required=True, help="NATS URL, e.g. nats://127.0.0.1:4222")
    parser.add_argument("--name", default="reviewer")
    parser.add_argument("--delay", type=float, default=1.5, help="seconds before answering")
    args = parser.parse_args(argv)
    bus = await Bus.connect(args.nats, name=f"agent-{args.name}")
    inbox = AgentInbox(bus, args.name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await inbox.start(within=30.0)
    print(f"[{args.name}] listening on {bus.subjects.agent_inbox(args.name)}", flush=True)
    worker = asyncio.create_task(serve(inbox, args.delay))
    await stop.wait()
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    await inbox.close()
    await bus.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
