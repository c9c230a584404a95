"""The Ray job: node actors on a real local Ray, a real nats-server, the offline model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.actors.cluster.ray_job import (
    job_tag,
    load_requests,
    main,
    node_actor_class,
    node_ids,
    run_requests,
)
from actline.actors.ownership.durable import JetStreamCopy
from actline.bus import Bus, EmbeddedNats
from actline.storage import Store

KB = Path(__file__).resolve().parents[3] / "examples" / "kb"
QUESTIONS = (
    "How do the pricing tiers differ?",
    "What are the quotas?",
    "How do I back up a cluster?",
    "How does retention work?",
)


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def write_turns(path: Path, conversations: int, turns: int) -> list[dict[str, str]]:
    rows = [
        {
            "conversation_id": f"c{c}",
            "turn_id": f"c{c}-t{t}",
            "text": QUESTIONS[(c + t) % len(QUESTIONS)],
        }
        for c in range(conversations)
        for t in range(1, turns + 1)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


@pytest.mark.timeout(300)
def test_two_node_actors_serve_40_conversations_of_2_turns_in_order(
    ray_local: Any, fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    turns = tmp_path / "turns.jsonl"
    rows = write_turns(turns, conversations=40, turns=2)
    out = tmp_path / "results.jsonl"
    args = ["--nats", fresh_nats.url, "--nodes", "2", "--cpus-per-node", "0.5"]
    args += ["--creds", str(fresh_nats.creds_path("node"))]  # the node role, as deployed
    args += ["--requests", str(turns), "--out", str(out), "--home", str(tmp_path / "home")]
    status = main([*args, "--docs", str(KB)])
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert status == 0
    assert [r["turn_id"] for r in results] == [r["turn_id"] for r in rows]
    assert {r["status"] for r in results} == {"completed"}
    homes = sorted(p.name for p in (tmp_path / "home").iterdir())
    assert homes == node_ids(job_tag(), 2)  # each node actor keeps its own LMDB
    copies = asyncio.run(durable_copies(fresh_nats.url, [f"c{c}" for c in range(40)]))
    for cid, (_, blocks) in copies.items():
        prompts = [b["turn_id"] for b in blocks if b["type"] == "user.prompt"]
        assert prompts == [f"{cid}-t1", f"{cid}-t2"], cid  # both turns, in order, once
        assert [b["seq"] for b in blocks] == list(range(len(blocks)))


@pytest.mark.timeout(300)
def test_pool_actors_serve_the_model_calls_of_node_actors_without_streamers(
    ray_local: Any, fresh_nats: EmbeddedNats, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    turns = tmp_path / "turns.jsonl"
    rows = write_turns(turns, conversations=6, turns=2)
    out = tmp_path / "results.jsonl"
    args = ["--nats", fresh_nats.url, "--nodes", "1", "--cpus-per-node", "0.5"]
    args += ["--model-pools", "1", "--tool-pools", "1"]
    args += ["--creds", str(fresh_nats.creds_path("node"))]
    args += ["--requests", str(turns), "--out", str(out), "--home", str(tmp_path / "home")]
    status = main([*args, "--docs", str(KB)])
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert status == 0
    assert [r["turn_id"] for r in results] == [r["turn_id"] for r in rows]
    assert {r["status"] for r in results} == {"completed"}  # the node has no streamer
    printed = " ".join(capsys.readouterr().err.split())
    assert "pool models" in printed and "pool tools" in printed
    # the summary counts the answers that cite sources (all of them but declines, over the kb)
    cited = sum(1 for r in results if r["sources_used"])
    assert cited > 0
    assert f"12/12 turns completed: {cited} citing sources, {12 - cited} citing none" in printed
    uncited = f"{12 - cited} of 12 answers cite no source: is the knowledge folder right?"
    assert (uncited in printed) == (cited < 12), printed
    assert f"wrote {out}" in printed


async def durable_copies(url: str, cids: list[str]) -> dict[str, Any]:
    bus = await Bus.connect(url)
    try:
        copy = JetStreamCopy(bus)
        await copy.start()
        out = {}
        for cid in cids:
            rebuilt = await copy.rebuild(cid)
            assert rebuilt is not None, cid
            out[cid] = rebuilt
        return out
    finally:
        await bus.close()


@pytest.mark.timeout(300)
def test_a_killed_node_actors_conversations_finish_on_the_other(
    ray_local: Any, fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    rows = write_turns(tmp_path / "turns.jsonl", conversations=10, turns=2)
    requests = load_requests(tmp_path / "turns.jsonl")
    actor_class = node_actor_class(0.5)
    actors = [
        actor_class.remote(
            fresh_nats.url,
            {
                "home": tmp_path / "home" / f"n{i}",
                "node_id": f"n{i}",
                "knowledge_dir": KB,
                "ack_wait_s": 2.0,
                "followup_grace_s": 0.0,
            },
            model_delay=0.02,
            creds=fresh_nats.creds_path("node").read_text(),
        )
        for i in range(2)
    ]
    ray_local.get([a.start.remote() for a in actors])

    async def batch() -> list[Any]:
        bus = await Bus.connect(fresh_nats.url)
        try:
            job = asyncio.create_task(run_requests(bus, requests, timeout_s=90))
            stats = await asyncio.wrap_future(actors[0].stats.remote().future())
            while stats["turns_taken"] < 3:
                await asyncio.sleep(0.02)
                stats = await asyncio.wrap_future(actors[0].stats.remote().future())
            ray_local.kill(actors[0], no_restart=True)  # mid-batch, turns in flight
            return await job
        finally:
            await bus.close()

    try:
        results = asyncio.run(batch())
    finally:
        ray_local.get(actors[1].stop.remote())
    assert [r.turn_id for r in results] == [r["turn_id"] for r in rows]
    assert {r.status for r in results} == {"completed"}, [r.error for r in results]
    copies = asyncio.run(durable_copies(fresh_nats.url, [f"c{c}" for c in range(10)]))
    survivor = Store(tmp_path / "home" / "n1")
    killed = Store(tmp_path / "home" / "n0")  # the dead node's LMDB, as it was left
    try:
        for cid, (_, blocks) in copies.items():
            prompts = [b["turn_id"] for b in blocks if b["type"] == "user.prompt"]
            assert prompts == [f"{cid}-t1", f"{cid}-t2"], cid
            ids = [b["id"] for b in blocks]
            assert len(ids) == len(set(ids)), cid  # nothing duplicated
            assert [b["seq"] for b in blocks] == list(range(len(blocks)))
            local = list(survivor.iter_blocks(cid))
            if local:  # the survivor served this conversation last: its LMDB equals the copy
                assert [b["id"] for b in local] == ids, cid
            dead = [b["id"] for b in killed.iter_blocks(cid)]
            # what the killed node stored is a beginning of the copy, plus at most rounds it
            # never got into the copy (possibly its very first): those ids are not in the copy
            prefix = 0
            while prefix < min(len(dead), len(ids)) and dead[prefix] == ids[prefix]:
                prefix += 1
            assert len(dead) == len(set(dead)), cid
            assert not set(dead[prefix:]) & set(ids), cid
    finally:
        survivor.close()
        killed.close()


def test_a_bad_requests_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text('{"conversation_id": "c1", "turn_id": "t1", "text": "hi"}\n{"nope": 1}\n')
    with pytest.raises(ValueError, match=r"turns\.jsonl:2: not a turn\.request"):
        load_requests(path)


def test_the_cluster_benchmark_measures_a_small_batch(ray_local: Any, tmp_path: Path) -> None:
    from bench.cluster import embedded, throughput

    row = throughput(ray_local, embedded, tmp_path, model="io", nodes=1, per_node=6, warmup=2)
    assert row["turns"] == row["completed"] == 6 and row["warmup_completed"] == 2
    assert row["turns_per_s"] > 0 and row["seconds"] > 0 and row["node_cpu_ms_per_turn"] > 0
