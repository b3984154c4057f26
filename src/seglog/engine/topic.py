"""In-memory state of one topic instance: the dense slot index, floors, counters, tag index.

Owner: `TopicState` is mutated only by the engine while holding `TopicState.lock`; every
method here assumes the caller holds it. Readers receive immutable `Record`/`ReadResult`
values built under the lock.

Slots are indexed by `seq - origin`; `front` is the index of `base_seq` (slots before it
are popped but not yet compacted away). A slot is *dead* when it was deleted, is a hole
(failed write, reservation padding) or was popped; dead slots keep their position so
`seq → slot` stays O(1). Payloads of records materialized in sealed segments may be dropped
from memory and are read back through `TopicSegments`; the oldest slots without payloads
then leave the parallel list columns for numpy ones (`FrozenSlots`: 11 bytes a record with
its dead flag, against ~50 in the lists), so the lists hold only the newest slots: the dead
flags (`flags`, in the same column memory) cover every slot, the lists the slots from
`frozen.n` on.
"""

from __future__ import annotations

import builtins
import itertools
import operator
from bisect import bisect_left, bisect_right
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from seglog.core.flag_search import count_dead, find_live
from seglog.core.watermarks import (
    Floors,
    byte_cap_cut,
    earliest_above,
    involuntary_floor,
    record_cap_cut,
    tombstone_for,
    ttl_cut,
)
from seglog.engine.frozen_slots import Codes, FrozenSlots
from seglog.engine.interrupts import ShieldedLock
from seglog.engine.slot_flags import SlotFlags
from seglog.model import (
    Durability,
    Record,
    RecordBatch,
    Selector,
    TopicConfig,
)

# A record of a read whose payload is still to be loaded: (index in the read's records,
# seq, ts, node, tag); its slot holds `PLACEHOLDER` meanwhile.
Missing = tuple[int, int, int, "str | None", "str | None"]
PLACEHOLDER = Record(0, 0, b"")

# A read examines at most this many slots, so a huge deleted or filtered region costs
# bounded work per call; the cursor still advances past what was examined.
MAX_SLOTS_EXAMINED = 65_536


@dataclass(slots=True)
class DedupeEntry:
    created_ms: int
    op: Any  # the PendingOp of the original write (engine-owned)


@dataclass(slots=True)
class RetentionCut:
    """Floors a retention pass wants to raise; `needs_watermark` when TTL or byte cap moved."""

    evict_floor: int
    expiry_floor: int
    needs_watermark: bool

    def covers(self, other: RetentionCut) -> bool:
        return self.evict_floor >= other.evict_floor and self.expiry_floor >= other.expiry_floor


@dataclass(slots=True)
class Rows:
    """Slot columns for seqs `first_seq ..`, copied from a `TopicState` under its lock so
    that sealing and snapshots can encode them after releasing it. A dead row is a hole."""

    first_seq: int
    ts: list[int]
    node: list[str | None]
    tag: list[str | None]
    data: list[builtins.bytes | None]
    meta: list[builtins.bytes | None]
    size: list[int]
    dead: bytearray


def first_payload(data: list[bytes | None], start: int = 0) -> int:
    """The index of the first item of `data` at or after `start` that is not None, or
    `len(data)`. Searched in C (`is_not` mapped over a chunk at a time), stopping at the
    hit: `list.count(None)` would compare every payload with None through `bytes.__eq__`."""
    k, n = start, len(data)
    while k < n:
        chunk = data[k : k + 4096]
        hit = itertools.compress(
            itertools.count(k), map(operator.is_not, chunk, itertools.repeat(None))
        )
        found = next(hit, -1)
        if found >= 0:
            return found
        k += len(chunk)
    return n


