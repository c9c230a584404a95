"""Blocks: validation of dicts from the wire and storage, and restored order."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

from actline.timeline import Block, BlockError, Timeline
from actline.timeline.blocks import COMPLETION, USER_FOLLOWUP, USER_PROMPT, default_author, iso

T0 = 1_800_000_000.0


def test_a_block_round_trips_through_its_dict() -> None:
    block = Block.new(
        COMPLETION,
        "t1",
        T0 + 5,
        ts_first=T0 + 1,
        path="ar:t1.assistant.completion",
        text="answer",
        meta={"k": [1, 2]},
        call_id="",
    )
    again = Block.from_dict(block.to_dict())
    assert again.to_dict() == block.to_dict()
    assert again.start == T0 + 1


def test_optional_defaults_are_left_out_of_the_dict() -> None:
    payload = Block.new(USER_PROMPT, "t1", T0, text="hi").to_dict()
    assert set(payload) == {"id", "type", "turn_id", "ts", "seq", "text", "author"}


def test_iso_strings_and_epoch_numbers_are_both_times() -> None:
    a = Block.from_dict({"type": "x", "turn_id": "t", "ts": "2027-01-15T08:00:00Z"})
    b = Block.from_dict({"type": "x", "turn_id": "t", "ts": T0})
    c = Block.from_dict({"type": "x", "turn_id": "t", "ts": "2027-01-15T08:00:00"})
    assert a.ts == b.ts == c.ts == T0


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"turn_id": "t", "ts": 1}, "type"),
        ({"type": "x", "ts": 1}, "turn_id"),
        ({"type": "x", "turn_id": "t"}, "ts"),
        ({"type": "", "turn_id": "t", "ts": 1}, "type"),
        ({"type": "x", "turn_id": "t", "ts": "yesterday"}, "ts"),
        ({"type": "x", "turn_id": "t", "ts": True}, "ts"),
        ({"type": "x", "turn_id": "t", "ts": float("nan")}, "ts"),
        ({"type": "x", "turn_id": "t", "ts": 1, "text": 3}, "text"),
        ({"type": "x", "turn_id": "t", "ts": 1, "meta": []}, "meta"),
        ({"type": "x", "turn_id": "t", "ts": 1, "hidden": "yes"}, "hidden"),
        ({"type": "x", "turn_id": "t", "ts": 1, "seq": True}, "seq"),
        ({"type": 7, "turn_id": "t", "ts": 1}, "type"),
    ],
)
def test_a_bad_block_dict_names_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(BlockError) as caught:
        Block.from_dict(raw)
    assert caught.value.field == field


def test_a_non_mapping_is_refused() -> None:
    with pytest.raises(BlockError, match="expected a mapping"):
        Block.from_dict(["type", "x"])  # type: ignore[arg-type]


def test_block_errors_pickle() -> None:
    error = BlockError("required", "ts")
    again = pickle.loads(pickle.dumps(error))
    assert (again.reason, again.field) == ("required", "ts")


def test_a_physical_path_cannot_enter_the_timeline() -> None:
    tl = Timeline("c")
    with pytest.raises(BlockError) as caught:
        tl.append(Block.new("x", "t1", T0, path="/etc/passwd"))
    assert caught.value.field == "path"
    assert "absolute_path" in str(caught.value)
    assert len(tl) == 0


def test_a_duplicate_block_id_is_refused() -> None:
    tl = Timeline("c")
    block = tl.append(Block.new("x", "t1", T0))
    with pytest.raises(BlockError, match="duplicate"):
        tl.append(Block.new("x", "t1", T0, id=block.id))


def test_a_streamed_completion_sorts_by_when_it_started_not_when_it_was_appended() -> None:
    """A followup lands while the answer streams; the answer is appended after it."""
    tl = Timeline("c")
    tl.begin_turn("t1", T0)
    tl.append(Block.new(USER_PROMPT, "t1", T0 + 1, path="ar:t1.user.prompt", text="q"))
    followup = tl.append(Block.new(USER_FOLLOWUP, "t1", T0 + 5, text="also this"))
    answer = tl.append(Block.new(COMPLETION, "t1", T0 + 9, ts_first=T0 + 3, text="streamed"))
    assert [b.type for b in tl.blocks][-2:] == [COMPLETION, USER_FOLLOWUP]
    assert answer.seq > followup.seq
    restored = Timeline.restore(tl.full_snapshot(), [b.to_dict() for b in tl.blocks])
    assert [b.id for b in restored.blocks] == [b.id for b in tl.blocks]


def test_blocks_of_a_turn_never_sort_before_that_turn_started() -> None:
    """A late block of turn t2 with an old timestamp stays inside t2."""
    tl = Timeline("c")
    tl.begin_turn("t1", T0)
    tl.begin_turn("t2", T0 + 100)
    late = tl.append(Block.new("signal.done", "t2", T0 - 50, text="done"))
    assert tl.blocks[-1] is late
    assert tl.turn_ids() == ["t1", "t2"]


def test_authors_follow_block_types() -> None:
    assert default_author("user.prompt") == "user"
    assert default_author("assistant.completion") == "assistant"
    assert default_author("react.tool.result") == "tool"
    assert default_author("react.tool.call") == "react"
    assert default_author("system.message") == "system"


def test_contribute_fills_turn_and_time_and_validates_the_dict() -> None:
    tl = Timeline("c")
    tl.begin_turn("t1", T0)
    block = tl.contribute({"type": "react.notice", "text": "hello"}, turn_id="t1", ts=T0 + 1)
    assert (block.turn_id, block.ts, block.seq) == ("t1", T0 + 1, 1)
    with pytest.raises(BlockError) as caught:
        tl.contribute({"type": "x", "path": "../up"}, turn_id="t1", ts=T0 + 2)
    assert caught.value.field == "path"
    assert len(tl) == 2


def test_a_snapshot_of_an_unknown_version_is_refused() -> None:
    with pytest.raises(BlockError) as caught:
        Timeline.restore({"version": 99}, [])
    assert caught.value.field == "version"


@pytest.mark.parametrize(
    "ts",
    [
        T0,
        T0 + 0.4999995,
        T0 + 0.9999994,
        T0 + 0.9999995,  # rounds up into the next second, as datetime does
        T0 + 0.9999996,
        0.0,
        -0.0000004,
        -0.5,
        -1.9999996,
        253_402_300_799.0,  # the last second of year 9999
    ],
)
def test_iso_names_the_second_datetime_gives(ts: float) -> None:
    expected = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert iso(ts) == expected


@pytest.mark.parametrize("ts", [float("nan"), float("inf"), 1e20])
def test_iso_refuses_what_datetime_refuses(ts: float) -> None:
    with pytest.raises((ValueError, OverflowError)):
        datetime.fromtimestamp(ts, UTC)
    with pytest.raises((ValueError, OverflowError)):
        iso(ts)
