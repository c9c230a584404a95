"""The public wire contract: other programs build these from plain dicts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgpack
import pytest

from actline import messages
from actline.messages import Subjects, decode, encode, from_dict

CONTRACT: dict[str, dict[str, Any]] = {
    "turn.request": {
        "conversation_id": "conv-1",
        "turn_id": "turn-1",
        "text": "What changed in the release?",
        "attachments": [{"name": "notes.txt", "mime": "text/plain", "data": b"hello"}],
        "user_id": "u-7",
        "timezone": "Europe/Berlin",
        "config": {"max_iterations": 4, "max_tokens": 20000, "model": "claude-sonnet-4-5"},
    },
    "turn.accepted": {"conversation_id": "conv-1", "turn_id": "turn-1", "node": "node-a"},
    "turn.result": {
        "conversation_id": "conv-1",
        "turn_id": "turn-1",
        "status": "completed",
        "answer": "It ships in May [[S:1]].",
        "followups": ["What about pricing?"],
        "sources_used": [1],
        "usage": {"input_tokens": 120, "output_tokens": 40, "cache_read_tokens": 900},
        "rounds": 3,
        "error": None,
    },
    "agent.task": {
        "agent": "reviewer",
        "conversation_id": "conv-1",
        "turn_id": "turn-1",
        "task_id": "task-1",
        "text": "Review the plan.",
        "done_subject": "al.agent.reviewer.done",
    },
    "agent.done": {
        "agent": "reviewer",
        "turn_id": "turn-1",
        "task_id": "task-1",
        "signal_id": "sig-1",
        "summary": "reviewed 3 items",
        "artifacts": [{"path": "fi:turn-1.outputs/review.md"}],
    },
    "react.skip_waiting": {"turn_id": "turn-1"},
    "react.cancel": {"turn_id": "turn-1"},
    "turn.approval": {
        "turn_id": "turn-1",
        "approval_id": "ap-1",
        "approved": False,
        "by": "alice",
        "reason": "not on prod",
    },
    "stream.delta": {
        "conversation_id": "conv-1",
        "turn_id": "turn-1",
        "channel": "answer",
        "text": "It ships",
        "seq": 0,
    },
    "react.progress": {
        "conversation_id": "conv-1",
        "turn_id": "turn-1",
        "phase": "waiting",
        "round": 2,
        "detail": "waiting for reviewer",
    },
}


@pytest.mark.parametrize("kind", sorted(CONTRACT))
def test_public_kind_builds_from_a_plain_dict_with_exactly_the_contract_fields(kind: str) -> None:
    fields = CONTRACT[kind]
    msg = from_dict({"kind": kind, **fields})
    assert msg.kind == kind
    dumped = msg.model_dump(mode="python")
    for name, value in fields.items():
        got = dumped[name]
        if isinstance(value, dict) and isinstance(got, dict):
            assert {k: got[k] for k in value} == value
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            assert [{k: g[k] for k in v} for v, g in zip(value, got, strict=True)] == value
        else:
            assert got == value, name


@pytest.mark.parametrize("kind", sorted(CONTRACT))
def test_a_foreign_program_can_send_plain_msgpack(kind: str) -> None:
    # An outside program that only has a msgpack library and the field names.
    data = msgpack.packb({"kind": kind, **CONTRACT[kind]})
    assert decode(data).kind == kind


@pytest.mark.parametrize("kind", sorted(CONTRACT))
def test_a_foreign_program_can_read_what_actline_sends(kind: str) -> None:
    data = encode(from_dict({"kind": kind, **CONTRACT[kind]}))
    plain = msgpack.unpackb(data, timestamp=3)
    assert plain["kind"] == kind
    assert set(CONTRACT[kind]) <= set(plain)
    assert isinstance(plain["ts"], datetime) and plain["ts"].tzinfo is not None


def test_done_signal_may_omit_turn_and_task() -> None:
    done = from_dict({"kind": "agent.done", "agent": "reviewer", "summary": "done"})
    assert done.turn_id is None and done.task_id is None and done.signal_id


def test_extra_optional_fields_from_newer_senders_are_ignored() -> None:
    msg = from_dict({"kind": "react.cancel", "turn_id": "t1", "added_later": 3})
    assert msg.turn_id == "t1"


def test_contract_subjects() -> None:
    s = Subjects()
    assert s.turn_submit == "al.turn.submit"
    assert s.stream("conv-1") == "al.stream.conv-1"
    assert s.result("turn-1") == "al.result.turn-1"
    assert s.agent_inbox("reviewer") == "al.agent.reviewer.inbox"
    assert s.agent_done == "al.agent.done"
    assert s.agent_done_of("reviewer") == "al.agent.reviewer.done"
    assert s.turn_control("turn-1") == "al.turn.turn-1.control"


def test_result_status_values() -> None:
    for status in ("completed", "cancelled", "budget_exhausted", "failed"):
        assert from_dict(
            {"kind": "turn.result", "conversation_id": "c", "turn_id": "t", "status": status}
        )
    with pytest.raises(messages.DecodeError, match="status"):
        from_dict({"kind": "turn.result", "conversation_id": "c", "turn_id": "t", "status": "done"})


def test_usage_adds_up() -> None:
    a = messages.Usage(input_tokens=10, output_tokens=2, cache_read_tokens=100, model="m")
    b = messages.Usage(input_tokens=5, output_tokens=1, cache_write_5m_tokens=50)
    total = a + b
    assert (total.input_tokens, total.output_tokens, total.cache_read_tokens) == (15, 3, 100)
    assert total.total_input_tokens == 15 + 100 + 50 and total.model == "m"
    assert datetime.now(UTC)  # timestamps elsewhere are UTC; see test_codec
