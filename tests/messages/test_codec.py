"""The msgpack codec: round trips for every kind, and DecodeError for everything malformed."""

from __future__ import annotations

import pickle
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, get_origin

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actline import messages
from actline.messages import (
    MAX_PAYLOAD,
    MESSAGE_TYPES,
    DecodeError,
    EncodeError,
    PayloadTooLarge,
    TurnRequest,
    decode,
    encode,
)

from .strategies import json_like, model

ALL_KINDS = sorted(MESSAGE_TYPES)
any_message = st.one_of([model(MESSAGE_TYPES[kind]) for kind in ALL_KINDS])


@pytest.mark.parametrize("kind", ALL_KINDS)
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_kind_round_trips(kind: str, data: st.DataObject) -> None:
    msg = data.draw(model(MESSAGE_TYPES[kind]))
    assert msg.kind == kind
    back = decode(encode(msg))
    assert type(back) is type(msg)
    assert back == msg


def test_the_catalog_has_every_kind_of_the_design() -> None:
    expected = {
        "turn.request", "turn.accepted", "turn.result", "turn.followup", "turn.feedback",
        "react.progress", "stream.delta", "react.skip_waiting", "react.cancel",
        "llm.generate", "llm.result",
        "agent.task", "agent.done", "tool.call", "tool.result", "error.reply", "bus.deadletter",
        "ack",
        # an agent's inbox and presence, not part of the frozen public contract
        "agent.hello", "agent.welcome", "agents.list", "agents.listed",
        # approvals
        "turn.approval",
        # managing stored conversations (list, rename, delete, export, fork)
        "conv.manage", "conv.managed",
        # between nodes: a pulled turn passed to the node holding its conversation
        "turn.handoff",
        # between the actors of a node, with the local shortcut off
        "actor.mail", "actor.answer",
        # between nodes: the workspace of a conversation held elsewhere
        "workspace.fetch", "workspace.files", "workspace.apply",
    }  # fmt: skip
    assert set(MESSAGE_TYPES) == expected


