"""A standalone outside agent for the actor tests, written against the wire contract only.

It uses plain nats-py and msgpack (no actline import) so that it proves an outside
program can answer tasks with nothing but the documented protocol (``docs/architecture.md``
and ``actors/client/agent.py``): it says ``agent.hello`` (``first``) on
``<prefix>.agent.<name>.hello``, pulls its ``agent.task`` maps from the durable consumer the
``agent.welcome`` names (acking each on receipt), repeats the hello every ``beat_s``, and
answers each task with ``agent.done`` maps on the task's ``done_subject`` (its own DONE
subject): published to JetStream (the DONE stream stores them; its acknowledgement says
so) with the ``Actline-Reply`` header naming an inbox, where the node's verdict arrives
(an ``ack`` whose detail starts with ``stored;`` means held until its turn runs: the
final verdict follows). ``wrong_agent`` first sends a DONE naming an impostor on its own
subject (which the node refuses: the subject is the agent's identity).

    python tests/actors/agent_process.py --nats URL --prefix PREFIX --name reviewer \
        --mode normal|late|duplicate|wrong_agent|no_ids [--delay S] [--creds FILE]

Stdout, one line each, flushed: ``ready`` once its inbox is bound, then a JSON object per
task received (``{"event": "task", ...}``) and per reply to a DONE it sent
(``{"event": "reply", "agent": ..., "kind": ..., "code": ..., "detail": ...}``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from typing import Any

import msgpack
import nats
import nats.errors

MODES = ("normal", "late", "duplicate", "wrong_agent", "no_ids")
IMPOSTOR = "impostor"


def emit(obj: dict[str, Any] | str) -> None:
    line = obj if isinstance(obj, str) else json.dumps(obj, default=str, sort_keys=True)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def done(agent: str, summary: str, **ids: str) -> dict[str, Any]:
    """An ``agent.done`` map; ``ts`` is left to the receiver's default."""
    return {"kind": "agent.done", "agent": agent, "summary": summary, "artifacts": [], **ids}


def plan(task: dict[str, Any], name: str, mode: str) -> list[tuple[str, dict[str, Any]]]:
    """The DONE maps to send, in order, for one task, each with its subject."""
    text = str(task.get("text", ""))
    summary = f"reviewed: {text.splitlines()[0] if text else ''}"
    ids = {
        "turn_id": str(task["turn_id"]),
        "task_id": str(task["task_id"]),
        "signal_id": f"sig-{task['task_id']}",
    }
    own = str(task["done_subject"])
    right = (own, done(name, summary, **ids))
    if mode == "duplicate":
        return [right, right]
    if mode == "wrong_agent":  # a DONE naming someone else, on this agent's own subject
        wrong_ids = {**ids, "signal_id": f"sig-{IMPOSTOR}-{task['task_id']}"}
        return [(own, done(IMPOSTOR, f"{IMPOSTOR} says: {summary}", **wrong_ids)), right]
    if mode == "no_ids":
        return [(own, done(name, summary))]
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
    for subject, signal in plan(task, args.name, args.mode):
        payload = msgpack.packb(signal)
        try:
            reply = await verdict_of(nc, subject, payload, args.timeout)
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


async def hello(nc: Any, args: argparse.Namespace, *, first: bool) -> dict[str, Any]:
    """One ``agent.hello``; the node's ``agent.welcome`` (an error reply raises)."""
    payload = msgpack.packb({"kind": "agent.hello", "agent": args.name, "first": first})
    msg = await nc.request(f"{args.prefix}.agent.{args.name}.hello", payload, timeout=5)
    welcome = msgpack.unpackb(msg.data, raw=False, strict_map_key=False)
    if welcome.get("kind") != "agent.welcome":
        raise RuntimeError(f"hello refused: {welcome!r}")
    return dict(welcome)


async def beat(nc: Any, args: argparse.Namespace, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await hello(nc, args, first=False)
        except Exception as exc:  # a node restarting: the next beat tries again
            emit({"event": "beat_failed", "error": repr(exc)})


def public_key(creds: str) -> str:
    """The user's public key in a ``.creds`` file: the ``sub`` of its JWT."""
    with open(creds) as file:
        token = file.read().split("-----BEGIN NATS USER JWT-----")[1].split("---")[0].strip()
    body = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["sub"])


async def serve(args: argparse.Namespace) -> None:
    options: dict[str, Any] = {"name": f"agent-{args.name}"}
    if args.creds:  # replies come to the one inbox the agent may read: _INBOX.<its key>.>
        options["user_credentials"] = args.creds
        options["inbox_prefix"] = f"_INBOX.{public_key(args.creds)}"
    nc = await nats.connect(args.nats, **options)
    welcome = await hello(nc, args, first=True)
    pull = await nc.jetstream().pull_subscribe_bind(
        durable=welcome["consumer"], stream=welcome["stream"]
    )
    beating = asyncio.create_task(beat(nc, args, float(welcome["beat_s"])))
    emit("ready")
    try:
        while True:
            try:
                [msg] = await pull.fetch(1, timeout=1)
            except nats.errors.TimeoutError:
                continue
            await msg.ack()
            try:
                task = msgpack.unpackb(msg.data, raw=False, strict_map_key=False)
            except Exception as exc:
                emit({"event": "bad_task", "error": repr(exc)})
                continue
            if not isinstance(task, dict) or task.get("kind") != "agent.task":
                emit({"event": "bad_task", "error": f"not an agent.task: {task!r}"[:300]})
                continue
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
        beating.cancel()
        await nc.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", required=True, help="NATS URL")
    parser.add_argument("--prefix", required=True, help="subject prefix, e.g. al")
    parser.add_argument("--name", required=True, help="the agent's name (its routing key)")
    parser.add_argument("--mode", choices=MODES, default="normal")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds to wait in late mode")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a verdict")
    parser.add_argument("--creds", default=None, help="the agent's NATS credentials file")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
