"""Time source. Everything that reads "now" takes a `Clock`, so tests drive TTLs,
leases and windows with `ManualClock.advance()` instead of sleeping."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock epoch milliseconds (record timestamps, TTL, leases)."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, for measuring durations only."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to. Thread-safe."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._now / 1000.0

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now += ms

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now = now_ms
