"""`native.table_codes` and `native.int64_column` (C) against their twins: the same codes and
label for any labels and table, and the same errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core import native

if native.speedups is None and os.environ.get("SEGLOG_REQUIRE_NATIVE") == "1":
    pytest.fail("seglog._speedups is not built (SEGLOG_REQUIRE_NATIVE=1)", pytrace=False)

needs_native = pytest.mark.skipif(native.speedups is None, reason="seglog._speedups not built")
LABEL = st.one_of(st.none(), st.sampled_from(["a", "b", "é", "x" * 40]), st.text(max_size=3))


def run(fn: object, labels: list[str | None], table: dict[str | None, int]) -> tuple:
    out = np.full(len(labels), 7, np.uint32)
    miss = fn(labels, table, out)  # type: ignore[operator]
    filled = len(labels) if miss < 0 else miss
    return miss, out[:filled].tolist()


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    labels=st.lists(LABEL, max_size=30),
    known=st.lists(LABEL, max_size=8, unique=True),
    repeat=st.booleans(),
)
def test_table_codes_equals_the_twin(
    labels: list[str | None], known: list[str | None], repeat: bool
) -> None:
    if repeat:  # runs of one object, the common column
        labels = [x for x in labels for _ in range(3)]
    table = {x: k for k, x in enumerate(known, 1)} | {None: 0}
    assert run(native.speedups.table_codes, labels, table) == run(  # type: ignore[union-attr]
        native.table_codes_py, labels, table
    )


@pytest.mark.parametrize("pure", [False, True])
def test_table_codes_errors(pure: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:
        monkeypatch.setattr(native, "speedups", None)
    elif native.speedups is None:
        pytest.skip("seglog._speedups not built")
    with pytest.raises(ValueError, match="len"):
        native.table_codes(["a"], {"a": 1}, np.empty(2, np.uint32))
    out = np.empty(3, np.uint32)
    assert native.table_codes(["a", "a", None], {"a": 5, None: 0}, out) == -1
    assert out.tolist() == [5, 5, 0]
    assert native.table_codes(["a", "b"], {"a": 5}, out[:2]) == 1


@needs_native
def test_a_code_beyond_uint32_is_refused() -> None:
    with pytest.raises(OverflowError):
        native.speedups.table_codes(["a"], {"a": 2**32}, np.empty(1, np.uint32))  # type: ignore[union-attr]


I64 = st.integers(-(2**63), 2**63 - 1)


@needs_native
@settings(max_examples=300, deadline=None)
@given(values=st.lists(I64 | st.integers(-300, 300), max_size=40))
def test_int64_column_equals_the_twin(values: list[int]) -> None:
    c, py = np.full(len(values), 7, np.int64), np.full(len(values), 9, np.int64)
    native.speedups.int64_column(values, c)  # type: ignore[union-attr]
    native.int64_column_py(values, py)
    assert c.tolist() == py.tolist() == values


@pytest.mark.parametrize("pure", [False, True])
def test_int64_column_refuses_what_int64_cannot_hold(
    pure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pure:
        monkeypatch.setattr(native, "speedups", None)
    elif native.speedups is None:
        pytest.skip("seglog._speedups not built")
    assert native.int64_column([]).tolist() == []
    assert native.int64_column([True, -5, 2**63 - 1]).tolist() == [1, -5, 2**63 - 1]
    for big in (2**63, -(2**63) - 1, 2**70):
        with pytest.raises(OverflowError):
            native.int64_column([1, big])
    with pytest.raises(TypeError):
        native.int64_column([1, 2.5])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        native.int64_column([1, None])  # type: ignore[list-item]
    fill = native.speedups.int64_column if not pure else native.int64_column_py  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="len"):
        fill([1, 2], np.empty(3, np.int64))
