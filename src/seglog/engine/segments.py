"""Materialization of one persistent topic's published records into segment files.

Owner: the engine, under the topic's lock, except the file I/O of sealing and relocation,
which runs outside the lock on a captured, immutable range and is re-checked afterwards
(deletes that landed meanwhile are flagged in the new files before they count).

The *active* segment is the in-memory run of published slots from `active_first` to the
head; sealing writes a prefix of it to `seg-<first>.data/.idx` and, once the newest
`payload_cache` sealed records are past, drops their payloads from memory (reads then go
through the segment's mmap with checksum verification).
"""

from __future__ import annotations

import logging
import operator
from bisect import bisect_right
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from seglog.core.flag_search import Buffer, find_live
from seglog.core.payload_blob import decode_blob
from seglog.core.segment_format import encode_payload_columns
from seglog.engine.snapshot_pins import SnapshotPins
from seglog.engine.topic import Rows, TopicState
from seglog.storage.segment import PinnedSegment, SegmentInfo, SegmentStore

log = logging.getLogger("seglog.segments")


def encode_rows(rows: Rows) -> tuple[bytes, bytes]:
    """The segment files `(data, idx)` of captured rows; dead rows become holes (a deleted
    frame with a null payload)."""
    return encode_payload_columns(
        rows.first_seq, rows.ts, rows.node, rows.tag, rows.data, rows.meta, rows.dead
    )


# The two row checks below run under the topic lock, over every row of a segment being
# sealed (benchmarks/bench_seal.py times them): as numpy passes they hold the lock, and the
# GIL, for a fraction of what a Python loop over 10,000 rows did.


def missing_payload_rows(data: list[bytes | None], dead: bytearray) -> list[int]:
    """Indexes of the live rows whose payload is not in memory (`data` None, `dead` 0)."""
    assert len(data) == len(dead)
    if None not in data:
        return []
    absent = np.frombuffer(bytes(map(operator.is_, data, repeat(None))), np.bool_)
    live = np.frombuffer(bytes(dead), np.uint8) == 0
    return np.flatnonzero(absent & live).tolist()  # type: ignore[no-any-return]


def raced_deletes(
    first_seq: int, was_dead: bytearray, origin: int, front: int, dead: Buffer
) -> list[int]:
    """Seqs of rows captured live (`was_dead` 0, row k is seq `first_seq + k`) that have
    died since: their slot (index `seq - origin`) is now below the live `front` or flagged
    in `dead`."""
    n = len(was_dead)
    lo = first_seq - origin  # slot index of row 0 (below 0 if the front was compacted since)
    assert lo + n <= len(dead)
    gone = np.ones(n, np.bool_)  # below the front: gone
    a = min(max(front - lo, 0), n)  # first row at or above the front
    if a < n:
        gone[a:] = np.frombuffer(dead[lo + a : lo + n], np.uint8) != 0
    raced = np.flatnonzero(gone & (np.frombuffer(bytes(was_dead), np.uint8) == 0))
    return (raced + first_seq).tolist()  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class SealPolicy:
    max_events: int = 10_000
    max_bytes: int = 64 << 20
    max_age_ms: int = 3_600_000
    payload_cache: int = 4096


