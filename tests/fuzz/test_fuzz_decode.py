"""Fuzzing ``messages.decode``: arbitrary bytes, near-valid envelopes and mutated encodings.

Property: ``decode`` returns one of the message kinds or raises ``DecodeError``, never
another exception and never slowly (``SLOW_S``); a message it accepts encodes again
(or is refused with ``EncodeError``) and decodes to the same kind.
"""

from __future__ import annotations

import copy
import math
import random
import struct
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from actline.messages import MESSAGE_TYPES, DecodeError, EncodeError, decode, encode

from ..messages.strategies import model
from .tally import EXAMPLES, TALLY, fuzz_settings

KIND = "messages.decode"
KINDS = sorted(MESSAGE_TYPES)
ALL_TYPES = tuple(MESSAGE_TYPES.values())
MUTATIONS_PER_MESSAGE = 25
VARIANTS_PER_MESSAGE = 10
BAD_UTF8 = b"\xa4\xed\xa0\x80x"
"""A msgpack str whose bytes are a UTF-8-encoded surrogate (the packer never writes one)."""

any_message = st.one_of([model(MESSAGE_TYPES[kind]) for kind in KINDS])

EDGE_VALUES: list[Any] = [
    0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1,
    0.0, -0.0, math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324,
    "", " ", "\x00", "é" * 3, "x" * 70_000, b"", b"\x00" * 9,
    [], {}, [None], {"": None}, True, False, None,
    "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "2024-02-30T00:00:00Z",
    "not a date", "1e999", "NaN",
    datetime(9999, 12, 31, 23, 59, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC),
    datetime(2000, 1, 1, tzinfo=timezone(timedelta(hours=-14))),
    msgpack.ExtType(0, b""), msgpack.ExtType(127, b"\xff" * 12), msgpack.ExtType(5, b"x"),
]  # fmt: skip

scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.sampled_from(EDGE_VALUES),
    st.sampled_from(KINDS),
    st.datetimes(timezones=st.just(UTC)),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=16)),
)
keys: st.SearchStrategy[Any] = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.none(),
    st.binary(max_size=4),
    st.booleans(),
)
junk: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=16,
)


def _pack(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, datetime=True)
    return data


def _nest(depth: int, container: str) -> bytes:
    """``depth`` nested one-element arrays or maps around nil, written directly (no
    recursion limit of the packer applies)."""
    if container == "array":
        return b"\x91" * depth + b"\xc0"
    return b"\x81\xa1k" * depth + b"\xc0"


def _timestamp(seconds: int, nanos: int, form: int) -> bytes:
    """A msgpack timestamp extension (type -1) in its 32, 64 or 96-bit form, possibly out of
    range, or with a body of the wrong length."""
    if form == 0:
        return b"\xd6\xff" + struct.pack(">I", seconds % 2**32)
    if form == 1:
        return b"\xd7\xff" + struct.pack(">Q", (nanos % 2**30) << 34 | seconds % 2**34)
    if form == 2:
        return b"\xc7\x0c\xff" + struct.pack(">I", nanos % 2**32) + struct.pack(">q", seconds)
    return b"\xc7\x05\xff" + struct.pack(">I", nanos % 2**32) + b"\x00"


def _decode(data: bytes) -> None:
    """The property, for one input."""
    try:
        msg = TALLY.run(KIND, decode, data)
    except DecodeError:
        return
    assert isinstance(msg, ALL_TYPES), type(msg)
    try:
        again = encode(msg)
    except EncodeError:
        return
    assert type(decode(again)) is type(msg)


@fuzz_settings()
@given(data=st.binary(max_size=512))
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    _decode(data)


def _key(rnd: random.Random, pool: list[Any]) -> Any:
    """A map key: a hashable value of the pool, or a short random text."""
    hashable = [v for v in pool if isinstance(v, str | bytes | int | float | None)]
    return rnd.choice(hashable) if hashable and rnd.random() < 0.7 else rnd.randbytes(3).hex()


def _junk(rnd: random.Random, pool: list[Any]) -> Any:
    return copy.deepcopy(rnd.choice(pool)) if rnd.random() < 0.7 else rnd.choice(EDGE_VALUES)


