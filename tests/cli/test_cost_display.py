"""What turns cost, as the commands show it: ``actline ask`` after the answer, ``actline
timeline --list`` per conversation, ``actline timeline CID`` per turn (from the stored turn
results), ``actline trace`` per turn and model call. Real subprocesses with an embedded
nats-server, the offline model and a real LMDB home."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from actline.llm.pricing import format_usd, price
from actline.messages import Cost, ReActResult, Usage
from actline.stored import open_existing, turn_cost, turn_costs
from tests.cli.test_cli_commands import CID, actline, clean_env

USD = r"\$\d+\.\d{4}"


@pytest.fixture(scope="module")
def two_turns(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """Two ``actline ask`` turns in one conversation: (home, conversation id, their stdout)."""
    home = tmp_path_factory.mktemp("priced") / "home"
    first = actline("ask", "How do the pricing tiers differ?", env=clean_env(home))
    match = CID.search(first.stdout)
    assert match, first.stdout + first.stderr
    cid = match.group(1)
    second = actline("ask", "--conversation", cid, "And the limits?", env=clean_env(home))
    assert second.returncode == 0, second.stderr
    return home, cid, [first.stdout, second.stdout]


def stored(home: Path, cid: str) -> list[Cost]:
    store = open_existing(home)
    try:
        return [t.cost for t in turn_costs(store, cid)]
    finally:
        store.close()


def test_ask_prints_what_the_turn_cost_and_what_caching_saved(
    two_turns: tuple[Path, str, list[str]],
) -> None:
    home, cid, outputs = two_turns
    costs = stored(home, cid)
    assert len(costs) == 2 and all(c.total_usd > 0 for c in costs)
    for out, cost in zip(outputs, costs, strict=True):
        line = next(x for x in out.splitlines() if x.startswith("cost "))
        assert line.startswith(f"cost {format_usd(cost.total_usd)} · caching saved ")
        assert "priced as extractive" in line


def test_timeline_list_shows_each_conversations_cost(
    two_turns: tuple[Path, str, list[str]],
) -> None:
    home, cid, _ = two_turns
    total = sum((c for c in stored(home, cid)), Cost())
    table = actline("timeline", "--list", env=clean_env(home))
    assert table.returncode == 0, table.stderr
    assert "cost" in table.stdout and "caching saved" in table.stdout
    [row] = [line for line in table.stdout.splitlines() if cid in line]
    assert format_usd(total.total_usd) in row and format_usd(total.saved_usd) in row
    assert "cost by day (UTC)" in table.stdout
    store = open_existing(home)
    try:
        turns = turn_costs(store, cid)
    finally:
        store.close()
    for day in {t.ts[:10] for t in turns}:
        that_day = [t.cost for t in turns if t.ts.startswith(day)]
        [line] = [x for x in table.stdout.splitlines() if x.strip("│ ").startswith(day)]
        assert format_usd(sum(that_day, Cost()).total_usd) in line
        assert f" {len(that_day)} " in line
    listed = actline("timeline", "--list", "--json", env=clean_env(home))
    [data] = [r for r in map(json.loads, listed.stdout.splitlines()) if r["conversation_id"] == cid]
    assert data["turns"] == 2 and not data["cost_estimated"]
    assert data["cost_usd"] == pytest.approx(total.total_usd)
    assert data["saved_usd"] == pytest.approx(total.saved_usd)


def test_timeline_of_a_conversation_shows_each_turns_cost(
    two_turns: tuple[Path, str, list[str]],
) -> None:
    home, cid, _ = two_turns
    shown = actline("timeline", cid, env=clean_env(home))
    assert shown.returncode == 0, shown.stderr
    rows = [
        line
        for line in shown.stdout.splitlines()
        if re.search(r"\bt-[A-Za-z0-9]+\b.*completed", line)
    ]
    costs = stored(home, cid)
    assert len(rows) == 2
    for row, cost in zip(rows, costs, strict=True):
        assert format_usd(cost.total_usd) in row
    [total] = [line for line in shown.stdout.splitlines() if re.search(rf"\ball\b.*{USD}", line)]
    assert format_usd(sum(costs, Cost()).total_usd) in total
    assert "priced as extractive" in shown.stdout


def test_trace_shows_the_turns_cost_and_its_model_calls(
    two_turns: tuple[Path, str, list[str]],
) -> None:
    home, cid, _ = two_turns
    shown = actline("trace", "--last", env=clean_env(home))
    assert shown.returncode == 0, shown.stderr
    [turn_line] = [line for line in shown.stdout.splitlines() if "── turn " in line]
    assert f"cost {format_usd(stored(home, cid)[-1].total_usd)}" in turn_line
    assert "caching saved" in turn_line
    models = [line for line in shown.stdout.splitlines() if "── model " in line]
    assert models and all(re.search(rf"cost {USD}", line) for line in models)


def test_a_result_stored_before_turns_were_priced_is_priced_from_its_usage() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=0, model="claude-haiku-4-5")
    old = ReActResult(conversation_id="c1", turn_id="t1", status="completed", usage=usage)
    record = {"status": "completed", "turn_id": "t1", "result": old.model_dump(mode="json")}
    del record["result"]["cost"]  # as the field did not exist
    found = turn_cost("t1", record)
    assert found is not None and found.cost == price(usage)
    assert found.cost.total_usd == pytest.approx(1.0)
    assert turn_cost("t2", {"status": "running", "round": 3}) is None  # a checkpoint


def test_ask_json_carries_the_cost_in_the_result(tmp_path: Path) -> None:
    result = actline("ask", "What are the limits?", "--json", env=clean_env(tmp_path / "home"))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    parsed = ReActResult.model_validate(
        {k: v for k, v in data.items() if k != "canvas"}, strict=False
    )
    assert parsed.cost is not None and parsed.cost == price(parsed.usage)
