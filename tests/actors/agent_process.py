"""A standalone outside agent for the actor tests, written against the wire contract only.

It uses plain nats-py and msgpack (no actline import) so that it proves an outside
program can answer tasks with nothing but DESIGN.md §3.1: it listens on
``<prefix>.agent.<name>.inbox`` for ``agent.task`` maps and answers each one with
``agent.done`` maps on the task's ``done_subject``: published to JetStream (the DONE
stream stores them; its acknowledgement says so) with the ``Actline-Reply`` header
naming an inbox, where the node's verdict arrives (an ``ack`` whose detail starts
with ``stored;`` means held until its turn runs: the final verdict follows).

    python tests/actors/agent_process.py --nats URL --prefix PREFIX --name reviewer \
        --mode normal|late|duplicate|wrong_agent|no_ids [--delay S]

Stdout, one line each, flushed: ``ready`` once subscribed, then a JSON object per
task received (``{"event": "task", ...}``) and per reply to a DONE it sent
(``{"event": "reply", "agent": ..., "kind": ..., "code": ..., "detail": ...}``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import msgpack
import nats

MODES = ("normal", "late", "duplicate", "wrong_agent", "no_ids")
IMPOSTOR = "impostor"


def emit(obj: dict[str, Any] | str) -> None:
    line = obj if isinstance(obj, str) else json.dumps(obj, default=str, sort_keys=True)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def done(agent: str, summary: str, **ids: str) -> dict[str, Any]:
    """An ``agent.done`` map; ``ts`` is left to the receiver's default."""
    return {"kind": "agent.done", "agent": agent, "summary": summary, "artifacts": [], **ids}


def plan(task: dict[str, Any], name: str, mode: str) -> list[dict[str, Any]]:
    """The DONE maps to send, in order, for one task."""
    text = str(task.get("text", ""))
    summary = f"reviewed: {text.splitlines()[0] if text else ''}"
    ids = {
        "turn_id": str(task["turn_id"]),
        "task_id": str(task["task_id"]),
        "signal_id": f"sig-{task['task_id']}",
    }
    right = done(name, summary, **ids)
    if mode == "duplicate":
        return [right, right]
    if mode == "wrong_agent":
        wrong_ids = {**ids, "signal_id": f"sig-{IMPOSTOR}-{task['task_id']}"}
        return [done(IMPOSTOR, f"{IMPOSTOR} says: {summary}", **wrong_ids), right]
    if mode == "no_ids":
        return [done(name, summary)]
    return [right]


async def verdict_of(nc: Any, subject: str, payload: bytes, timeout: float) -> dict[str, Any]:
    """Store one DONE and wait for the node's final verdict on a private inbox."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.jetstream().publish(subject, payload, headers={"Actline-Reply": inbox})
        while True:
            msg = await sub.next_msg(timeout=timeout)
            reply = msgpack.unpackb(msg.data, raw=False, strict_map_key=False)
            if not str(reply.get("detail") or "").startswith("stored;"):
                return dict(reply)
    finally:
        await sub.unsubscribe()


async def answer(nc: Any, task: dict[str, Any], args: argparse.Namespace) -> None:
    if args.mode == "late" and args.delay > 0:
        await asyncio.sleep(args.delay)
    for signal in plan(task, args.name, args.mode):
        payload = msgpack.packb(signal)
        try:
            reply = await verdict_of(nc, str(task["done_subject"]), payload, args.timeout)
        except Exception as exc:  # report it to the test rather than dying silently
            emit({"event": "reply", "agent": signal["agent"], "error": repr(exc)})
            continue
        emit(
            {
                "event": "reply",
                "agent": signal["agent"],
                "signal_id": signal.get("signal_id"),
                "kind": reply.get("kind"),
                "code": reply.get("code"),
                "detail": reply.get("detail"),
                "message": reply.get("message"),
            }
        )


async def serve(args: argparse.Namespace) -> None:
    nc = await nats.connect(args.nats, name=f"agent-{args.name}")
    tasks: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_task(msg: Any) -> None:
        try:
            task = msgpack.unpackb(msg.data, raw=False, strict_map_key=False)
        except Exception as exc:
            emit({"event": "bad_task", "error": repr(exc)})
            return
        if not isinstance(task, dict) or task.get("kind") != "agent.task":
            emit({"event": "bad_task", "error": f"not an agent.task: {task!r}"[:300]})
            return
        await tasks.put(task)

    await nc.subscribe(f"{args.prefix}.agent.{args.name}.inbox", cb=on_task)
    await nc.flush()
    emit("ready")
    try:
        while True:
            task = await tasks.get()
            emit(
                {
                    "event": "task",
                    "agent": task.get("agent"),
                    "conversation_id": task.get("conversation_id"),
                    "turn_id": task.get("turn_id"),
                    "task_id": task.get("task_id"),
                }
            )
            await answer(nc, task, args)
    finally:
        await nc.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", required=True, help="NATS URL")
    parser.add_argument("--prefix", required=True, help="subject prefix, e.g. al")
    parser.add_argument("--name", required=True, help="the agent's name (its routing key)")
    parser.add_argument("--mode", choices=MODES, default="normal")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds to wait in late mode")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a verdict")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
