"""The forwarding step (SEMANTICS §8.3) and the drains built on it (§8.5).

`Forwarder.step(router)` moves one router forward by at most `BATCH` source seqs:

1. retention on the source (waiting for a due eviction watermark, so every record expired
   by `now` is below the source's involuntary floor before the walk);
2. records the source can no longer give (`(cursor, E_inv)`) become source-trim holes at
   the dest and count as forwarded;
3. the walk: deleted or popped slots, copies at the hop cap (routers on a cycle), and
   records the filter refuses are consumed; an `exactly_once` record whose previous copy is still live in the dest is
   consumed and counted; the rest are copied (data, meta, optional node and tag). A copy a
   `discard:"reject"` dest would refuse, or an invalid `exactly_once` copy, stops the walk
   there (retried later);
4. holes and copies go to the dest as one `FORWARD` op, queued behind the dest's in-flight
   writes and published in seq order with no WAL frame (the copies are re-derived after a
   crash); the dest's listeners are woken;
5. the cursor and `forwarded_total` move only when step 4 was admitted (the global byte
   quota may refuse it).

Every step runs under `RouterTable.lock` (see `routers`), so forwarding is serialized and
never overlaps a snapshot's capture. Payloads that left memory are read from the source's
sealed segments with the source lock released (the segments are pinned), as reads do.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from seglog.clock import Clock
from seglog.core.router_copy import copy_is_valid, exactly_once_meta, router_source_seq
from seglog.core.scheduler import BandedQueue
from seglog.engine import payloads
from seglog.engine.ops import OpKind, PendingOp
from seglog.engine.publisher import Publisher
from seglog.engine.registry import Registry
from seglog.engine.routers import Router, RouterTable, prune_copies
from seglog.engine.topic import TopicState
from seglog.engine.writes import check_quota
from seglog.errors import SeglogError
from seglog.model import Discard, Record, RecordBatch, RecordIn
from seglog.storage.segment import PinnedSegment
from seglog.storage.wal_commit import Commit

log = logging.getLogger("seglog.routers")

BATCH = 1024  # source seqs walked per step (STORAGE §8)
# SEMANTICS §8.2: a copy with this many hops is not forwarded again by a router whose edge
# lies on a cycle (only an `allow_cycle` router closes one), whichever edge of the cycle
# it is: a loop gives the original and 8 copies, wherever it was written. A router off
# every cycle never drops a record for depth (§12 inv. 12: forwarding never skips a
# record silently), however long the pipeline.
HOP_CAP = 8
MAX_PASSES = 64  # forward_all: passes over every router before giving up for this tick
_NO_BUDGET = 1 << 62

Retained = Callable[[TopicState], None]  # a retention pass that waits for its watermark


@dataclass(slots=True)
class _Plan:
    """What one step decided, under the dest's lock."""

    consumed_to: int
    forwarded: int
    copies: list[RecordIn]
    sources: list[int]  # the source seq of each copy
    hops: list[int]  # the hop count of each copy
    size: int


