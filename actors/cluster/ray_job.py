"""actline as a Ray job: N node actors that share one NATS, and an optional batch of turns.

    .venv/bin/python -m actline.actors.cluster.ray_job --nats URL --insecure --nodes 2 \
        --docs examples/kb [--model NAME] [--config actline.toml] \
        [--requests turns.jsonl --out results.jsonl]
    ray job submit --working-dir . --runtime-env-json '{"env_vars": {...}}' \
        -- /path/to/actline/.venv/bin/python -m actline.actors.cluster.ray_job \
        --nats URL --creds node.creds --docs examples/kb --nodes 4 --requests turns.jsonl

Run it with the project's Python (the venv's): ``ray job submit`` runs the entrypoint in a
shell on the head node, where a bare ``python`` is often the system's, without the project's
dependencies; such a Python gets one line naming the fix (``environment``).

Each ``NodeActor`` is an async Ray actor that runs one ``actline.actors.node.node.Node`` in cluster
mode (its asyncio loop, its NATS connection, its own LMDB under ``<home>/<node id>``; conversations
leased in a JetStream KV bucket, every round copied to JetStream) with the resources it
declares. Node ids are ``ray-<job>-node-<i>`` (``job_tag``: the Ray job id and the Ray node the
driver runs on), fixed for the job's life and printed at its start, so that two jobs on one
NATS never share a node id, a node key or a lease owner. A node actor that dies leaves its
conversations to the others: its leases are taken once its beat is gone
(``ACTLINE_NODE_TTL``), its turns come back after ``--ack-wait`` and resume on another node
from the durable copy.
The driver waits until every node serves. With ``--requests`` (JSON lines of ``turn.request``
dicts) it submits the turns — the turns of one conversation one after another, conversations
in parallel — collects every ``turn.result`` with a progress bar, writes them to ``--out``,
prints how many answers cite sources, cite none (declined among them), were best effort,
failed or timed out (``summary``), says when answers cite no source, and exits 1 when any
turn did not complete or timed out. Without ``--requests`` it serves until SIGINT/SIGTERM.

The knowledge folder: ``--docs``, else ``ACTLINE_DOCS``, else ``docs`` in the settings file;
the job refuses to start without one (``--no-docs`` runs without), or with one that does not
exist or holds no document (``options.check_knowledge``). A relative folder is read from the
job's working directory, on the head and in every actor (``--working-dir .`` uploads it).
``ray.init()`` joins the cluster named by ``RAY_ADDRESS`` (as under ``ray job submit``) or
starts a local one.

The model and the turns' profile: the node actors build them from the same settings as
``actline serve`` (``actline.actors.configuration.settings_file.load_settings``: defaults <
``--config`` / ``ACTLINE_CONFIG`` / ``./actline.toml`` < ``ACTLINE_*`` < ``--model``,
``--api``, ``--base-url``, ``--profile``, ``--docs``; the ``[llm]`` and ``[models.NAME]``
tables, which travel to every actor). The driver resolves
them once and refuses to start what cannot run (a claude model without
``ANTHROPIC_API_KEY``) with the fix, before any actor starts; every actor gets the node
settings and the ``[llm]`` settings without the key. The key reaches the actors through
the environment: the job's runtime environment (``ray job submit --runtime-env-json
'{"env_vars": {"ANTHROPIC_API_KEY": ...}}'``, inherited by every actor of the job), and the
driver passes the key it read in each actor's ``runtime_env`` too (never printed). A turn
whose ``config.model`` names a model its node cannot serve fails with the reason
(``actline.actors.configuration.models``). ``model_delay`` / ``model_latency`` (benchmarks) slow any
model down.

Credentials: ``--creds FILE`` (or ``ACTLINE_NATS_CREDS``) names the node credentials
(``actline creds node``); the driver reads the file and hands its text to every node
actor, which keeps it in a 0600 file under its home (the worker hosts need no copy).
A server without authentication needs ``--insecure``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from .environment import missing_dependency, require

try:
    from rich.console import Console
    from rich.progress import Progress

    from actline import messages
    from actline.actors.client.client import Client, TurnHandle
    from actline.actors.configuration.settings import NodeSettings
    from actline.actors.configuration.settings_file import load_settings
    from actline.actors.errors import RequestsFileError, SettingsError, SettingsFileError
    from actline.bus import Bus, NoQuorum
    from actline.llm import LLMSettings, ModelConfigError, check_servable
    from actline.llm.reachable import check_reachable
    from actline.messages import ReActResult, TurnRequest, diag

    from .options import check_knowledge, parse
    from .summary import TIMED_OUT, summarise
except ModuleNotFoundError as exc:  # a Python without the project's dependencies
    raise missing_dependency(exc) from None

__all__ = ["NodeActor", "job_tag", "load_requests", "main", "node_ids", "run_requests"]

READY_TIMEOUT_S = 120.0
POOL_CPUS = 0.5
"""The ``num_cpus`` a pool actor declares."""
RESUBMIT_S = 2.0
"""How often a turn is submitted again while the NATS cluster has no quorum."""


class NodeActor:
    """One node inside a Ray actor (wrapped with ``ray.remote`` by ``node_actor_class``)."""

    def __init__(
        self,
        nats_url: str,
        settings: dict[str, Any],
        *,
        model_delay: float = 0.0,
        model_latency: float = 0.0,
        creds: str | None = None,
        llm: dict[str, Any] | None = None,
    ) -> None:
        diag.configure_from_env()  # ACTLINE_LOG_LEVEL (default WARNING), ACTLINE_LOG_FORMAT
        self.nats_url = nats_url
        self.settings = NodeSettings(**{"cluster": True, **settings})
        self.model_delay = model_delay
        self.model_latency = model_latency
        self.node: Any = None
        self.bus: Bus | None = None
        self.creds = creds
        """The text of the node credentials (None: ``ACTLINE_NATS_CREDS``, or none)."""
        self.llm = llm
        """``LLMSettings`` fields but the key (None: ``LLMSettings.from_env``)."""

    def llm_settings(self) -> LLMSettings:
        """The model settings: the driver's (with its configured models, registered here),
        with this process's key of their API (``ANTHROPIC_API_KEY`` or ``OPENAI_API_KEY``)."""
        from actline.llm import register_models

        if self.llm is None:
            return LLMSettings.from_env(model=self.settings.model)
        env = os.environ
        values = {**self.llm, "model": self.settings.model}
        values["api_key"] = env.get(key_variable(values.get("api", "messages"))) or None
        if values.get("api", "messages") == "messages":
            values["base_url"] = values.get("base_url") or env.get("ANTHROPIC_BASE_URL") or None
        settings = LLMSettings(**values)
        register_models(settings.models)
        return settings

    async def start(self) -> str:
        """Connect and serve; returns the node id once the node pulls turns."""
        from actline.actors.node.node import Node
        from actline.llm import ExtractiveModel, make_model
        from actline.tools import KnowledgeSpace

        if self.node is not None:
            return str(self.node.node_id)
        path = None
        if self.creds is not None:
            from actline.bus.auth import write_secret

            path = write_secret(self.settings.home / "node.creds", self.creds)
        self.bus = await Bus.connect(
            self.nats_url, name=f"actline-{self.settings.node_id}", creds=path
        )
        llm = self.llm_settings()
        model: Any = (
            ExtractiveModel(delay=self.model_delay)
            if self.settings.model == "extractive"
            else make_model(llm)  # ModelConfigError (the fix) when it cannot run here
        )
        if self.model_latency:
            model = FixedLatency(model, self.model_latency)
        knowledge = None
        if self.settings.knowledge_dir is not None:
            knowledge = await asyncio.to_thread(KnowledgeSpace, self.settings.knowledge_dir)
        self.node = Node(self.bus, self.settings, model=model, llm=llm, knowledge=knowledge)
        await self.node.start()
        return str(self.node.node_id)

    async def stats(self) -> dict[str, Any]:
        node = self.node
        if node is None:
            return {"serving": False}
        return {
            "serving": True,
            "node_id": node.node_id,
            "conversations": len(node.conversations),
            "turns_taken": node.turns_taken,
            "turns_settled": node.turns_settled,
        }

    async def stop(self) -> None:
        if self.node is not None:
            await self.node.stop()
            self.node = None
        if self.bus is not None:
            await self.bus.close()
            self.bus = None