@given(st.binary(max_size=256))
def test_random_bytes_raise_decode_error_only(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(msg=any_message, cut=st.floats(min_value=0.0, max_value=0.999))
def test_truncated_messages_raise_decode_error(msg: Any, cut: float) -> None:
    data = encode(msg)
    with pytest.raises(DecodeError):
        decode(data[: int(len(data) * cut)])


@given(json_like.filter(lambda v: not isinstance(v, dict)))
def test_msgpack_that_is_not_a_map_raises_decode_error(value: Any) -> None:
    with pytest.raises(DecodeError, match="map"):
        decode(msgpack.packb(value))


@given(st.dictionaries(st.text(max_size=8), json_like, max_size=4))
def test_maps_without_a_known_kind_raise_decode_error(value: dict[str, Any]) -> None:
    value.pop("kind", None)
    with pytest.raises(DecodeError, match="kind"):
        decode(msgpack.packb(value))
    value["kind"] = "no.such.kind"
    with pytest.raises(DecodeError, match="unknown kind"):
        decode(msgpack.packb(value))


def _wrong_value(cls: type[Any], name: str) -> Any:
    """A value of a type the field can never accept."""
    return 7 if get_origin(cls.model_fields[name].annotation) is list else [1]


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(msg=any_message, data=st.data())
def test_wrong_field_types_raise_decode_error(msg: Any, data: st.DataObject) -> None:
    cls = type(msg)
    names = [n for n in cls.model_fields if n != "kind"]
    name = data.draw(st.sampled_from(names))
    obj = msg.model_dump(mode="python")
    obj[name] = _wrong_value(cls, name)
    with pytest.raises(DecodeError, match=f"invalid {msg.kind}"):
        decode(msgpack.packb(obj, datetime=True))


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(msg=any_message, data=st.data())
def test_missing_required_fields_raise_decode_error(msg: Any, data: st.DataObject) -> None:
    cls = type(msg)
    required = [n for n, f in cls.model_fields.items() if f.is_required()]
    if not required:
        return
    obj = msg.model_dump(mode="python")
    del obj[data.draw(st.sampled_from(required))]
    with pytest.raises(DecodeError, match="Field required"):
        decode(msgpack.packb(obj, datetime=True))


def test_strings_are_not_coerced_into_numbers() -> None:
    obj = {"kind": "stream.delta", "conversation_id": "c", "turn_id": "t", "channel": "answer"}
    obj |= {"text": "x", "seq": "5"}
    with pytest.raises(DecodeError, match="seq"):
        decode(msgpack.packb(obj))


def test_payload_over_the_limit_is_refused_both_ways() -> None:
    big = TurnRequest(conversation_id="c", turn_id="t", text="x" * (MAX_PAYLOAD + 10))
    with pytest.raises(PayloadTooLarge) as info:
        encode(big)
    assert info.value.size > MAX_PAYLOAD and info.value.limit == MAX_PAYLOAD
    data = encode(big, max_size=2 * MAX_PAYLOAD)
    with pytest.raises(DecodeError, match="over the"):
        decode(data)
    assert decode(data, max_size=2 * MAX_PAYLOAD) == big


def test_unencodable_values_raise_encode_error() -> None:
    msg = TurnRequest(conversation_id="c", turn_id="t", text="x", config={"bad": {1, 2}})
    with pytest.raises(EncodeError, match=r"turn\.request"):
        encode(msg)


def test_timestamps_are_utc() -> None:
    plus2 = timezone(timedelta(hours=2))
    local = TurnRequest(
        conversation_id="c", turn_id="t", text="x", ts=datetime(2026, 1, 1, 12, tzinfo=plus2)
    )
    assert local.ts == datetime(2026, 1, 1, 10, tzinfo=UTC) and local.ts.tzinfo is UTC
    naive = TurnRequest(conversation_id="c", turn_id="t", text="x", ts=datetime(2026, 1, 1, 12))
    assert naive.ts == datetime(2026, 1, 1, 12, tzinfo=UTC)
    iso = messages.from_dict(
        {"kind": "react.cancel", "turn_id": "t", "ts": "2026-01-01T12:00:00+01:00"}
    )
    assert iso.ts == datetime(2026, 1, 1, 11, tzinfo=UTC)
    assert decode(encode(local)).ts.tzinfo is not None


def test_ids_are_valid_subject_tokens() -> None:
    for bad in ["a.b", "a b", "a*", "a>", "", "x" * 129]:
        with pytest.raises(DecodeError, match="turn_id"):
            messages.from_dict({"kind": "react.cancel", "turn_id": bad})


def test_new_ids_sort_in_creation_order() -> None:
    ids = [messages.new_id() for _ in range(2000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 26 and messages.is_valid_id(i) for i in ids)
    assert messages.new_id("t-").startswith("t-")


def test_new_id_is_the_crockford_base32_of_its_millisecond_and_counter() -> None:
    """An id is 26 characters of Crockford base32, most significant first: 48 bits of
    milliseconds since the epoch, then 80 random bits counting up within a millisecond."""
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    before = time.time_ns() // 1_000_000
    first, second = messages.new_id(), messages.new_id()
    after = time.time_ns() // 1_000_000
    values = []
    for text in (first, second):
        value = 0
        for char in text:
            value = value * 32 + alphabet.index(char)
        values.append(value)
    assert all(before <= v >> 80 <= after for v in values)
    assert values[1] > values[0]
    if values[1] >> 80 == values[0] >> 80:  # the same millisecond: the counter went up by one
        assert values[1] == values[0] + 1


@pytest.mark.parametrize(
    "error",
    [
        DecodeError("not msgpack", 12),
        EncodeError("cannot encode"),
        PayloadTooLarge(9_000_000, MAX_PAYLOAD),
        messages.SubjectError("turn id", "a.b"),
    ],
)
def test_errors_pickle_with_their_fields(error: Exception) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)
