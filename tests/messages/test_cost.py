"""A turn result's ``cost``: optional on the wire, so results from older senders and stored
before turns were priced still read, and a priced one goes through msgpack whole."""

from __future__ import annotations

import msgpack
import pytest

from actline.llm.pricing import price
from actline.messages import Cost, ReActResult, Usage, decode, encode, from_dict

RESULT = {"kind": "turn.result", "conversation_id": "c1", "turn_id": "t1", "status": "completed"}


def test_a_result_without_a_cost_still_reads() -> None:
    old = from_dict({**RESULT, "usage": {"input_tokens": 10, "model": "claude-sonnet-4-6"}})
    assert isinstance(old, ReActResult) and old.cost is None
    plain = msgpack.packb({**RESULT, "usage": {"input_tokens": 10}})
    assert decode(plain).cost is None  # type: ignore[union-attr]


def test_a_priced_result_goes_through_msgpack_and_json_whole() -> None:
    usage = Usage(
        input_tokens=1_200,
        output_tokens=300,
        cache_read_tokens=40_000,
        cache_write_5m_tokens=2_000,
        model="claude-sonnet-4-6",
    )
    result = ReActResult(
        conversation_id="c1", turn_id="t1", status="completed", usage=usage, cost=price(usage)
    )
    back = decode(encode(result))
    assert isinstance(back, ReActResult) and back.cost == result.cost
    # 1,200 x $3/M + 40,000 x $0.30/M + 2,000 x $3.75/M + 300 x $15/M
    assert back.cost is not None
    assert back.cost.total_usd == pytest.approx(0.0036 + 0.012 + 0.0075 + 0.0045)
    stored = ReActResult.model_validate(result.model_dump(mode="json"), strict=False)
    assert stored.cost == result.cost


def test_a_foreign_program_can_send_a_cost_as_plain_numbers() -> None:
    cost = {"input_usd": 1, "output_usd": 0.5, "total_usd": 1.5, "uncached_usd": 2}
    sent = decode(msgpack.packb({**RESULT, "cost": cost}))
    assert isinstance(sent, ReActResult) and sent.cost is not None
    assert sent.cost.total_usd == 1.5 and sent.cost.saved_usd == 0.5
    assert Cost().saved_usd == 0.0 and not Cost().estimated
