"""Searches over dead flags (one byte per slot: 1 dead, 0 live) in any byte buffer — a
`bytearray`, `bytes` or a `memoryview` over column memory. Pure functions."""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np

# `bytes`, `bytearray` or a `memoryview` of unsigned bytes.
Buffer: TypeAlias = Any

# A search copies the flags a window at a time and counts or finds in C: the first window
# is short (a live slot is usually near), later ones grow fourfold up to `_MAX_WINDOW`, so
# the cost follows the distance walked and the heap used stays small.
_FIRST_WINDOW = 256
_MAX_WINDOW = 1 << 16
# Within a window, the k-th live flag is found by `find` up to this k, else with numpy.
_FIND_K = 16


def find_live(dead: Buffer, lo: int, hi: int) -> int:
    """The first index in `[lo, hi)` whose flag in `dead` (any byte buffer) is 0, or -1:
    `bytearray.find(0, lo, hi)` for `0 <= lo`, on a memoryview too."""
    return nth_live(dead, lo, hi, 1)


def nth_live(dead: Buffer, lo: int, hi: int, k: int) -> int:
    """The index of the `k`-th (from 1) zero flag in `dead[lo:hi]`, or -1 when there are
    fewer (`0 <= lo`; `hi` past the end means the end)."""
    if k <= 0:
        raise ValueError(f"k must be at least 1, not {k}")
    if lo < 0:
        raise ValueError(f"lo must not be negative, not {lo}")
    hi = min(hi, len(dead))
    if k == 1 and lo < hi and dead[lo] == 0:  # the usual answer, without a copy
        return lo
    step = _FIRST_WINDOW
    while lo < hi:
        b = min(hi, lo + step)
        window = bytes(dead[lo:b])
        if k == 1:  # the common search: the next live slot
            j = window.find(0)
            if j >= 0:
                return lo + j
        else:
            c = window.count(0)
            if c >= k:
                if k > _FIND_K:
                    return lo + int(np.flatnonzero(np.frombuffer(window, np.uint8) == 0)[k - 1])
                j = -1
                for _ in range(k):
                    j = window.find(0, j + 1)
                return lo + j
            k -= c
        lo = b
        step = min(step * 4, _MAX_WINDOW)
    return -1


def count_dead(dead: Buffer, lo: int, hi: int) -> int:
    """How many flags in `dead[lo:hi]` are set (`bytearray.count(1, lo, hi)` for `0 <= lo`)."""
    if lo < 0:
        raise ValueError(f"lo must not be negative, not {lo}")
    hi = min(hi, len(dead))
    if lo >= hi:
        return 0
    if hi - lo <= _MAX_WINDOW:
        return bytes(dead[lo:hi]).count(1)
    return int(np.count_nonzero(np.frombuffer(dead, np.uint8, hi - lo, lo)))
