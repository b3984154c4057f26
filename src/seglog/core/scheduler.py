"""The banded weighted-fair queue of dirty topics (SEMANTICS §11): which topic's delivery
work (watcher wake-ups, router forwarding) runs next.

Each topic is queued at most once (repeated publishes coalesce), in the band of its
effective priority:

| band | effective priority | weight |
|---|---|---|
| 4 | ≥ 750 | 8 |
| 3 | 500–749 | 4 |
| 2 | 250–499 | 2 |
| 1 | 0–249 | 1 |
| 0 | < 0 | 1 |

FIFO within a band; bands are drained by weighted round-robin (a full round serves up to
8 + 4 + 2 + 1 + 1 topics, high bands first). Aging adds +100 per second waited (capped at
+1000, SEMANTICS §11's `0.1 * min(waited_ms, 10000)`) and is applied to each band's
oldest entry whenever the queue is popped, so a waiting topic climbs bands and none
starves. `min_band` defers the low bands under pressure, but never an entry that has
waited `DEFER_LIMIT_MS`: deferral degrades latency, it never drops or stalls work.

Pure: no clock of its own (callers pass `now_ms`), no I/O, no threads.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

BAND_FLOORS = (-(1 << 62), 0, 250, 500, 750)  # band i holds priorities ≥ BAND_FLOORS[i]
BAND_WEIGHTS = (1, 1, 2, 4, 8)
TOP_BAND = len(BAND_FLOORS) - 1
AGE_CAP_MS = 10_000
DEFER_LIMIT_MS = 2_000


def band_of(priority: int) -> int:
    for band in range(TOP_BAND, 0, -1):
        if priority >= BAND_FLOORS[band]:
            return band
    return 0


def aged(priority: int, waited_ms: int) -> int:
    return priority + round(0.1 * min(max(waited_ms, 0), AGE_CAP_MS))


@dataclass(slots=True)
class _Entry:
    key: str
    priority: int  # effective priority when queued (without aging)
    queued_ms: int


class BandedQueue:
    def __init__(self) -> None:
        self._bands: list[deque[_Entry]] = [deque() for _ in BAND_FLOORS]
        self._queued: dict[str, _Entry] = {}
        self._credit = list(BAND_WEIGHTS)

    def __len__(self) -> int:
        return len(self._queued)

    def __contains__(self, key: object) -> bool:
        return key in self._queued

    def push(self, key: str, priority: int, now_ms: int) -> bool:
        """Queue `key` unless it is queued already (then False: coalesced)."""
        if key in self._queued:
            return False
        e = _Entry(key, priority, now_ms)
        self._queued[key] = e
        self._bands[band_of(priority)].append(e)
        return True

    def discard(self, key: str) -> None:
        e = self._queued.pop(key, None)
        if e is not None:
            for band in self._bands:
                if e in band:
                    band.remove(e)
                    return

    def oldest_wait_ms(self, now_ms: int) -> int:
        oldest = min((b[0].queued_ms for b in self._bands if b), default=now_ms)
        return max(0, now_ms - oldest)

    def depths(self) -> tuple[int, ...]:
        """Entries per band, band 0 first."""
        return tuple(len(b) for b in self._bands)

    def pop(self, now_ms: int, min_band: int = 0) -> str | None:
        """The next key by weighted round-robin over the bands (after aging), or None if
        nothing is eligible: bands below `min_band` wait unless their oldest entry has
        waited `DEFER_LIMIT_MS`."""
        self._age(now_ms)
        eligible = [
            i
            for i, b in enumerate(self._bands)
            if b and (i >= min_band or now_ms - b[0].queued_ms >= DEFER_LIMIT_MS)
        ]
        if not eligible:
            return None
        if not any(self._credit[i] > 0 for i in eligible):
            self._credit = list(BAND_WEIGHTS)  # a new round
        band = max(i for i in eligible if self._credit[i] > 0)
        self._credit[band] -= 1
        e = self._bands[band].popleft()
        del self._queued[e.key]
        return e.key

    def _age(self, now_ms: int) -> None:
        """Move each band's oldest entry up while its aged priority belongs higher.
        The oldest entry of a band has waited longest, so it is the first to climb."""
        for band in range(TOP_BAND):
            q = self._bands[band]
            while q:
                e = q[0]
                target = band_of(aged(e.priority, now_ms - e.queued_ms))
                if target <= band:
                    break
                q.popleft()
                self._bands[target].append(e)