class Forwarder:
    def __init__(
        self,
        registry: Registry,
        routers: RouterTable,
        publisher: Publisher,
        clock: Clock,
        retained: Retained,
        max_total_bytes: int = 0,
        priority_of: Callable[[str, int], int] | None = None,
    ) -> None:
        self.registry = registry
        self.routers = routers
        self.publisher = publisher
        self.clock = clock
        self._retained = retained
        self.max_total_bytes = max_total_bytes
        self._priority_of = priority_of if priority_of is not None else (lambda _t, _n: 0)
        self._order = BandedQueue()  # routers behind their source, in scheduling order

    # ---- drains ------------------------------------------------------------------------
    def behind(self, r: Router) -> bool:
        """Lock-free: whether `r` has source records it has not walked yet."""
        s = self.registry.get(r.spec.source)
        return s is not None and not r.removed and r.cursor < s.head

    def advance(self, r: Router) -> bool:
        """Step `r` until it reaches the source head seen now or stops making progress."""
        s = self.registry.get(r.spec.source)
        if s is None:
            return False
        target = s.head
        moved = False
        with self.routers.lock:
            while r.cursor < target and self.step(r):
                moved = True
        return moved

    def drain_into(self, dest: str) -> None:
        """Read-your-writes (§8.5): advance every router into `dest`, upstream first (so a
        chain `a → b → dest` delivers a record just written to `a`)."""
        if not self.routers.feeding(dest):
            return
        with self.routers.lock:
            for r in reversed(self._upstream(dest)):
                self.advance(r)

    def _upstream(self, dest: str) -> list[Router]:
        """The routers into `dest`, then those into their sources, and so on (breadth
        first, each topic once: cycles end; iterative: chains may be long)."""
        seen = {dest}
        order: list[Router] = []
        frontier = [dest]
        while frontier:
            nxt: list[str] = []
            for topic in frontier:
                for r in self.routers.feeding(topic):
                    order.append(r)
                    if r.spec.source not in seen:
                        seen.add(r.spec.source)
                        nxt.append(r.spec.source)
            frontier = nxt
        return order

    def pending_into(self, dest: str) -> bool:
        """Lock-free: whether a read of `dest` would have forwarding to do first (a router
        into it, or upstream of it, is behind its source)."""
        if not self.routers.feeding(dest):
            return False
        return any(self.behind(r) for r in self._upstream(dest))

    def forward_all(self) -> int:
        """Advance every router until a whole pass makes no progress (bounded passes: a
        cycle stops at the hop cap). Returns the number of routers advanced.

        Within a pass, routers run in the delivery scheduler's order (SEMANTICS §11): the
        banded weighted round-robin over their source topic's effective priority, with
        aging across passes (a router stays queued, with its first queue time, until it is
        served), so high-priority pipelines forward first and none starves."""
        moved = 0
        for _ in range(MAX_PASSES):
            now = self.clock.now_ms()
            for r in self.routers.all():
                if self.behind(r):
                    self._order.push(r.spec.name, self._priority_of(r.spec.source, now), now)
            if not len(self._order):
                break
            progress = 0
            # The lock is taken per router (in `advance`), so a reader's read-your-writes
            # drain waits for one router's catch-up at most, never for a whole pass.
            while (name := self._order.pop(now)) is not None:
                router = self.routers.get(name)
                if router is not None and self.advance(router):
                    progress += 1
            moved += progress
            if not progress:
                break
        return moved

    # ---- one step ----------------------------------------------------------------------
    def step(self, r: Router) -> bool:
        """Under `RouterTable.lock`: one forwarding step; True when the cursor moved."""
        spec = r.spec
        s, d = self.registry.get(spec.source), self.registry.get(spec.dest)
        if r.removed or s is None or d is None or r.cursor >= s.head:
            return False
        now = self.clock.now_ms()
        self._retained(s)
        self._retained(d)
        with s.lock:
            if s.deleted or s.retention_cut(now) is not None:
                return False  # a due watermark did not land: never walk what it expires
            if r.cursor >= s.head:
                return False
            trim_to = s.involuntary() - 1
            own = max(s.evict_floor, s.expiry_floor)
            if s.source_trim_floor > own and self.routers.on_cycle(spec.name):
                # On a cycle, trims passed on would raise the other side's source-trim
                # floor and come back as trims, forever (§12 invariant 11): only the
                # source's own evictions go on; its holes are walked and consumed.
                trim_to = min(trim_to, own)
            trimmed = max(0, trim_to - r.cursor)
            start = r.cursor + trimmed
            end = min(s.head, start + BATCH)
            recs, missing, nxt, _tomb, _n = s.read(start, BATCH, frozenset(), _NO_BUDGET, now)
            pins: list[PinnedSegment] = []
            segs = s.segments
            if missing and segs is not None:
                pins = segs.pin_range(missing[0][1], missing[-1][1])
            source_id, epoch = s.topic_id, s.epoch
        if nxt > end:
            # The walk delivers up to BATCH records but may examine more slots (dead ones):
            # keep the BATCH-seq window. A record whose payload is still to be loaded is a
            # placeholder in `recs`, so seqs come from `missing` for those.
            seqs = [x.seq for x in recs]
            for k, seq, *_ in missing:
                seqs[k] = seq
            cut = bisect_right(seqs, end)
            recs, missing, nxt = recs[:cut], [m for m in missing if m[0] < cut], end
        if missing:
            if segs is None:
                raise LookupError(f"seq {missing[0][1]}: payload missing on {s.name!r}")
            payloads.fill(recs, missing, segs.store, pins)
        hops = [self.routers.hop(source_id, x.seq) for x in recs]
        with d.lock:
            if d.deleted:
                return False
            plan = self._plan(r, d, recs, hops, start, nxt, source_id, epoch)
            plan.forwarded += trimmed
            if plan.consumed_to == r.cursor:
                return False
            if plan.copies and self.max_total_bytes:
                try:
                    check_quota(plan.size, self.max_total_bytes, self.registry.all())
                except SeglogError:
                    return False  # the dest append failed: the cursor stays (§8.3 step 5)
            head = self._append(d, r, plan, trimmed, now)
        if head is not None:
            self.publisher.notify(d.name, head)
        return True

    def _plan(
        self,
        r: Router,
        d: TopicState,
        recs: list[Record],
        hops: list[int],
        start: int,
        walked_to: int,
        source_id: int,
        epoch: int,
    ) -> _Plan:
        """Under `d.lock`: step 3's decisions for the walked records."""
        spec = r.spec
        eo = spec.exactly_once
        plan = _Plan(start, 0, [], [], [], 0)
        for rec, hop in zip(recs, hops, strict=True):
            capped = hop >= HOP_CAP and self.routers.on_cycle(spec.name)
            if capped or (spec.filter is not None and not spec.filter.matches(rec.tag)):
                plan.consumed_to = rec.seq
                continue
            meta = rec.meta_json
            if eo:
                prev = r.copies.get(rec.seq)
                if prev is not None and d.is_live(prev):
                    plan.consumed_to = rec.seq
                    plan.forwarded += 1
                    continue
                meta = exactly_once_meta(meta, spec.name, spec.source, source_id, epoch, rec.seq)
                if not copy_is_valid(rec.data_json, meta):
                    return plan  # exactly-once never drops: stop before it
            copy = RecordIn(
                rec.data_json,
                meta,
                rec.node if spec.preserve_node else None,
                rec.tag if spec.preserve_tag else None,
            )
            size = copy.size
            if not _admits(d, len(plan.copies) + 1, plan.size + size):
                return plan  # backpressure: the cursor stays before this record
            plan.copies.append(copy)
            plan.sources.append(rec.seq)
            plan.hops.append(hop + 1)
            plan.size += size
            plan.consumed_to = rec.seq
            plan.forwarded += 1
        plan.consumed_to = max(plan.consumed_to, walked_to)
        return plan

    def _append(self, d: TopicState, r: Router, plan: _Plan, trimmed: int, now: int) -> int | None:
        """Under `d.lock`: queue the holes and copies as one op, advance the router, and
        publish at once when nothing is in flight ahead of it. Returns the new dest head
        to notify, if published."""
        if trimmed or plan.copies:
            first = d.reserved + 1
            ts = max(now, d.last_write_ts or 0, d.last_reserved_ts)
            d.last_reserved_ts = ts
            op = PendingOp(
                OpKind.FORWARD,
                Commit.completed(),
                first_seq=first,
                ts=ts,
                records=RecordBatch.of(plan.copies),
                size=plan.size,
                holes=trimmed,
                owner=d,
            )
            d.reserved = first + trimmed + len(plan.copies) - 1
            d.pending.append(op)
            d.pending_count += len(plan.copies)
            d.pending_bytes += plan.size
            copies_at = first + trimmed
            if plan.copies and self.routers.is_source(d.name):
                self.routers.set_hops(d.topic_id, copies_at, plan.hops, d.base_seq)
            if r.spec.exactly_once:
                for k, src in enumerate(plan.sources):
                    r.copies[src] = copies_at + k
                prune_copies(r, d.base_seq)
        r.cursor = plan.consumed_to
        r.forwarded_total += plan.forwarded
        if d.pending and d.pending[0].commit.done():
            return self.publisher.apply_ready(d, now)
        return None

    # ---- recovery ----------------------------------------------------------------------
    def rebuild_copies(self, r: Router) -> None:
        """An `exactly_once` router's duplicate index from the copies its dest holds
        (after recovery: a copy is evidence only while it is live in the dest)."""
        s, d = self.registry.get(r.spec.source), self.registry.get(r.spec.dest)
        if s is None or d is None or not r.spec.exactly_once:
            return
        r.copies.clear()
        cursor = max(r.dest_base, 0)
        now = self.clock.now_ms()
        while True:
            with d.lock:
                recs, missing, nxt, _t, _n = d.read(cursor, BATCH, frozenset(), _NO_BUDGET, now)
                segs = d.segments
                pins = segs.pin_range(missing[0][1], missing[-1][1]) if missing and segs else []
                head = d.head
            if missing and segs is not None:
                payloads.fill(recs, missing, segs.store, pins)
            for rec in recs:
                src = router_source_seq(rec.meta_json, r.spec.name, s.topic_id)
                if src is not None:
                    r.copies[src] = rec.seq
            if nxt <= cursor or nxt >= head:
                return
            cursor = nxt


def _admits(d: TopicState, n: int, size: int) -> bool:
    """Whether a `discard:"reject"` dest would admit `n` more records of `size` bytes
    (SEMANTICS §4.3, counting its in-flight writes); other dests always admit."""
    cfg = d.config
    if cfg.discard is not Discard.REJECT:
        return True
    if cfg.cap_records and d.count + d.pending_count + n > cfg.cap_records:
        return False
    return not (cfg.cap_bytes and d.bytes + d.pending_bytes + size > cfg.cap_bytes)