class TopicSegments:
    def __init__(
        self,
        store: SegmentStore,
        policy: SealPolicy,
        active_first: int = 1,
        pins: SnapshotPins | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        # Segments a kept snapshot references hold the only copy of their records: their
        # drop waits until no kept snapshot names them (the next drop pass after that).
        self.pins = pins
        self.sealed: list[SegmentInfo] = []
        self._firsts: list[int] = []
        # Killed seqs whose sealed del_flag is not written yet (`flag_deleted`).
        self.unflagged: list[int] = []
        # Sealed segments (first seqs) where a packed read met a record with meta: later
        # packed reads (`column_read.select_sealed`) skip them. A hint, added to without
        # the lock; a segment missing from it costs one attempt that falls back.
        self.unsliced: set[int] = set()
        self.active_first = active_first
        self.active_since_ms: int | None = None
        # Records below `active_first` (kept from before the topic became persistent) are
        # in no segment: their payloads must never leave memory.
        self.payload_dropped_below = active_first

    # ---- registry of sealed segments ---------------------------------------------------
    def set_sealed(self, infos: list[SegmentInfo]) -> None:
        self.sealed = sorted(infos, key=lambda s: s.first_seq)
        self._firsts = [s.first_seq for s in self.sealed]
        if self.unsliced:
            self.unsliced &= set(self._firsts)

    def add_sealed(self, info: SegmentInfo) -> None:
        self.sealed.append(info)
        self._firsts.append(info.first_seq)

    def replace(self, old: SegmentInfo, new: SegmentInfo) -> bool:
        """Swap `old` for `new` (a relocated copy); False when `old` was dropped meanwhile."""
        for i, s in enumerate(self.sealed):
            if s.first_seq == old.first_seq:
                self.sealed[i] = new
                return True
        return False

    def holds(self, info: SegmentInfo) -> bool:
        found = self.locate(info.first_seq)
        return found is not None and found.first_seq == info.first_seq

    def locate(self, seq: int) -> SegmentInfo | None:
        i = bisect_right(self._firsts, seq) - 1
        if i >= 0:
            s = self.sealed[i]
            if s.first_seq <= seq <= s.last_seq:
                return s
        return None

    def load(self, seq: int) -> tuple[bytes, bytes | None]:
        """Payload of a live sealed record whose in-memory copy was dropped."""
        info = self.locate(seq)
        if info is None:
            raise LookupError(f"seq {seq} has no payload in memory and no sealed segment")
        rec = self.store.read(info, seq)
        return decode_blob(rec.blob)

    def overlapping(self, first: int, last: int) -> list[SegmentInfo]:
        """Sealed segments overlapping `[first, last]`, found by bisection (reads call this
        without the lock: a concurrent seal or drop only makes the answer slightly stale)."""
        sealed = self.sealed
        i = max(bisect_right(self._firsts, first) - 1, 0)
        out: list[SegmentInfo] = []
        for info in sealed[i:]:
            if info.first_seq > last:
                break
            if info.last_seq >= first:
                out.append(info)
        return out

    def pin_range(self, first: int, last: int) -> list[PinnedSegment]:
        """Under the lock: every sealed segment overlapping `[first, last]`, mapped and held,
        so that its payloads can be read after the lock is released."""
        return [self.store.pin(info) for info in self.overlapping(first, last)]

    def warm_cold(self, first: int, last: int, max_bytes: int) -> int:
        """Bring the cold-tier bytes of `first..last` into the page cache. Called without the
        topic lock, so a slow cold disk delays only this reader, never writers (STORAGE §4.5);
        best effort: a segment dropped or moved meanwhile is skipped, the read that follows
        reports real problems."""
        touched = 0
        for info in self.overlapping(first, last):
            if info.tier != "cold":
                continue
            try:
                touched += self.store.warm_run(info, first, last, max_bytes - touched)
            except (OSError, ValueError):
                continue
            if touched >= max_bytes:
                break
        return touched

    def has_cold(self, first: int, last: int) -> bool:
        return any(s.tier == "cold" for s in self.overlapping(first, last))

    # ---- sealing -----------------------------------------------------------------------
    def seal_range(self, t: TopicState, now: int, force: bool = False) -> tuple[int, int] | None:
        """Under the lock: the `[first, last]` range to seal now, or None (§4.4 triggers)."""
        if self.active_first < t.base_seq:
            # Slots below the base left before they were sealed; the next segment simply
            # starts at the base (a non-contiguous start is a valid segment boundary).
            self.active_first = t.base_seq
        first = self.active_first
        n = t.head - first + 1
        if n <= 0:
            self.active_since_ms = None
            return None
        if self.active_since_ms is None:
            self.active_since_ms = now
        p = self.policy
        if n >= p.max_events:
            return first, first + p.max_events - 1
        lo = first - t.origin
        active_bytes = t.size_sum(lo, t.slot_count) if lo >= 0 else 0
        if active_bytes >= p.max_bytes:
            return first, t.head
        if force or (p.max_age_ms > 0 and now - self.active_since_ms >= p.max_age_ms):
            return first, t.head
        return None

    def capture(self, t: TopicState, first: int, last: int) -> Rows:
        """Under the lock: the immutable rows of `[first, last]` (holes flagged dead). Only
        list slices here; `encode_rows` builds the bytes outside the lock."""
        rows = t.rows(first, last)
        for k in missing_payload_rows(rows.data, rows.dead):
            rows.data[k], rows.meta[k] = self.load(first + k)
        return rows

    def register(self, t: TopicState, info: SegmentInfo, captured: Rows) -> None:
        """Under the lock, after the files are durable: flag deletes that raced the write,
        then let the oldest sealed payloads leave memory."""
        raced = raced_deletes(captured.first_seq, captured.dead, t.origin, t.front, t.dead)
        if raced:
            self.store.mark_deleted(info, raced)
        self.add_sealed(info)
        self.active_first = info.last_seq + 1
        self.active_since_ms = None
        self.drop_cached_payloads(t)

    def drop_cached_payloads(self, t: TopicState) -> None:
        sealed_end = self.active_first  # one past the last sealed seq
        keep_from = max(sealed_end - self.policy.payload_cache, 1)
        lo = max(self.payload_dropped_below, t.base_seq)
        # Only payloads a sealed segment holds may leave memory (records kept from before
        # the topic became persistent are in none).
        n = t.slot_count
        for info in self.overlapping(lo, keep_from - 1) if keep_from > lo else ():
            a = max(max(lo, info.first_seq) - t.origin, 0)
            b = min(min(keep_from, info.last_seq + 1) - t.origin, n)
            if a < b:
                t.drop_payloads(a, b)
        self.payload_dropped_below = max(self.payload_dropped_below, keep_from)

    # ---- physical reclaim --------------------------------------------------------------
    def flag_deleted(self, seqs: list[int]) -> None:
        """Under the lock: queue the del_flag writes of killed records that sit in sealed
        segments (one not sealed yet becomes a hole when it is, and `register` flags the
        deletes that raced a seal); `flush_flags` writes them off the delete's path (the
        maintenance thread each tick, and `Engine.close`). A flag only repeats a delete
        that the WAL, then every later snapshot (its dead bitmaps), already holds, so a
        flag written late, or lost in a crash, never brings a record back; written one at
        a time on the event loop they cost an ack of ten queue jobs ~9 % of the loop
        (BENCHMARKS.md, "Queues: the request path")."""
        sealed_end = self.active_first
        self.unflagged.extend(s for s in seqs if s < sealed_end)

    def flush_flags(self, t: TopicState) -> int:
        """Write the queued del_flags, grouped by segment (outside the topic lock; the
        store's `flag_lock` orders them with relocation). Returns how many were queued.
        A segment dropped meanwhile needs no flag; any other failure is logged and the
        pass goes on: the deletes themselves are durable already."""
        if not self.unflagged:
            return 0
        with t.lock:
            seqs, self.unflagged = self.unflagged, []
            by_seg: dict[int, tuple[SegmentInfo, list[int]]] = {}
            for s in seqs:
                info = self.locate(s)
                if info is not None:
                    by_seg.setdefault(info.first_seq, (info, []))[1].append(s)
        for info, lst in by_seg.values():
            try:
                self.store.mark_deleted(info, lst)
            except FileNotFoundError:
                pass  # dropped since (every seq of it dead or below the floor)
            except Exception as e:  # a bad segment must not stop the pass (or a close)
                log.warning(
                    "segment %s: writing %d delete flags failed: %s", info.first_seq, len(lst), e
                )
        return len(seqs)

    def drop_dead(self, t: TopicState, touched: list[int] | None = None) -> int:
        """Unlink sealed segments whose every seq is below earliest_seq or deleted."""
        earliest = t.earliest()
        store_id = self.store.topic_id
        keep: list[SegmentInfo] = []
        dropped = 0
        touched_firsts = set()
        for s in touched or ():
            hit = self.locate(s)
            if hit is not None:
                touched_firsts.add(hit.first_seq)
        for info in self.sealed:
            dead = info.last_seq < earliest
            if not dead and info.first_seq in touched_firsts:
                lo = max(max(info.first_seq, earliest) - t.origin, 0)
                hi = info.last_seq - t.origin + 1
                dead = lo >= hi or find_live(t.dead, lo, hi) < 0  # no live slot left
            if dead and self.pins is not None and self.pins.holds(store_id, info.first_seq):
                keep.append(info)
                continue
            if dead:
                try:
                    self.store.drop(info)
                except OSError as e:
                    # Space is reclaimed later (recovery drops fully dead segments); the
                    # caller's operation is already durable and must not fail for this.
                    log.warning("could not drop dead segment %s: %s", info.first_seq, e)
                    keep.append(info)
                    continue
                dropped += 1
            else:
                keep.append(info)
        if dropped:
            self.set_sealed(keep)
        return dropped