class FixedLatency:
    """A model that answers after a fixed latency per call (benchmarks of the cluster)."""

    def __init__(self, model: Any, seconds: float) -> None:
        self.model = model
        self.seconds = seconds
        self.name = getattr(model, "name", "model")

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        await asyncio.sleep(self.seconds)
        async for chunk in self.model.stream(request):
            yield chunk


def node_actor_class(num_cpus: float = 1.0, memory_mb: int = 512) -> Any:
    """``NodeActor`` as a Ray actor class declaring its resources."""
    import ray

    return ray.remote(num_cpus=num_cpus, memory=memory_mb * 1024 * 1024)(NodeActor)


def job_tag() -> str:
    """What tells this Ray job apart from every other job on the same NATS: its Ray job id
    (``ray job list``) and the first 8 hex digits of the Ray node its driver runs on (job
    ids start again at ``01000000`` in every Ray cluster: two runs that each start a local
    Ray would share them). Fixed for the driver's life; call it after ``ray.init``."""
    import ray

    context = ray.get_runtime_context()
    return f"{context.get_job_id()}-{context.get_node_id()[:8]}"


def node_ids(tag: str, count: int) -> list[str]:
    """The node ids of a job's ``count`` node actors: ``ray-<tag>-node-<i>``."""
    return [f"ray-{tag}-node-{i}" for i in range(count)]