@dataclass(slots=True)
class TopicState:
    name: str
    topic_id: int
    config: TopicConfig
    epoch: int = 1
    lock: ShieldedLock = field(default_factory=ShieldedLock)
    # slot index
    origin: int = 1
    front: int = 0
    # the oldest slots, `[0, frozen.n)`, whose payloads are only in sealed segments ...
    frozen: FrozenSlots = field(default_factory=FrozenSlots)
    # ... and the others, `[frozen.n, flags.n)`, in list columns (`_ts[i - frozen.n]`)
    _ts: list[int] = field(default_factory=list)
    _data: list[builtins.bytes | None] = field(default_factory=list)
    _meta: list[builtins.bytes | None] = field(default_factory=list)
    _node: list[str | None] = field(default_factory=list)
    _tag: list[str | None] = field(default_factory=list)
    _size: list[int] = field(default_factory=list)
    flags: SlotFlags = field(init=False)  # every slot's dead flag, `[0, slot_count)`
    # seqs and floors
    head: int = 0
    reserved: int = 0
    reservation: int = 0  # disk class: highest head reservation submitted to the WAL
    reservation_durable: int = 0  # ... and the highest one known committed
    # disk class: the next reservation, submitted ahead of need and not waited for:
    # (its value, its Commit). It becomes `reservation_durable` once its commit is seen done.
    pre_reservation: tuple[int, Any] | None = None
    evict_floor: int = 0
    expiry_floor: int = 0
    source_trim_floor: int = 0
    delete_floor: int = 0
    count: int = 0
    bytes: int = 0
    # tag → ascending seqs of live records, built on the first tag query (`tags`): until
    # then the `tag` column alone is the truth, and writes and recovery skip the upkeep
    _tags: dict[str, list[int]] | None = None
    _tag_keys: list[str] | None = None
    # ops reserved/submitted but not yet applied, in seq/WAL order (engine-owned)
    pending: deque[Any] = field(default_factory=deque)
    pending_count: int = 0
    pending_bytes: int = 0
    pending_cut: Any = None  # the EvictWatermark op in flight, if any (engine-owned)
    dedupe: OrderedDict[str, DedupeEntry] = field(default_factory=OrderedDict)
    last_write_ts: int | None = None
    last_reserved_ts: int = 0  # ts of the newest write reserved (published or not)
    last_read_ts: int | None = None
    last_consumed_ms: int | None = None
    deleted: bool = False
    segments: Any = None  # TopicSegments for persistent topics (engine-owned)
    leases: Any = None  # LeaseBook of a queue topic, created on first use (engine.queues)

    def __post_init__(self) -> None:
        self.flags = SlotFlags(self.frozen.memory)

    # ---- derived values -------------------------------------------------------------
    @property
    def dead(self) -> memoryview:
        """Every slot's dead flag, `[0, slot_count)`: a view, valid until the flags grow or
        the front is compacted; a slice is a view too (copy it with `bytes` to keep)."""
        return self.flags.view

    @property
    def base_seq(self) -> int:
        return self.origin + self.front

    @property
    def end_seq(self) -> int:
        """One past the last slot."""
        return self.origin + self.flags.n

    @property
    def slot_count(self) -> int:
        return self.flags.n

    def floors(self) -> Floors:
        return Floors(
            self.evict_floor, self.expiry_floor, self.source_trim_floor, self.delete_floor
        )

    def earliest(self) -> int:
        top = max(self.evict_floor, self.expiry_floor, self.source_trim_floor, self.delete_floor)
        return earliest_above(top, self.base_seq, self.head)

    def involuntary(self) -> int:
        return involuntary_floor(self.floors(), self.head)

    @property
    def persistent(self) -> bool:
        return self.config.durability is not Durability.EPHEMERAL

    # ---- slots ------------------------------------------------------------------------
    def append_slot(
        self,
        seq: int,
        ts: int,
        data: builtins.bytes | None,
        meta: builtins.bytes | None,
        node: str | None,
        tag: str | None,
        size: int,
        dead: bool = False,
    ) -> None:
        """Append the slot for `seq == head + 1` and publish it (head advances)."""
        assert seq == self.end_seq == self.head + 1, (seq, self.end_seq, self.head)
        self._ts.append(ts)
        self._data.append(None if dead else data)
        self._meta.append(None if dead else meta)
        self._node.append(node)
        self._tag.append(None if dead else tag)
        self._size.append(0 if dead else size)
        self.flags.append(1 if dead else 0)
        self.head = seq
        if self.reserved < seq:
            self.reserved = seq
        if not dead:
            self.count += 1
            self.bytes += size
            if tag is not None:
                self._tag_add(tag, seq)

    def replay_slot(
        self,
        seq: int,
        ts: int,
        data: builtins.bytes,
        meta: builtins.bytes | None,
        node: str | None,
        tag: str | None,
    ) -> None:
        """Recovery's `append_slot` for `seq == head + 1` (checked by the caller)."""
        size = len(data) + (len(meta) if meta is not None else 0)
        self._ts.append(ts)
        self._data.append(data)
        self._meta.append(meta)
        self._node.append(node)
        self._tag.append(tag)
        self._size.append(size)
        self.flags.append(0)
        self.head = self.reserved = seq
        self.count += 1
        self.bytes += size
        self.last_write_ts = ts
        if tag is not None:
            self._tag_add(tag, seq)

    def replay_rows(
        self,
        first_seq: int,
        ts: list[int],
        data: list[builtins.bytes | None],
        meta: list[builtins.bytes | None],
        node: list[str | None],
        tag: list[str | None],
        sizes: list[int] | None = None,
    ) -> None:
        """`replay_slot` for the live records `first_seq, first_seq + 1, ...` (columns of
        equal length; `first_seq == head + 1`, checked by the caller) in one go. A `None`
        payload is held by a sealed segment: then `sizes` must be given."""
        n = len(ts)
        if n == 0:
            return
        if sizes is None:
            sizes = list(map(len, cast("list[builtins.bytes]", data)))  # all present
            if meta.count(None) != n:
                for i, m in enumerate(meta):
                    if m is not None:
                        sizes[i] += len(m)
        self._extend(ts, data, meta, node, tag, sizes, bytes(n))
        last = first_seq + n - 1
        self.head = self.reserved = last
        self.count += n
        self.bytes += sum(sizes)
        self.last_write_ts = ts[-1]
        index = self._tags
        if index is not None and tag.count(None) != n:
            for seq, g in zip(range(first_seq, last + 1), tag, strict=True):
                if g is not None:
                    lst = index.get(g)
                    if lst is None:
                        index[g] = [seq]
                        self._tag_keys = None
                    else:
                        lst.append(seq)

    def replay_frozen(
        self,
        first_seq: int,
        ts: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        node: Codes,
        tag: Codes,
    ) -> None:
        """`replay_rows` for live records whose payloads are in a sealed segment, straight
        into the frozen columns (node and tag are codes of `frozen`'s table): recovery's
        restore of a snapshot's segment references, while no slot is in the lists yet.
        Seqs between the head and `first_seq` become holes."""
        assert not self._ts and first_seq > self.head, (first_seq, self.head)
        fr = self.frozen
        gap = first_seq - self.head - 1
        if gap:
            fr.extend_holes(gap, int(ts[0]))
            self.flags.extend(b"\x01" * gap)
        n = len(ts)
        fr.extend(ts, sizes, node, tag)
        self.flags.extend(bytes(n))
        self.head = self.reserved = first_seq + n - 1
        self.count += n
        self.bytes += int(sizes.sum(dtype=np.int64))
        self.last_write_ts = int(ts[-1])
        if self._tags is not None:
            self._tags = None  # rebuilt on the next tag query
            self._tag_keys = None

    def _extend(
        self,
        ts: Sequence[int],
        data: Sequence[builtins.bytes | None],
        meta: Sequence[builtins.bytes | None],
        node: Sequence[str | None],
        tag: Sequence[str | None],
        size: Sequence[int],
        dead: builtins.bytes,
    ) -> None:
        """Append slots to the list columns (and their dead flags)."""
        self._ts.extend(ts)
        self._data.extend(data)
        self._meta.extend(meta)
        self._node.extend(node)
        self._tag.extend(tag)
        self._size.extend(size)
        self.flags.extend(dead)

    def publish_batch(self, first_seq: int, ts: int, records: RecordBatch) -> None:
        """Publish a committed write: the hot path, so it fills the slot columns a whole
        column at a time (`append_slot` per record is several times slower)."""
        assert first_seq == self.end_seq == self.head + 1
        n = len(records)
        tags = records.tag
        sizes = records.sizes()
        self._extend([ts] * n, records.data, records.meta, records.node, tags, sizes, bytes(n))
        if self._tags is not None and tags.count(None) != n:
            add = self._tag_add
            for seq, tag in enumerate(tags, first_seq):
                if tag is not None:
                    add(tag, seq)
        self.head = first_seq + n - 1
        if self.reserved < self.head:
            self.reserved = self.head
        self.count += n
        self.bytes += sum(sizes)
        self.last_write_ts = ts

    def append_holes(self, upto: int, ts: int) -> None:
        """Dead slots up to `upto` (failed writes, reservation padding, trim holes)."""
        n = upto - self.head
        if n <= 0:
            return
        self._extend([ts] * n, [None] * n, [None] * n, [None] * n, [None] * n, [0] * n, b"\x01" * n)
        self.head = upto
        if self.reserved < upto:
            self.reserved = upto

    def is_live(self, seq: int) -> bool:
        i = seq - self.origin
        return self.front <= i < self.flags.n and not self.dead[i] and seq >= self.earliest()

    def liveness(self) -> Callable[[int], bool]:
        """`is_live` for many seqs in a row under the lock: the floors are read once."""
        lo = max(self.earliest() - self.origin, self.front)
        origin, n, dead = self.origin, self.flags.n, self.dead

        def live(seq: int) -> bool:
            i = seq - origin
            return lo <= i < n and not dead[i]

        return live

    def count_live(self, seqs: Collection[int]) -> int:
        """How many of `seqs` are live (`is_live` of each), counted with numpy over the
        dead flags when there are many."""
        n = len(seqs)
        if n == 0:
            return 0
        if n < 32:
            live = self.liveness()
            return sum(1 for s in seqs if live(s))
        at = np.fromiter(seqs, np.int64, n) - self.origin
        lo = max(self.earliest() - self.origin, self.front)
        at = at[(at >= lo) & (at < self.flags.n)]
        dead_picked = np.frombuffer(self.dead, np.uint8)[at]
        return int(len(at) - np.count_nonzero(dead_picked))

    def kill(self, seq: int) -> int:
        """Mark a live slot deleted; returns its bytes (or -1 if it was not live)."""
        i = seq - self.origin
        if not (self.front <= i < self.flags.n) or self.dead[i]:
            return -1
        j = i - self.frozen.n
        if j < 0:
            size = self.frozen.size_at(i)
            self.frozen.zero_size(i)
        else:
            size = self._size[j]
            self._data[j] = None
            self._meta[j] = None
            self._size[j] = 0
        self.dead[i] = 1
        self.count -= 1
        self.bytes -= size
        return size

    # ---- tag index ----------------------------------------------------------------------
    @property
    def tags(self) -> dict[str, list[int]]:
        """The tag index, built from the `tag` column of the live slots on first use and
        kept up to date from then on. Most topics are never queried by tag; a recovery of
        millions of tagged records spent a second building it for nothing."""
        index = self._tags
        if index is None:
            index = self._frozen_tags()
            origin, tags, dead, f = self.origin, self._tag, self.dead, self.frozen.n
            for i in range(max(self.front, f), len(dead)):
                g = tags[i - f]
                if g is not None and not dead[i]:
                    lst = index.get(g)
                    if lst is None:
                        index[g] = [origin + i]
                    else:
                        lst.append(origin + i)
            self._tags = index
            self._tag_keys = None
        return index

    def _frozen_tags(self) -> dict[str, list[int]]:
        """The tag index of the live frozen slots, grouped with numpy."""
        a, b = self.front, self.frozen.n
        if a >= b:
            return {}
        labels, codes = self.frozen.tag_codes(a, b)
        live = np.frombuffer(self.dead[a:b], np.uint8) == 0
        rows = np.flatnonzero(live & (codes != 0))
        if not len(rows):
            return {}
        picked = codes[rows]
        order = np.argsort(picked, kind="stable")  # stable: each group's seqs ascend
        picked, seqs = picked[order], rows[order] + (self.origin + a)
        starts = np.flatnonzero(np.concatenate(([True], picked[1:] != picked[:-1])))
        ends = [*starts[1:].tolist(), len(picked)]
        out: dict[str, list[int]] = {}
        for s, e in zip(starts.tolist(), ends, strict=True):
            out[cast(str, labels[int(picked[s])])] = seqs[s:e].tolist()
        return out

    def _tag_add(self, tag: str, seq: int) -> None:
        index = self._tags
        if index is None:
            return
        lst = index.get(tag)
        if lst is None:
            index[tag] = [seq]
            self._tag_keys = None
        else:
            lst.append(seq)

    def _tag_remove(self, tag: str, seq: int) -> None:
        index = self._tags
        if index is None:
            return
        lst = index.get(tag)
        if not lst:
            return
        j = bisect_left(lst, seq)
        if j < len(lst) and lst[j] == seq:
            del lst[j]
            if not lst:
                del index[tag]
                self._tag_keys = None

    def tag_matches(self, sel: Selector, below: int) -> list[int]:
        """Live seqs `< below` whose tag matches, via the tag index (never a log scan)."""
        if sel.op == "Eq":
            lists = [self.tags.get(sel.value, [])]
        else:
            if self._tag_keys is None:
                self._tag_keys = sorted(self.tags)
            keys = self._tag_keys
            lists = []
            j = bisect_left(keys, sel.value)
            while j < len(keys) and keys[j].startswith(sel.value):
                lists.append(self.tags[keys[j]])
                j += 1
        out: list[int] = []
        for lst in lists:
            out.extend(lst[: bisect_left(lst, below)])
        out.sort()
        return out

    # ---- deletes --------------------------------------------------------------------------
    def apply_delete(
        self,
        before_seq: int | None,
        match: Selector | None,
        bound: int,
        seqs: Iterable[int] = (),
        ceiling: int | None = None,
    ) -> list[int]:
        """SEMANTICS §7: delete live records `< min(before_seq, bound)` (tag-filtered when
        `match`), or exactly `seqs`. Returns the killed seqs (sealed ones need flag flips)."""
        killed: list[int] = []
        explicit = list(seqs)
        if explicit:
            for s in explicit:
                tag = self._slot_tag(s)
                if self.kill(s) >= 0:
                    killed.append(s)
                    if tag is not None:
                        self._tag_remove(tag, s)
            self.pop_front()
            return killed
        # Never above the visible head (`ceiling`, replay: the head the topic will have once
        # its reservation is padded): a bound logged while writes were in flight may cover
        # seqs that failed (holes), and a later write must not land under the floor.
        top = self.head if ceiling is None else ceiling
        limit = min(bound if before_seq is None else min(before_seq, bound), top + 1)
        if match is not None:
            for s in self.tag_matches(match, limit):
                tag = self._slot_tag(s)
                if self.kill(s) >= 0:
                    killed.append(s)
                    if tag is not None:
                        self._tag_remove(tag, s)
        else:
            # Everything below the new floor leaves through the front pop (which adjusts
            # count/bytes); sealed copies need no flag flip because the floor covers them.
            self.delete_floor = max(self.delete_floor, limit - 1)
        self.pop_front()
        return killed

    def _slot_tag(self, seq: int) -> str | None:
        i = seq - self.origin
        if not self.front <= i < self.flags.n:
            return None
        j = i - self.frozen.n
        return self.frozen.tag_at(i) if j < 0 else self._tag[j]

    # ---- retention ----------------------------------------------------------------------------
    def retention_cut(self, now: int) -> RetentionCut | None:
        """SEMANTICS §4.2 steps 1–3: the floors the pass would raise, or None."""
        cfg = self.config
        if not cfg.has_retention:
            return None
        evict, expiry = self.evict_floor, self.expiry_floor
        moved_wm = False
        lo, hi = self.front, self.flags.n
        if cfg.ttl_ms > 0 and lo < hi:
            cut = self._ttl_cut(lo, hi, now, cfg.ttl_ms)
            if cut > lo:
                last = self.origin + cut - 1
                if last > expiry:
                    expiry = last
                    moved_wm = True
        if cfg.cap_records > 0:
            evict = max(evict, self._record_cap_floor(max(evict, expiry, self.source_trim_floor)))
        if cfg.cap_bytes > 0:
            inv = max(evict, expiry, self.source_trim_floor)
            retained = self._live_bytes_above(inv)
            if retained > cfg.cap_bytes:
                start = max(lo, inv + 1 - self.origin)
                end = self._byte_cap_cut(start, hi, retained - cfg.cap_bytes)
                if end > start:
                    last = self.origin + end - 1
                    if last > evict:
                        evict = last
                        moved_wm = True
        if evict == self.evict_floor and expiry == self.expiry_floor:
            return None
        return RetentionCut(evict, expiry, moved_wm)

    def _ttl_cut(self, lo: int, hi: int, now: int, ttl_ms: int) -> int:
        """`watermarks.ttl_cut` over both column stores."""
        f = self.frozen.n
        if lo < f:
            cut = self.frozen.ts_search(now - ttl_ms, lo, min(hi, f))
            if cut < f or hi <= f:
                return cut
            lo = f
        return f + ttl_cut(self._ts, lo - f, hi - f, now, ttl_ms)

    def _byte_cap_cut(self, lo: int, hi: int, excess: int) -> int:
        """`watermarks.byte_cap_cut` over both column stores."""
        f = self.frozen.n
        if lo < f:
            mid = min(hi, f)
            cut = self.frozen.byte_cut(lo, mid, excess)
            if cut < mid or hi <= f:
                return cut
            excess -= self.frozen.size_sum(lo, mid)
            if excess <= 0:
                return cut
            lo = f
        return f + byte_cap_cut(self._size, lo - f, hi - f, excess)

    def size_sum(self, a: int, b: int) -> int:
        """The bytes of the slots `[a, b)` (dead ones count 0)."""
        f = self.frozen.n
        b = min(b, self.flags.n)
        if a >= b:
            return 0
        if b <= f:
            return self.frozen.size_sum(a, b)
        if a >= f:
            return sum(self._size[a - f : b - f])
        return self.frozen.size_sum(a, f) + sum(self._size[: b - f])

    def apply_record_cap(self) -> None:
        """Step 2 of the retention pass alone (recovery replays it after every append)."""
        floor = self._record_cap_floor(self.involuntary_floor_seq())
        if floor > self.evict_floor:
            self.evict_floor = floor
            self.pop_front()

    def involuntary_floor_seq(self) -> int:
        return max(self.evict_floor, self.expiry_floor, self.source_trim_floor)

    def _record_cap_floor(self, floor: int) -> int:
        """The evict floor that leaves exactly the newest `cap_records` live records above
        `floor` (0 when they fit)."""
        start = max(self.front, floor + 1 - self.origin)
        end = self.flags.n
        if start >= end:
            return 0
        below = start - self.front
        if below:
            below -= count_dead(self.dead, self.front, start)
        cut = record_cap_cut(self.dead, start, end, self.count - below - self.config.cap_records)
        return self.origin + cut if cut >= 0 else 0

    def _live_bytes_above(self, floor: int) -> int:
        """Live bytes of slots with seq > floor."""
        start = floor + 1 - self.origin
        if start <= self.front:
            return self.bytes
        # Subtract what lies between base and the floor (bounded by the evicted region).
        return self.bytes - self.size_sum(self.front, start)

    def apply_cut(self, cut: RetentionCut) -> None:
        self.evict_floor = max(self.evict_floor, cut.evict_floor)
        self.expiry_floor = max(self.expiry_floor, cut.expiry_floor)
        self.pop_front()

    def pop_front(self) -> None:
        """§4.2 step 5: pop every slot below earliest_seq and the dead run after it."""
        stop = self.earliest() - self.origin
        n = self.flags.n
        i = self.front
        f = self.frozen.n
        if i < min(stop, f):
            i = self._pop_frozen(i, min(stop, n, f))
        dead = self.dead
        while i < min(stop, n):
            if not dead[i]:
                j = i - f
                self.count -= 1
                self.bytes -= self._size[j]
                tag = self._tag[j]
                if tag is not None:
                    self._tag_remove(tag, self.origin + i)
                dead[i] = 1
                self._data[j] = None
                self._meta[j] = None
                self._size[j] = 0
            i += 1
        if i < n and dead[i]:  # and the dead run after the stop
            live = find_live(dead, i, n)
            i = n if live < 0 else live
        self.front = i
        if self.front > 4096 and self.front * 2 > n:
            self._compact()

    def _pop_frozen(self, a: int, b: int) -> int:
        """`pop_front` over the frozen slots `[a, b)`, with numpy when they are many (a
        capped topic pops one or a few at a time)."""
        if b - a < 64:
            fr, dead = self.frozen, self.dead
            for i in range(a, b):
                if not dead[i]:
                    self.count -= 1
                    self.bytes -= fr.size_at(i)
                    tag = fr.tag_at(i) if self._tags is not None else None
                    if tag is not None:
                        self._tag_remove(tag, self.origin + i)
                    fr.zero_size(i)
                    dead[i] = 1
            return b
        rows = np.flatnonzero(np.frombuffer(self.dead[a:b], np.uint8) == 0)
        if len(rows):
            self.count -= len(rows)
            self.bytes -= int(self.frozen.sizes(a, b)[rows].sum(dtype=np.int64))
            if self._tags is not None:
                labels, codes = self.frozen.tag_codes(a, b)
                tagged = rows[codes[rows] != 0]
                for r, c in zip(tagged.tolist(), codes[tagged].tolist(), strict=True):
                    self._tag_remove(cast(str, labels[c]), self.origin + a + r)
            self.frozen.zero_sizes(a, b)
            self.dead[a:b] = b"\x01" * (b - a)
        return b

    def _compact(self) -> None:
        k = self.front
        f = self.frozen.n
        self.frozen.drop_prefix(k)
        if k > f:
            for lst in (self._ts, self._data, self._meta, self._node, self._tag, self._size):
                del lst[: k - f]
        self.flags.drop_prefix(k)
        self.origin += k
        self.front = 0

    # ---- reads ------------------------------------------------------------------------------
    def read(
        self, cursor: int, limit: int, nodes: frozenset[str], max_bytes: int, now: int
    ) -> tuple[list[Record], list[Missing], int, Any, int]:
        """SEMANTICS §4.4–§4.5. Returns (records, missing, next_from_seq, tombstone, scanned).

        Sizes are known in memory, so the byte budget is exact without payloads. A record
        whose payload left memory is a placeholder in `records`, described in `missing`: the
        caller builds it from the sealed segments after releasing the lock
        (`payloads.fill`)."""
        tomb, pos = tombstone_for(cursor, self.floors(), self.base_seq, self.head)
        head = self.head
        ttl = self.config.ttl_ms
        expired_before = now - ttl if ttl > 0 else None
        node_filter = nodes if (nodes and self.config.dedupe_node) else None
        out: list[Record] = []
        missing: list[Missing] = []
        used = 0
        scanned = 0
        origin, front, dead = self.origin, self.front, self.dead
        seq = pos + 1
        # The columns of slots `[w_lo, w_hi)`: the list columns themselves, or a window of
        # the frozen ones as lists (growing, so a short read converts little).
        w_lo = w_hi = 0
        w_ts: list[int] = []
        w_node: list[str | None] = []
        w_tag: list[str | None] = []
        w_size: list[int] = []
        w_data: list[builtins.bytes | None] | None = None
        w_meta: list[builtins.bytes | None] = []
        want = 2 * limit + 16
        while seq <= head and len(out) < limit and scanned < MAX_SLOTS_EXAMINED:
            i = seq - origin
            if i < front or dead[i]:
                pos = seq
                seq += 1
                scanned += 1
                continue
            if not w_lo <= i < w_hi:
                f = self.frozen.n
                if i >= f:
                    w_lo, w_hi, w_data, w_meta = f, len(dead), self._data, self._meta
                    w_ts, w_node, w_tag, w_size = self._ts, self._node, self._tag, self._size
                else:
                    w_lo, w_hi, w_data = i, min(f, i + want), None
                    want *= 2
                    w_ts = self.frozen.ts_list(w_lo, w_hi)
                    w_node = self.frozen.node_list(w_lo, w_hi)
                    w_tag = self.frozen.tag_list(w_lo, w_hi)
                    w_size = self.frozen.size_list(w_lo, w_hi)
            k = i - w_lo
            ts = w_ts[k]
            if expired_before is not None and ts < expired_before:
                pos, seq, scanned = seq, seq + 1, scanned + 1
                continue
            node = w_node[k]
            if node_filter is not None and node is not None and node in node_filter:
                pos, seq, scanned = seq, seq + 1, scanned + 1
                continue
            size = w_size[k]
            if out and used + size > max_bytes:
                break
            data = None if w_data is None else w_data[k]
            if data is None:
                missing.append((len(out), seq, ts, node, w_tag[k]))
                out.append(PLACEHOLDER)
            else:
                out.append(Record(seq, ts, data, w_meta[k], node, w_tag[k]))
            used += size
            pos = seq
            seq += 1
            scanned += 1
        return out, missing, pos, tomb, scanned

    def rows(self, first: int, last: int) -> Rows:
        """Copies of the slot columns for `[first, last]` (list slices; seqs below the live
        front come back as holes)."""
        lo, hi = first - self.origin, last - self.origin + 1
        low = max(lo, self.front)
        n = max(low - lo, 0)
        no_str: list[str | None] = [None] * n
        no_bytes: list[builtins.bytes | None] = [None] * n
        ts, node, tag, data, meta, size = self.columns(low, hi)
        return Rows(
            first,
            [self._ts_at(i) if i >= 0 else 0 for i in range(lo, lo + n)] + ts,
            no_str + node,
            no_str + tag,
            no_bytes + data,
            no_bytes + meta,
            [0] * n + size,
            bytearray(b"\x01" * n) + self.dead[low:hi],
        )

    def columns(self, a: int, b: int) -> tuple[
        list[int], list[str | None], list[str | None], list[builtins.bytes | None],
        list[builtins.bytes | None], list[int],
    ]:  # fmt: skip
        """New lists of the `ts`, node, tag, data, meta and size columns of the slots
        `[a, b)` (`0 <= a`; a frozen slot's data and meta are None)."""
        f = self.frozen.n
        b = min(b, self.flags.n)
        if a >= b:
            return [], [], [], [], [], []
        if a >= f:
            x, y = a - f, b - f
            return (
                self._ts[x:y], self._node[x:y], self._tag[x:y], self._data[x:y],
                self._meta[x:y], self._size[x:y],
            )  # fmt: skip
        fr, mid, y = self.frozen, min(b, f), max(b - f, 0)
        none: list[builtins.bytes | None] = [None] * (mid - a)
        return (
            fr.ts_list(a, mid) + self._ts[:y],
            fr.node_list(a, mid) + self._node[:y],
            fr.tag_list(a, mid) + self._tag[:y],
            none + self._data[:y],
            none + self._meta[:y],
            fr.size_list(a, mid) + self._size[:y],
        )

    def sizes_at(self, slots: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """The sizes of the (ascending, in range) `slots`."""
        f = self.frozen.n
        k = int(np.searchsorted(slots, f))
        out = np.empty(len(slots), np.int64)
        if k:
            out[:k] = self.frozen.sizes(0, f)[slots[:k]]
        if k < len(slots):
            rest = (slots[k:] - f).tolist()
            if rest[-1] - rest[0] + 1 == len(rest):
                out[k:] = self._size[rest[0] : rest[-1] + 1]
            else:
                sizes = self._size
                out[k:] = [sizes[j] for j in rest]
        return out

    def pick_columns(self, slots: list[int]) -> tuple[
        list[int], list[str | None], list[str | None], list[builtins.bytes | None],
        list[builtins.bytes | None], list[int],
    ]:  # fmt: skip
        """`columns`, but of the (ascending, in range) `slots` only: a sparse page touches
        only its rows."""
        f = self.frozen.n
        k = bisect_left(slots, f)
        ts: list[int] = []
        node: list[str | None] = []
        tag: list[str | None] = []
        size: list[int] = []
        data: list[builtins.bytes | None] = [None] * k
        meta: list[builtins.bytes | None] = [None] * k
        if k:
            ts, node, tag, size = self.frozen.pick(np.array(slots[:k], np.intp))
        if k < len(slots):
            at = [i - f for i in slots[k:]]
            ts += [self._ts[j] for j in at]
            node += [self._node[j] for j in at]
            tag += [self._tag[j] for j in at]
            data += [self._data[j] for j in at]
            meta += [self._meta[j] for j in at]
            size += [self._size[j] for j in at]
        return ts, node, tag, data, meta, size

    def _ts_at(self, i: int) -> int:
        j = i - self.frozen.n
        return self.frozen.ts_at(i) if j < 0 else self._ts[j]

    def last_ts(self) -> int:
        """The `ts` of the newest slot (0 when there is none)."""
        if self._ts:
            return self._ts[-1]
        return self.frozen.ts_at(self.frozen.n - 1) if self.frozen.n else 0

    def ts_bisect(self, value: int, right: bool = False) -> int:
        """`bisect_left` (`bisect_right` with `right`) of `value` over the `ts` of the live
        slots from the front (slot indices; `ts` never decreases with the slot)."""
        f, lo = self.frozen.n, self.front
        if lo < f:
            cut = self.frozen.ts_search(value, lo, f, right)
            if cut < f:
                return cut
            lo = f
        bisect = bisect_right if right else bisect_left
        return f + bisect(self._ts, value, lo - f)

    def has_payload(self, seq: int) -> bool:
        """Whether the payload of `seq`'s slot is in memory."""
        j = seq - self.origin - self.frozen.n
        return 0 <= j < len(self._data) and self._data[j] is not None

    def slot(self, seq: int) -> tuple[int, builtins.bytes | None, builtins.bytes | None,
                                      str | None, str | None]:  # fmt: skip
        """`(ts, data, meta, node, tag)` of `seq`'s slot (data None: in a sealed segment)."""
        i = seq - self.origin
        if not 0 <= i < self.flags.n:
            raise IndexError(f"seq {seq} has no slot in {self.name!r}")
        j = i - self.frozen.n
        if j < 0:
            fr = self.frozen
            return fr.ts_at(i), None, None, fr.node_at(i), fr.tag_at(i)
        return self._ts[j], self._data[j], self._meta[j], self._node[j], self._tag[j]

    def drop_payloads(self, a: int, b: int) -> None:
        """The payloads of slots `[a, b)` are in sealed segments only from now on; the
        prefix of slots without payloads in memory then leaves the list columns."""
        f = self.frozen.n
        x, y = max(a - f, 0), min(b - f, len(self._data))
        if x < y:
            self._data[x:y] = itertools.repeat(None, y - x)
            self._meta[x:y] = itertools.repeat(None, y - x)
        # The search for the first payload left starts past a prefix just cleared: the
        # seal's call runs under the topic's lock, and its prefix is thousands of slots.
        self._freeze(y if x == 0 < y else 0)

    def _freeze(self, known: int = 0) -> None:
        """Move the leading list slots that hold no payload into the frozen columns (a
        slot without its payload in memory has no meta there either); the first `known`
        slots are known to hold none."""
        k = first_payload(self._data, known)
        if k == 0:
            return
        self.frozen.extend_lists(self._ts[:k], self._size[:k], self._node[:k], self._tag[:k])
        for lst in (self._ts, self._data, self._meta, self._node, self._tag, self._size):
            del lst[:k]

    def live_runs(self) -> list[tuple[int, int]]:
        """`live_records` as inclusive (first, last) runs of consecutive seqs, ascending."""
        start = max(self.front, self.earliest() - self.origin)
        live = np.frombuffer(self.dead[start:], np.uint8) == 0
        if not live.any():
            return []
        edges = np.diff(np.concatenate(([False], live, [False])).astype(np.int8))
        firsts = np.flatnonzero(edges == 1) + self.origin + start
        lasts = np.flatnonzero(edges == -1) - 1 + self.origin + start
        return list(zip(firsts.tolist(), lasts.tolist(), strict=True))

    def live_records(self) -> Iterable[int]:
        """Seqs of live slots at or above earliest_seq (snapshot capture, sealing checks)."""
        start = max(self.front, self.earliest() - self.origin)
        for i in range(start, self.flags.n):
            if not self.dead[i]:
                yield self.origin + i
