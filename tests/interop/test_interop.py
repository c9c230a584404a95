"""Whole actline turns against a model server, through both model APIs.

Every scenario of ``tests.interop.scenarios`` runs per kind of server and per API. Whatever
the model says, each turn must end (completed, or best effort: protocol_failed or
budget_exhausted, or failed) with an answer, no error the runtime did not classify and no
more repair rounds in a row than the turn allows; a hang fails the scenario at its
timeout; the node serves the next turn. Against the local servers (the offline
``ExtractiveModel``) every turn also completes, cites its sources and keeps the decision
protocol, the outside agent gets its task and the followup joins.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .endpoints import Endpoint
from .records import TurnRecord, keep_turns
from .scenarios import REVIEW, SCENARIOS


async def run(name: str, endpoint: Endpoint, tmp_path: Path) -> list[TurnRecord]:
    records = await SCENARIOS[name](endpoint, tmp_path / "home")
    if endpoint.kind == "llama":
        keep_turns(endpoint.api, records)
    for record in records:
        print(endpoint.label, summary(record))
    assert records, f"{name} ran no turn"
    problems = [p for record in records for p in record.problems()]
    assert not problems, "\n".join(problems)
    if endpoint.kind == "local":
        expect_kept_protocol(records)
    return records


def summary(record: TurnRecord) -> str:
    return (
        f"{record.scenario}[{record.turn}] {record.status} rounds={record.rounds} "
        f"violations={record.violations} repairs={record.repair_runs} "
        f"seconds={record.seconds} error={record.error!r} notes={record.notes}"
    )


def expect_kept_protocol(records: Sequence[TurnRecord]) -> None:
    """The offline model completes every turn from the documents, within the protocol."""
    for record in records:
        assert record.status == "completed", summary(record)
        assert record.violations == 0 and record.rounds >= 2, summary(record)
        assert record.sources, summary(record)
        assert not record.notes, summary(record)


async def test_actline_ask_in_a_child_process_ends_its_turn_with_an_answer(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    [record] = await run("ask", endpoint, tmp_path)
    assert record.conversation_id and record.turn_id


async def test_a_conversation_of_two_turns_ends_each_turn_with_an_answer(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    records = await run("conversation", endpoint, tmp_path)
    assert len(records) == 2 and len({r.conversation_id for r in records}) == 1
    assert len({r.turn_id for r in records}) == 2


async def test_a_followup_joins_the_running_turn(endpoint: Endpoint, tmp_path: Path) -> None:
    [record] = await run("followup", endpoint, tmp_path)
    assert record.followup_joined, record.notes


async def test_work_handed_to_an_outside_agent_comes_back(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    [record] = await run("handoff", endpoint, tmp_path)
    if endpoint.kind == "local":  # a weak model may never call agent.send: recorded, not failed
        assert record.handed_off and REVIEW in record.answer, record.answer


async def test_runtime_stream_yields_the_turn_to_its_result(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    [record] = await run("stream", endpoint, tmp_path)
    assert record.seconds is not None
