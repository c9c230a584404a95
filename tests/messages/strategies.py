"""Hypothesis strategies derived from the message models' own annotations.

A new message kind or field is covered without editing this file.
"""

from __future__ import annotations

import types
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

json_like: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | INT64 | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)

utc_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


def _pattern(metadata: list[Any]) -> str | None:
    for item in metadata:
        pattern = getattr(item, "pattern", None)
        if pattern:
            return str(pattern)
    return None


def for_type(tp: Any, metadata: list[Any] | None = None) -> st.SearchStrategy[Any]:
    """A strategy of valid values for a field annotation."""
    metadata = list(metadata or [])
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Annotated:
        return for_type(args[0], metadata + list(args[1:]))
    pattern = _pattern(metadata)
    if pattern is not None:
        return st.from_regex(pattern, fullmatch=True)
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, types.UnionType):
        return st.one_of([for_type(arg) for arg in args])
    if origin is list:
        return st.lists(for_type(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), for_type(args[1]), max_size=3)
    if tp is Any:
        return json_like
    if tp is type(None):
        return st.none()
    if tp is str:
        return st.text(max_size=24)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return INT64
    if tp is float:
        return st.floats(allow_nan=False)
    if tp is bytes:
        return st.binary(max_size=32)
    if tp is datetime:
        return utc_datetimes
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return model(tp)
    raise TypeError(f"no strategy for {tp!r}")


def for_field(info: FieldInfo) -> st.SearchStrategy[Any]:
    """A strategy for one pydantic field (its annotation plus constraints)."""
    return for_type(info.annotation, list(info.metadata))


def model(cls: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` with every field drawn from its annotation."""
    fields = {name: for_field(info) for name, info in cls.model_fields.items() if name != "kind"}
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))
