"""Dual watermark, tombstone and retention-cut math (SEMANTICS §4). Pure functions.

Vocabulary (all u64, per topic instance, `H` = head_seq):
- involuntary floor `E_inv = clamp(max(evict, expiry, trim) + 1, 1, H + 1)`: the only
  tombstone trigger;
- `earliest_seq = min(H + 1, max(base_seq, clamp(max(all four floors) + 1, 1, H + 1)))`.
Voluntary deletes move only `delete_floor`, so a cursor inside a deleted region is silent.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from seglog.core.flag_search import Buffer, nth_live
from seglog.model import Tombstone, TombstoneReason


@dataclass(frozen=True, slots=True)
class Floors:
    evict_floor: int = 0
    expiry_floor: int = 0
    source_trim_floor: int = 0
    delete_floor: int = 0


def _clamp(v: int, lo: int, hi: int) -> int:
    return lo if v < lo else hi if v > hi else v


def involuntary_floor(f: Floors, head: int) -> int:
    return _clamp(max(f.evict_floor, f.expiry_floor, f.source_trim_floor) + 1, 1, head + 1)


def earliest_seq(f: Floors, base_seq: int, head: int) -> int:
    top = max(f.evict_floor, f.expiry_floor, f.source_trim_floor, f.delete_floor)
    return earliest_above(top, base_seq, head)


def earliest_above(top_floor: int, base_seq: int, head: int) -> int:
    """`earliest_seq` given the highest of the four floors (no `Floors` to build: a queue's
    claim and ack ask for it several times each)."""
    return min(head + 1, max(base_seq, _clamp(top_floor + 1, 1, head + 1)))


def tombstone_reason(f: Floors, gap_from: int) -> TombstoneReason:
    cap = f.evict_floor > 0 and f.evict_floor >= gap_from
    ttl = f.expiry_floor > 0 and f.expiry_floor >= gap_from
    if cap and ttl:
        return TombstoneReason.MIXED
    if ttl:
        return TombstoneReason.TTL
    if cap:
        return TombstoneReason.CAP
    if f.source_trim_floor > 0 and f.source_trim_floor >= gap_from:
        return TombstoneReason.SOURCE_TRIM
    return TombstoneReason.CAP


def tombstone_for(cursor: int, f: Floors, base_seq: int, head: int) -> tuple[Tombstone | None, int]:
    """SEMANTICS §4.4: the (at most one) tombstone for a read from `cursor`, and the cursor
    the walk continues after."""
    e = earliest_seq(f, base_seq, head)
    if cursor > head:
        t = Tombstone(1, head, TombstoneReason.RECREATED, max(head, 1), e, head)
        return t, e - 1
    e_inv = involuntary_floor(f, head)
    if cursor + 1 < e_inv:
        gap_from, gap_to = cursor + 1, e_inv - 1
        t = Tombstone(
            gap_from,
            gap_to,
            tombstone_reason(f, gap_from),
            gap_to - gap_from + 1,
            e_inv,
            head,
        )
        return t, max(e - 1, cursor)
    return None, cursor


def ttl_cut(ts: Sequence[int], lo: int, hi: int, now: int, ttl_ms: int) -> int:
    """Index (in `ts[lo:hi]`, absolute) of the first slot that is *not* expired, i.e. the
    slots `[lo, result)` satisfy `now - ts > ttl_ms`. Valid because ts is non-decreasing."""
    return bisect_left(ts, now - ttl_ms, lo, hi)


def record_cap_cut(dead: Buffer, lo: int, hi: int, excess: int) -> int:
    """SEMANTICS §4.2 step 2: the record cap counts live records, not seq distance. Walk
    `dead[lo:hi]` from the front and return the absolute index of the `excess`-th live slot
    (the newest one that must go), or -1 when `excess <= 0`. Holes (deletes, failed writes,
    reservation padding) are skipped, so they never cost a live record its place."""
    if excess <= 0:
        return -1
    j = nth_live(dead, lo, hi, excess)
    return hi - 1 if j < 0 else j


def byte_cap_cut(sizes: Sequence[int], lo: int, hi: int, excess: int) -> int:
    """Walk `sizes[lo:hi]` from the front subtracting each slot's bytes from `excess` until
    covered; returns the absolute index *after* the last walked slot (== lo if no excess)."""
    i = lo
    while excess > 0 and i < hi:
        excess -= sizes[i]
        i += 1
    return i
