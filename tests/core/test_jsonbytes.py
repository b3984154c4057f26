"""`json_bytes`: the same bytes as `orjson.dumps`, as an independent right-sized copy."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core.jsonbytes import json_bytes

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=200, derandomize=True, database=None)
@given(json_values)
def test_same_bytes_as_orjson(value: object) -> None:
    out = json_bytes(value)
    assert type(out) is bytes
    assert out == orjson.dumps(value)
    assert orjson.loads(out) == orjson.loads(orjson.dumps(value))


def test_errors_are_orjsons() -> None:
    with pytest.raises(orjson.JSONEncodeError):
        json_bytes({1, 2})
    with pytest.raises(orjson.JSONEncodeError):
        json_bytes(2**70)
