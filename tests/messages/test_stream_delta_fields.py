"""The optional ``stream.delta`` fields (canvas ``key``, ``format``, ``replace``,
``unresolved``): old senders and old readers keep working."""

from __future__ import annotations

from typing import Literal

import msgpack

from actline.messages import StreamDelta, decode, encode, from_dict
from actline.messages.base import WireModel

OLD = {"conversation_id": "c1", "turn_id": "t1", "channel": "answer", "text": "Hi", "seq": 0}


class OldStreamDelta(WireModel):
    """``stream.delta`` as a reader built before the optional fields knew it."""

    kind: Literal["stream.delta"] = "stream.delta"
    conversation_id: str
    turn_id: str
    channel: str
    text: str
    seq: int
    round: int = 0
    completed: bool = False


def test_an_old_sender_gets_the_defaults() -> None:
    delta = from_dict({"kind": "stream.delta", **OLD})
    assert isinstance(delta, StreamDelta)
    assert (delta.key, delta.format, delta.replace, delta.unresolved) == (None, "", False, [])


def test_the_new_fields_round_trip_and_an_old_reader_ignores_them() -> None:
    fields = {"key": "summary", "format": "markdown", "replace": True, "unresolved": [99]}
    new = StreamDelta.model_validate(OLD | {"channel": "canvas", "completed": True} | fields)
    again = decode(encode(new))
    assert isinstance(again, StreamDelta)
    assert (again.key, again.format, again.replace, again.unresolved) == (
        "summary",
        "markdown",
        True,
        [99],
    )
    plain = msgpack.unpackb(encode(new), timestamp=3)
    old = OldStreamDelta.model_validate({k: v for k, v in plain.items() if k != "ts"})
    assert (old.channel, old.text, old.completed) == ("canvas", "Hi", True)