def load_requests(path: Path) -> list[TurnRequest]:
    """The turn requests of a JSONL file (``ValueError`` naming the bad line)."""
    out: list[TurnRequest] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            data.setdefault("kind", "turn.request")
            message = messages.from_dict(data)
        except (ValueError, messages.DecodeError) as exc:
            raise RequestsFileError(str(path), number, f"not a turn.request: {exc}") from None
        if not isinstance(message, TurnRequest):
            raise RequestsFileError(str(path), number, f"a {message.kind}, not a turn.request")
        out.append(message)
    return out


async def run_requests(
    bus: Bus,
    requests: Sequence[TurnRequest],
    *,
    timeout_s: float = 300.0,
    console: Console | None = None,
) -> list[ReActResult]:
    """Submit the turns (each conversation's in order, conversations at once) and return
    every result (only results: the turns' streams are not followed)."""
    client = Client(bus)
    by_conversation: dict[str, list[TurnRequest]] = defaultdict(list)
    for request in requests:
        by_conversation[request.conversation_id].append(request)
    results: dict[str, ReActResult] = {}
    with Progress(console=console or Console(stderr=True), transient=False) as progress:
        task = progress.add_task("turns", total=len(requests))
        outages = Outages(progress.console)

        async def conversation(turns: list[TurnRequest]) -> None:
            for request in turns:
                # Results only: the turns' deltas and cards would cost this driver
                # ~3 ms of CPU per turn (bench/cluster.py), taken from the node actors.
                handle = await submit_through_outages(client, request, outages)
                try:
                    result = await wait_through_outages(handle, timeout_s, outages)
                except Exception as exc:  # the turn timed out: record it as failed
                    result = ReActResult(
                        conversation_id=request.conversation_id,
                        turn_id=request.turn_id,
                        status="failed",
                        error=f"{TIMED_OUT} {timeout_s:g}s: {exc}",
                    )
                results[request.turn_id] = result
                progress.advance(task)

        await asyncio.gather(*(conversation(turns) for turns in by_conversation.values()))
    await client.close()
    return [results[r.turn_id] for r in requests]


