"""The cluster benchmark's fault scenarios on three replicated nats-servers, each against the
same batch without the fault (the answers depend on neither):

- ``quorum_loss``: two of the three servers are killed while two node actors run a batch
  and kept away ``outage_s``; a client submits a turn meanwhile. Reported: how long until
  that client is told the cluster has no quorum (``NoQuorum``), how many turns of the batch
  completed once the servers were back, and whether every answer equals the calm run's.
- ``server_freeze``: one server is frozen (SIGSTOP) for ``freeze_s`` while two node actors
  run a batch. Reported: the leases the node actors took over from each other (a live node
  losing its conversations would show here), turns completed, answers against the calm run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

from actline.actors.client.client import Client
from actline.bus import Bus, BusError, EmbeddedCluster, NoQuorum
from actline.messages import ReActResult
from bench.cluster.nodes import (
    LATENCY_S,
    ServerFactory,
    batch,
    completed,
    requests,
    start_nodes,
    stop_nodes,
    usages,
)

ACK_WAIT_S = 2.0
TOLD_WITHIN_S = 10.0
"""A client is to be told of lost quorum within this."""


def _answers(results: list[ReActResult]) -> dict[str, tuple[str, str]]:
    return {r.turn_id: (r.status, r.answer) for r in results}


def _calm(ray: Any, servers: ServerFactory, tmp: Path, turns: list[Any]) -> list[ReActResult]:
    """The batch on a fresh cluster and fresh node actors, without a fault."""
    with servers(tmp / "nats-calm") as server:
        actors = start_nodes(ray, server, tmp / "home-calm", 2, LATENCY_S, ACK_WAIT_S, False)
        try:
            _, results = asyncio.run(batch(server, turns, timeout_s=300))
        finally:
            stop_nodes(ray, actors)
    return results


async def _told(cluster: EmbeddedCluster) -> dict[str, Any]:
    """Submit one turn while the cluster has no quorum: what the client is told, and when."""
    bus = await Bus.connect(cluster.url, creds=cluster.creds_path("client"))
    client = Client(bus)
    started = time.monotonic()
    try:
        handle = await client.submit("What are the quotas?", conversation_id="during-outage")
        await handle.wait(60)
        return {"told": "submitted", "told_s": time.monotonic() - started}
    except NoQuorum as exc:
        return {"told": "no_quorum", "told_s": time.monotonic() - started, "message": str(exc)}
    except BusError as exc:
        return {
            "told": type(exc).__name__,
            "told_s": time.monotonic() - started,
            "message": str(exc),
        }
    finally:
        await client.close()
        await bus.close()


def quorum_loss(
    ray: Any, servers: ServerFactory, tmp: Path, *, conversations: int, outage_s: float
) -> dict[str, Any]:
    """Two of three servers away for ``outage_s`` under a batch (see the module docstring)."""
    turns = requests(tmp, conversations, "q", 3)
    calm = _calm(ray, servers, tmp, turns)
    told: dict[str, Any] = {}
    with servers(tmp / "nats-quorum") as server:
        assert isinstance(server, EmbeddedCluster), "quorum loss needs a cluster of servers"
        actors = start_nodes(ray, server, tmp / "home-quorum", 2, LATENCY_S, ACK_WAIT_S, False)
        try:

            async def fault() -> None:
                await asyncio.sleep(1.0)  # the batch under way: the fault's moment
                away = [i for i in range(server.size) if i != 0][:2]
                for i in away:
                    server.kill(i)
                told.update(await _told(server))
                rest = outage_s - told["told_s"]
                await asyncio.sleep(max(rest, 0.0))  # the outage itself
                for i in away:
                    server.restart(i)
                await server.await_ready(60)
                told["outage_s"] = max(outage_s, told["told_s"])

            seconds, results = asyncio.run(batch(server, turns, fault, timeout_s=300))
        finally:
            stop_nodes(ray, actors)
    same = _answers(results) == _answers(calm)
    return told | {
        "turns": len(results),
        "completed": completed(results),
        "seconds": seconds,
        "same_answers": same,
        "told_within_target": told.get("told") == "no_quorum"
        and float(told.get("told_s", 1e9)) <= TOLD_WITHIN_S,
    }


def server_freeze(
    ray: Any, servers: ServerFactory, tmp: Path, *, conversations: int, freeze_s: float
) -> dict[str, Any]:
    """One of three servers frozen for ``freeze_s`` under a batch (module docstring)."""
    turns = requests(tmp, conversations, "f", 3)
    calm = _calm(ray, servers, tmp, turns)
    with servers(tmp / "nats-freeze") as server:
        assert isinstance(server, EmbeddedCluster), "a server freeze needs a cluster of servers"
        actors = start_nodes(ray, server, tmp / "home-freeze", 2, LATENCY_S, ACK_WAIT_S, False)
        try:

            async def fault() -> None:
                await asyncio.sleep(1.0)  # the batch under way: the fault's moment
                pid = server.servers[0].pid
                assert pid is not None
                os.kill(pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(freeze_s)  # the freeze itself
                finally:
                    os.kill(pid, signal.SIGCONT)

            seconds, results = asyncio.run(batch(server, turns, fault, timeout_s=300))
            taken = sum(int(u.get("taken_over", 0)) for u in asyncio.run(usages(actors)))
        finally:
            stop_nodes(ray, actors)
    return {
        "turns": len(results),
        "completed": completed(results),
        "seconds": seconds,
        "freeze_s": freeze_s,
        "taken_over": taken,
        "same_answers": _answers(results) == _answers(calm),
    }
