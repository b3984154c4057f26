"""Seq ranges, partition planning, stream offsets and rate-limit proration (pure, no I/O).

Conventions, as in Spark's Kafka source with seqs for offsets:
- A `SeqRange(topic, after, upto)` covers seqs `after < seq <= upto`; `after` is exactly the
  diff API's exclusive `from_seq`, so a task pages `diff(from_seq=after)` until it passes `upto`.
- A stream offset maps topic → `TopicOffset(next)`, `next` being the next seq to read. A batch
  reads `[start.next, end.next)`. `first` is set in an *end* offset only for a topic that starts
  (or restarts) in that batch: it is the first seq to read and overrides the start offset. It
  lives in the end offset because Spark writes end offsets to the checkpoint (`offsets/N`)
  before running the batch, so a replayed batch reads the same range; a Python source's
  initial offset is not checkpointed and is recomputed on restart.
- Serialized form (checkpoint JSON): `{"v": 1, "topics": {"t": {"next": 16}}}`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seglog.spark.options import (
    EARLIEST_SENTINEL,
    LATEST_SENTINEL,
    MAX_SEQ,
    Position,
    PositionKind,
)

OFFSET_VERSION = 1


@dataclass(frozen=True, slots=True, order=True)
class SeqRange:
    topic: str
    after: int
    upto: int

    @property
    def size(self) -> int:
        return max(0, self.upto - self.after)


def split_ranges(
    ranges: Iterable[SeqRange], max_per_partition: int, min_partitions: int = 1
) -> list[SeqRange]:
    """Cut each range into pieces of at most `max_per_partition` seqs, then keep halving the
    largest piece until there are `min_partitions` pieces (or every piece is one seq).
    Empty ranges vanish. The result is sorted by (topic, after) and covers the input exactly."""
    if max_per_partition < 1:
        raise ValueError("max_per_partition must be >= 1")
    pieces: list[SeqRange] = []
    for r in ranges:
        lo = r.after
        while lo < r.upto:
            hi = min(r.upto, lo + max_per_partition)
            pieces.append(SeqRange(r.topic, lo, hi))
            lo = hi
    if len(pieces) < min_partitions:
        heap = [(-p.size, p) for p in pieces]
        heapq.heapify(heap)
        while heap and len(heap) < min_partitions and -heap[0][0] > 1:
            _, p = heapq.heappop(heap)
            mid = p.after + p.size // 2
            heapq.heappush(heap, (-(mid - p.after), SeqRange(p.topic, p.after, mid)))
            heapq.heappush(heap, (-(p.upto - mid), SeqRange(p.topic, mid, p.upto)))
        pieces = [p for _, p in heap]
    return sorted(pieces)


def prorate(budget: int, lags: Mapping[str, int]) -> dict[str, int]:
    """Split a record budget across topics in proportion to their lag (Kafka's
    `maxOffsetsPerTrigger`), exactly: the shares sum to `min(budget, total lag)`, no share
    exceeds its lag, and every lagging topic gets at least one record when the budget allows
    (so a small topic is not starved by a busy one). Ties break by larger lag, then name."""
    if budget < 0:
        raise ValueError("budget must be >= 0")
    alloc = {t: 0 for t in lags}
    active = {t: lag for t, lag in lags.items() if lag > 0}
    total = sum(active.values())
    if total <= budget:
        alloc.update(active)
        return alloc
    order = sorted(active, key=lambda t: (-active[t], t))
    if budget < len(order):
        for t in order[:budget]:
            alloc[t] = 1
        return alloc
    given = 0
    remainders: list[tuple[int, int, str]] = []
    for i, t in enumerate(order):  # largest-remainder apportionment of the budget by lag
        share, rem = divmod(budget * active[t], total)
        alloc[t] = share
        given += share
        remainders.append((-rem, i, t))
    for _, _, t in sorted(remainders)[: budget - given]:
        alloc[t] += 1
    for t in reversed(order):  # no lagging topic starves: take one from the largest share
        if alloc[t] == 0:
            donor = max(order, key=lambda u: (alloc[u], -order.index(u)))
            alloc[donor] -= 1
            alloc[t] = 1
    return alloc


# ---- stream offsets -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicOffset:
    next: int
    first: int | None = None


class OffsetFormatError(ValueError):
    """A checkpointed offset this version cannot read."""


def encode_offset(offsets: Mapping[str, TopicOffset]) -> dict[str, Any]:
    topics: dict[str, Any] = {}
    for t in sorted(offsets):
        o = offsets[t]
        topics[t] = {"next": o.next} if o.first is None else {"next": o.next, "first": o.first}
    return {"v": OFFSET_VERSION, "topics": topics}


def _seq_field(doc: Mapping[str, Any], key: str, topic: str) -> int:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > MAX_SEQ + 1:
        raise OffsetFormatError(f"seglog offset: bad {key!r} for topic {topic!r}: {v!r}")
    return v


def decode_offset(doc: Mapping[str, Any]) -> dict[str, TopicOffset]:
    if not isinstance(doc, Mapping) or doc.get("v") != OFFSET_VERSION:
        raise OffsetFormatError(
            f"seglog offset: expected version {OFFSET_VERSION}, got {doc!r}; this checkpoint was "
            "written by another connector version"
        )
    topics = doc.get("topics")
    if not isinstance(topics, Mapping):
        raise OffsetFormatError(f"seglog offset: 'topics' must be an object, got {topics!r}")
    out: dict[str, TopicOffset] = {}
    for t, entry in topics.items():
        if not isinstance(entry, Mapping):
            raise OffsetFormatError(f"seglog offset: entry for {t!r} must be an object")
        first = _seq_field(entry, "first", t) if "first" in entry else None
        out[str(t)] = TopicOffset(next=_seq_field(entry, "next", t), first=first)
    return out


def batch_ranges(
    start: Mapping[str, TopicOffset], end: Mapping[str, TopicOffset]
) -> list[SeqRange]:
    """The seq ranges a micro-batch from `start` to `end` reads (see the module docstring)."""
    out: list[SeqRange] = []
    for t in sorted(end):
        e = end[t]
        if e.first is not None:
            begin = e.first
        elif t in start:
            begin = start[t].next
        else:
            begin = 1
        if e.next > begin:
            out.append(SeqRange(t, begin - 1, e.next - 1))
    return out


def carry_forward(offsets: Mapping[str, TopicOffset]) -> dict[str, TopicOffset]:
    """The same positions without one-batch `first` markers."""
    return {t: TopicOffset(o.next) for t, o in offsets.items()}


# ---- positions ----------------------------------------------------------------------------


def resolve_start(position: Position, topic: str, earliest: int, head: int) -> int | None:
    """The first seq to read for `topic`, or None when the position is a timestamp (the
    caller resolves those with `first_seq_at_or_after`)."""
    kind = position.kind
    if kind is PositionKind.SEQS:
        seq = position.seq_for(topic)
        if seq is None:
            kind = position.default
        elif seq == EARLIEST_SENTINEL:
            return earliest
        elif seq == LATEST_SENTINEL:
            return head + 1
        else:
            return max(seq, 1)
    if kind is PositionKind.EARLIEST:
        return earliest
    if kind is PositionKind.LATEST:
        return head + 1
    return None


def resolve_end(position: Position, topic: str, head: int) -> int | None:
    """The exclusive end seq for `topic` (never past the head), or None for a timestamp."""
    kind = position.kind
    if kind is PositionKind.SEQS:
        seq = position.seq_for(topic)
        if seq is None:
            kind = position.default
        elif seq == LATEST_SENTINEL:
            return head + 1
        else:
            return min(max(seq, 1), head + 1)
    if kind is PositionKind.TIMESTAMP:
        return None
    return head + 1


Probe = Callable[[int], "tuple[int, int] | None"]


def first_seq_at_or_after(ts_ms: int, earliest: int, head: int, probe: Probe) -> int:
    """The smallest seq `x` in `[earliest, head + 1]` such that the first live record at or
    after `x` has `ts >= ts_ms` (or there is none). `probe(after)` returns `(seq, ts)` of the
    first live record with seq > after, or None. Valid because `ts` never decreases with seq
    (SEMANTICS §4.2); costs O(log(head - earliest)) probes."""
    lo, hi = max(earliest, 1), head + 1
    while lo < hi:
        mid = (lo + hi) // 2
        rec = probe(mid - 1)
        if rec is None or rec[1] >= ts_ms:
            hi = mid
        else:
            # the probe may answer with a record past `head` (those in between deleted):
            # the answer never leaves [earliest, head + 1]
            lo = min(rec[0] + 1, hi) if rec[0] >= mid else mid + 1
    return lo


def lags(heads: Mapping[str, int], begins: Mapping[str, int]) -> dict[str, int]:
    """Records available per topic: `head + 1 - begin` (never negative)."""
    return {t: max(0, heads[t] + 1 - begins[t]) for t in heads if t in begins}


def sum_sizes(ranges: Sequence[SeqRange]) -> int:
    return sum(r.size for r in ranges)