class Outages:
    """Says once per outage that the NATS cluster has no quorum, and when it is over."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.since: float | None = None

    def failed(self, exc: NoQuorum) -> None:
        if self.since is None:
            self.since = time.monotonic()
            self.console.print(f"[yellow]{exc}[/yellow]\n  waiting to submit again")

    def passed(self) -> None:
        if self.since is not None:
            took = time.monotonic() - self.since
            self.console.print(f"the NATS cluster has quorum again after {took:.1f}s")
            self.since = None


async def submit_through_outages(
    client: Client, request: TurnRequest, outages: Outages
) -> TurnHandle:
    """Submit ``request``; while the NATS cluster has no quorum, submit it again (the same
    turn id: a turn stored twice runs once) every ``RESUBMIT_S`` until it is stored."""
    while True:
        try:
            handle = await client.submit_request(request, follow=False)
        except NoQuorum as exc:
            outages.failed(exc)
            await asyncio.sleep(RESUBMIT_S)  # no event says the cluster is back
            continue
        outages.passed()
        return handle


async def wait_through_outages(
    handle: TurnHandle, timeout_s: float, outages: Outages
) -> ReActResult:
    """The turn's result within ``timeout_s``, waiting on while the NATS cluster has no
    quorum (the turn is kept and runs once it is back); ``TimeoutError`` after that."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no result of turn {handle.turn_id} within {timeout_s:g}s")
        try:
            result = await handle.wait(left)
        except NoQuorum as exc:
            outages.failed(exc)
            await asyncio.sleep(min(RESUBMIT_S, max(left, 0.0)))  # no event says it is back
            continue
        outages.passed()
        return result


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    return parse(argv, __doc__)


async def _drive(
    args: argparse.Namespace, actors: list[Any], console: Console, docs: Path | None
) -> int:
    ids = await asyncio.wait_for(
        asyncio.gather(*(a.start.remote() for a in actors)), READY_TIMEOUT_S
    )
    console.print(f"{len(ids)} node actor(s) serving on {args.nats}: {', '.join(ids)}")
    if args.requests is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0
    requests = load_requests(args.requests)
    bus = await Bus.connect(args.nats, name="actline-ray-job", creds=args.creds)
    try:
        results = await run_requests(bus, requests, timeout_s=args.timeout, console=console)
    finally:
        await bus.close()
    out = args.out or args.requests.with_suffix(".results.jsonl")
    with out.open("w", encoding="utf-8") as handle:
        for result in results:
            handle.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False) + "\n")
    summary = summarise(results)
    for line in summary.lines(docs):
        console.print(line, highlight=False, soft_wrap=True)
    console.print(f"wrote {out}", highlight=False, soft_wrap=True)
    return 0 if summary.all_completed else 1


def key_variable(api: str) -> str:
    """The environment variable that holds the key of ``api``."""
    return "OPENAI_API_KEY" if api == "openai" else "ANTHROPIC_API_KEY"


