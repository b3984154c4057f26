"""A topic's dead flags, one byte per slot, in column memory.

Every slot of a topic, live or not, has a flag: in a `bytearray` that was the one part
of a server's heap still growing with every record retained (~1 byte a record, and
twice that while it doubled). Here the bytes live in the topic's column memory — the
engine's scratch space (`storage.scratch`), whose pages leave the process between uses
— and callers read and flip them through a `memoryview`, which indexes at C speed like
the `bytearray` did.

Owner: the `TopicState` that holds it, under that topic's lock. The view (`view`) is
valid until the next `append`, `extend`, `reserve` or `drop_prefix`; slicing it gives a
view, not a copy, so a caller that keeps flags past the lock copies them (`bytes(...)`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from seglog.engine.frozen_slots import HEAP, ColumnMemory

_MIN_CAPACITY = 256


class SlotFlags:
    """The flags of slots `[0, n)`: 1 = dead (deleted, a hole or popped), 0 = live."""

    __slots__ = ("_all", "_arr", "_cap", "_mem", "n", "view")

    def __init__(self, mem: ColumnMemory = HEAP) -> None:
        self._mem = mem
        self._arr: npt.NDArray[Any] = np.zeros(0, np.uint8)
        self._all = self._arr.data
        self._cap = 0
        self.n = 0
        self.view = self._all[:0]

    def reserve(self, k: int) -> None:
        """Room for `k` more flags without regrowing (a restore that knows its slots)."""
        self._reserve(self.n + k, exact=True)

    def _reserve(self, need: int, exact: bool = False) -> None:
        if need > self._cap:
            cap = need if exact else max(need, 2 * self._cap, _MIN_CAPACITY)
            self._arr = self._mem.grown(self._arr, self.n, cap)
            self._all = self._arr.data
            self._cap = cap
            self.view = self._all[: self.n]

    def append(self, flag: int) -> None:
        n = self.n
        if n == self._cap:
            self._reserve(n + 1)
        self._all[n] = flag
        self.n = n + 1
        self.view = self._all[: n + 1]

    def extend(self, flags: bytes) -> None:
        n, k = self.n, len(flags)
        self._reserve(n + k)
        self._all[n : n + k] = flags
        self.n = n + k
        self.view = self._all[: n + k]

    def drop_prefix(self, k: int) -> None:
        """Forget the flags of slots `[0, k)`; slot `k` becomes slot 0. The room shrinks
        with them when most of it would stand empty."""
        n = self.n
        left = n - k
        if self._cap > 4 * max(left, _MIN_CAPACITY):
            self._cap = max(2 * left, _MIN_CAPACITY)
            arr = self._mem.empty(self._cap, np.uint8)
            arr[:left] = self._arr[k:n]
            self._arr = arr
            self._all = arr.data
        else:
            self._arr[:left] = self._arr[k:n]  # numpy copies overlapping ranges correctly
        self.n = left
        self.view = self._all[:left]
