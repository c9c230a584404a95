"""The Ray job: node actors on a real local Ray, a real nats-server, the offline model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.ray_job import load_requests, main
from bus import EmbeddedNats

KB = Path(__file__).resolve().parents[2] / "examples" / "kb"
QUESTIONS = (
    "How do the pricing tiers differ?",
    "What are the quotas?",
    "How do I back up a cluster?",
    "How does retention work?",
)


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
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


def test_two_node_actors_serve_a_batch_of_turns(
    ray_local: Any, fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    turns = tmp_path / "turns.jsonl"
    rows = write_turns(turns, conversations=12, turns=1)
    out = tmp_path / "results.jsonl"
    args = ["--nats", fresh_nats.url, "--nodes", "2", "--cpus-per-node", "0.5"]
    args += ["--requests", str(turns), "--out", str(out), "--home", str(tmp_path / "home")]
    status = main([*args, "--docs", str(KB)])
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert status == 0
    assert [r["turn_id"] for r in results] == [r["turn_id"] for r in rows]
    assert {r["status"] for r in results} == {"completed"}
    homes = sorted(p.name for p in (tmp_path / "home").iterdir())
    assert homes == ["ray-node-0", "ray-node-1"]  # each node actor keeps its own LMDB


def test_a_bad_requests_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text('{"conversation_id": "c1", "turn_id": "t1", "text": "hi"}\n{"nope": 1}\n')
    with pytest.raises(ValueError, match=r"turns\.jsonl:2: not a turn\.request"):
        load_requests(path)
