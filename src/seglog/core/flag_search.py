"""Searches over dead flags (one byte per slot: 1 dead, 0 live) in any byte buffer — a
`bytearray`, `bytes` or a `memoryview` over column memory. Pure functions."""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np

# `bytes`, `bytearray` or a `memoryview` of unsigned bytes.
Buffer: TypeAlias = Any

# A search for a live slot looks at this many flags before it switches to numpy windows.
_FIRST_WINDOW = 256


def find_live(dead: Buffer, lo: int, hi: int) -> int:
    """The first index in `[lo, hi)` whose flag in `dead` (any byte buffer) is 0, or -1:
    `bytearray.find(0, lo, hi)`, for a memoryview."""
    return nth_live(dead, lo, hi, 1)


def nth_live(dead: Buffer, lo: int, hi: int, k: int) -> int:
    """The index of the `k`-th (from 1) zero flag in `dead[lo:hi]`, or -1 when there are
    fewer. Looks at a short window first (a live slot is usually near) and then at windows
    growing fourfold, so the cost follows the distance walked, not `hi - lo`."""
    if k <= 0:
        raise ValueError(f"k must be at least 1, not {k}")
    hi = min(hi, len(dead))
    if k == 1 and lo < hi:
        b = min(hi, lo + _FIRST_WINDOW)
        j = bytes(dead[lo:b]).find(0)
        if j >= 0:
            return lo + j
        lo = b
    step = max(4 * _FIRST_WINDOW, 2 * k)
    while lo < hi:
        b = min(hi, lo + step)
        live = np.frombuffer(dead, np.uint8, b - lo, lo) == 0
        c = int(np.count_nonzero(live))
        if c >= k:
            return lo + int(np.flatnonzero(live)[k - 1])
        k -= c
        lo = b
        step *= 4
    return -1


def count_dead(dead: Buffer, lo: int, hi: int) -> int:
    """How many flags in `dead[lo:hi]` are set (`bytearray.count(1, lo, hi)`)."""
    hi = min(hi, len(dead))
    if lo >= hi:
        return 0
    return int(np.count_nonzero(np.frombuffer(dead, np.uint8, hi - lo, lo)))
