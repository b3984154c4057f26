"""Searches over dead flags (`core.flag_search`) answer as the `bytearray` methods they
replace, on any byte buffer — including the memoryviews over column memory the engine
hands them — and across the window sizes they switch between."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.core.flag_search import count_dead, find_live, nth_live


def nth_live_walk(dead: bytearray, lo: int, hi: int, k: int) -> int:
    for i in range(lo, min(hi, len(dead))):
        if dead[i] == 0:
            k -= 1
            if k == 0:
                return i
    return -1


# Long runs of one flag, so that searches cross the first window (256 flags) and several
# of the growing ones after it.
runs = st.lists(st.tuples(st.sampled_from([0, 1]), st.integers(1, 3000)), max_size=8)


def flags_of(spec: list[tuple[int, int]]) -> bytearray:
    return bytearray(b"".join(bytes([flag]) * n for flag, n in spec))


@given(runs, st.integers(0, 25_000), st.integers(0, 25_000), st.integers(1, 4000))
def test_searches_answer_like_the_bytearray_methods(
    spec: list[tuple[int, int]], lo: int, hi: int, k: int
) -> None:
    dead = flags_of(spec)
    lo = min(lo, len(dead))
    as_view = np.frombuffer(bytes(dead), np.uint8).data  # what `SlotFlags.view` is
    for buf in (dead, bytes(dead), as_view):
        assert find_live(buf, lo, hi) == dead.find(0, lo, hi)
        assert nth_live(buf, lo, hi, k) == nth_live_walk(dead, lo, hi, k)
        assert count_dead(buf, lo, hi) == dead.count(1, lo, hi)


def test_the_kth_live_slot_far_past_the_first_window() -> None:
    dead = bytearray([1] * 50_000 + [0] * 10 + [1] * 5 + [0])
    assert find_live(dead, 0, len(dead)) == 50_000
    assert nth_live(dead, 0, len(dead), 11) == 50_015
    assert nth_live(dead, 0, len(dead), 12) == -1
    assert nth_live(dead, 0, 50_005, 6) == -1  # `hi` bounds the search


def test_k_must_be_positive_and_lo_not_negative() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        nth_live(b"\x00", 0, 1, 0)
    with pytest.raises(ValueError, match="negative"):
        find_live(b"\x00", -1, 1)
    with pytest.raises(ValueError, match="negative"):
        count_dead(b"\x01", -1, 1)


@pytest.mark.parametrize("lo", [0, 1, 7])
def test_a_live_slot_on_every_window_edge_is_found(lo: int) -> None:
    # windows: 256 flags, then 1,024, 4,096, 16,384, then 65,536 at a time
    edges = [256, 1280, 5376, 21760, 87296, 152832]
    for p in sorted({lo + e + d for e in edges for d in (-1, 0, 1)}):
        dead = bytearray([1] * p + [0] + [1] * 3 + [0])
        assert find_live(dead, lo, len(dead)) == p
        assert nth_live(dead, lo, len(dead), 2) == p + 4
        for k in (1, 2, 3):
            assert nth_live(dead, lo, len(dead), k) == nth_live_walk(dead, lo, len(dead), k)


def test_a_long_search_keeps_its_temporaries_small() -> None:
    """A search past millions of dead flags (a front popped past a large delete) works a
    bounded window at a time: no array the size of the run."""
    dead = np.ones(10_000_000, np.uint8)
    dead[9_999_990] = 0
    view = dead.data
    tracemalloc.start()
    try:
        assert find_live(view, 0, len(view)) == 9_999_990
        assert nth_live(view, 0, len(view), 1) == 9_999_990
        assert count_dead(view, 0, len(view)) == 9_999_999
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{peak / 1e6:.1f} MB of temporaries"