def job_settings(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """The node settings, the model settings without the key, and the key: resolved as
    ``actline serve`` does and checked (``ModelConfigError``: a claude model without a key)."""
    overrides = {"model": args.model, "knowledge_dir": args.docs, "profile": args.profile}
    overrides["ack_wait_s"] = args.ack_wait
    overrides |= {"api": args.api, "base_url": args.base_url}
    loaded = load_settings(args.config, overrides=overrides)
    node = loaded.node
    check_knowledge(args, node.knowledge_dir)  # SettingsError: none, missing or empty
    if args.no_docs:
        node = node.with_(knowledge_dir=None)
    check_servable(loaded.llm)
    llm = {f.name: getattr(loaded.llm, f.name) for f in fields(loaded.llm) if f.name != "api_key"}
    return {**node.as_dict(), "cluster": True}, llm, loaded.llm.api_key


def start_pools(
    args: argparse.Namespace,
    tag: str,
    nodes: dict[str, Any],
    options: dict[str, Any],
    creds: str | None,
    llm: dict[str, Any],
    key: str | None,
) -> list[Any]:
    """``--model-pools`` and ``--tool-pools`` pool actors, started and serving (each with
    the concurrency the node setting it stands in for names)."""
    if not (args.model_pools or args.tool_pools):
        return []
    import ray

    from actline.actors.cluster.pool_actor import pool_actor_class

    pool_class = pool_actor_class(POOL_CPUS)
    pools = []
    for kind, count in (("models", args.model_pools), ("tools", args.tool_pools)):
        for i in range(count):
            pool_id = f"ray-{tag}-{kind}-{i}"
            settings = {**nodes, "home": args.home / pool_id, "node_id": pool_id}
            pools.append(
                pool_class.options(name=f"actline-{pool_id}", **options).remote(
                    kind,
                    args.nats,
                    settings,
                    creds=creds,
                    llm=llm,
                    api_key_variable=key_variable(llm["api"]) if key else "",
                )
            )
    console = Console(stderr=True)
    for line in ray.get([p.start.remote() for p in pools], timeout=READY_TIMEOUT_S):
        console.print(line)
    return pools


def main(argv: Sequence[str] | None = None) -> int:
    require()  # ray, and the rest: one line naming the fix
    import ray

    args = _parse(argv)
    console = Console(stderr=True)
    if not args.nats:
        console.print("no NATS server: pass --nats nats://host:4222 or set NATS_URL")
        return 2
    if args.creds is None and not args.insecure:
        console.print(
            "no node credentials: pass --creds FILE (make it with `actline creds node`) or set "
            "ACTLINE_NATS_CREDS, or --insecure for a server without authentication"
        )
        return 2
    try:
        nodes, llm, key = job_settings(args)
        served = LLMSettings(**llm)
        if not served.offline:  # a server that does not answer the driver: before any actor
            asyncio.run(check_reachable(served.for_model(served.model)))
    except (SettingsError, SettingsFileError, ModelConfigError) as exc:
        console.print(str(exc), highlight=False, soft_wrap=True)
        return 2
    creds = None
    if args.creds is not None:
        from actline.bus import CredsInvalid, read_identity

        try:
            read_identity(args.creds)
        except CredsInvalid as exc:
            console.print(str(exc))
            return 2
        creds = args.creds.read_text()
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init()
        else:
            members = args.model_pools + args.tool_pools
            need = args.nodes * args.cpus_per_node + POOL_CPUS * members
            ray.init(num_cpus=max(2, math.ceil(need)), include_dashboard=False)
    actor_class = node_actor_class(args.cpus_per_node)
    actors = []
    options: dict[str, Any] = {}
    if key:  # the key the driver read, to every actor (merged with the job's runtime env)
        options["runtime_env"] = {"env_vars": {key_variable(llm["api"]): key}}
    tag = job_tag()
    console.print(f"Ray job {tag}: node actors {', '.join(node_ids(tag, args.nodes))}")
    if args.model_pools < 0 or args.tool_pools < 0:
        console.print("--model-pools and --tool-pools take 0 or more")
        return 2
    pools: list[Any] = start_pools(args, tag, nodes, options, creds, llm, key)
    if args.model_pools:  # every model call goes to the pools
        nodes = {**nodes, "streamers": 0}
    if args.tool_pools:  # every tool call goes to the pools
        nodes = {**nodes, "tool_workers": 0}
    for node_id in node_ids(tag, args.nodes):
        settings = {**nodes, "home": args.home / node_id, "node_id": node_id}
        actor = actor_class.options(name=f"actline-{node_id}", **options)
        actors.append(actor.remote(args.nats, settings, creds=creds, llm=llm))
    try:
        return asyncio.run(_drive(args, actors, console, nodes.get("knowledge_dir")))
    finally:
        for actor in [*actors, *pools]:
            try:
                ray.get(actor.stop.remote(), timeout=30)
            except Exception as exc:  # a dead actor has nothing left to stop
                console.print(f"[dim]stopping a node actor: {type(exc).__name__}[/dim]")


if __name__ == "__main__":
    sys.exit(main())