def _mutate_map(rnd: random.Random, obj: dict[Any, Any], pool: list[Any]) -> None:
    """One structural mutation of a message's map, in place: a field dropped, replaced by
    junk or an edge value, retyped, an extra field, another kind, junk inside a field."""
    name = rnd.choice(list(obj) or ["kind"])
    op = rnd.choice(["drop", "junk", "edge", "extra", "kind", "inner", "retype"])
    if op == "drop":
        obj.pop(name, None)
    elif op == "junk":
        obj[name] = _junk(rnd, pool)
    elif op == "edge":
        obj[name] = rnd.choice(EDGE_VALUES)
    elif op == "extra":
        obj[_key(rnd, pool)] = _junk(rnd, pool)
    elif op == "kind":
        obj["kind"] = rnd.choice([*KINDS, _junk(rnd, pool), rnd.choice(KINDS).upper()])
    elif op == "inner":
        value = obj.get(name)
        if isinstance(value, dict) and value:
            value[rnd.choice([*value, _key(rnd, pool)])] = _junk(rnd, pool)
        elif isinstance(value, list) and value:
            value[rnd.randrange(len(value))] = _junk(rnd, pool)
        else:
            obj[name] = [value, _junk(rnd, pool)]
    else:
        value = obj.get(name)
        if isinstance(value, str):
            obj[name] = value.encode()
        elif isinstance(value, int | float) and not isinstance(value, bool):
            obj[name] = rnd.choice([str(value), float(value), [value], value is not None])
        elif isinstance(value, datetime):
            obj[name] = rnd.choice([value.timestamp(), value.isoformat(), 0, str(value)])
        else:
            obj[name] = _junk(rnd, pool)


def _entries(rnd: random.Random, obj: dict[Any, Any], pool: list[Any]) -> bytes:
    """``obj`` written entry by entry: with a duplicate key, an array key, a deeply nested
    value, a raw timestamp or a malformed string added, shuffled, with a wrong count."""
    entries = [_pack(k) + _pack(v) for k, v in obj.items()]
    names = list(obj) or ["kind"]
    for _ in range(rnd.randint(0, 3)):
        name = _pack(rnd.choice(names))
        op = rnd.randrange(5)
        if op == 0:
            entries.append(name + _pack(_junk(rnd, pool)))
        elif op == 1:
            entries.append(_pack([_key(rnd, pool)]) + _pack(_junk(rnd, pool)))
        elif op == 2:
            entries.append(name + _nest(rnd.randint(1, 5000), rnd.choice(["array", "map"])))
        elif op == 3:
            seconds = rnd.randint(-(2**63), 2**63 - 1) >> rnd.randrange(64)
            entries.append(name + _timestamp(seconds, rnd.getrandbits(32), rnd.randrange(4)))
        else:
            entries.append(name + BAD_UTF8)
    rnd.shuffle(entries)
    count = max(0, len(entries) + rnd.choice([0, 0, 0, -1, 1]))
    header: bytes = msgpack.Packer().pack_map_header(count)
    return header + b"".join(entries)


@fuzz_settings(max(1, EXAMPLES // VARIANTS_PER_MESSAGE))
@given(
    msg=any_message,
    pool=st.lists(junk, min_size=1, max_size=6),
    rnd=st.randoms(use_true_random=False),
)
def test_near_valid_envelopes_decode_or_raise_decode_error(
    msg: Any, pool: list[Any], rnd: random.Random
) -> None:
    for _ in range(VARIANTS_PER_MESSAGE):
        obj: dict[Any, Any] = msg.model_dump(mode="python")
        for _ in range(rnd.choice([1, 1, 1, 2, 3])):
            _mutate_map(rnd, obj, pool)
        _decode(_pack(obj) if rnd.random() < 0.75 else _entries(rnd, obj, pool))


def _mutate_bytes(rnd: random.Random, data: bytes, other: bytes) -> bytes:
    """One classic byte-level mutation: flips, interesting bytes, inserted, deleted,
    duplicated or spliced runs, truncation, a length field made huge."""
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        n = len(buf)
        op = rnd.randrange(9)
        pos = rnd.randrange(n) if n else 0
        if op == 0 and n:
            buf[pos] ^= 1 << rnd.randrange(8)
        elif op == 1 and n:
            buf[pos] = rnd.choice([0x00, 0x7F, 0x80, 0xC0, 0xC1, 0xC4, 0xD4, 0xDC, 0xDE, 0xFF])
        elif op == 2:
            buf[pos:pos] = rnd.randbytes(rnd.randint(1, 8))
        elif op == 3 and n:
            del buf[pos : pos + rnd.randint(1, 16)]
        elif op == 4 and n:
            end = min(n, pos + rnd.randint(1, 32))
            buf[pos:pos] = buf[pos:end]
        elif op == 5:
            start = rnd.randrange(len(other)) if other else 0
            buf[pos:] = other[start:]
        elif op == 6 and n:
            del buf[rnd.randrange(n) :]
        elif op == 7:
            buf[pos:pos] = rnd.choice([b"\xdb", b"\xdd", b"\xdf", b"\xc6", b"\xc9"]) + b"\xff" * 4
        else:
            buf[pos : pos + 1] = rnd.randbytes(1)
    return bytes(buf)


@fuzz_settings(max(1, EXAMPLES // MUTATIONS_PER_MESSAGE))
@given(msg=any_message, other=any_message, rnd=st.randoms(use_true_random=False))
def test_mutated_encodings_decode_or_raise_decode_error(
    msg: Any, other: Any, rnd: random.Random
) -> None:
    data, spare = encode(msg), encode(other)
    for _ in range(MUTATIONS_PER_MESSAGE):
        _decode(_mutate_bytes(rnd, data, spare))
