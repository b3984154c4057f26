"""The lease state machine of one queue topic instance (SEMANTICS §10): who holds which job,
what is due again, and what a claim, ack, nack, extend or disconnect does to that.

Pure in the sense that matters for testing: no I/O, no clock, no locks, no randomness.
Every transition takes `now` and the facts it needs about the jobs log (`head`, `live(seq)`)
as arguments and returns what the caller must carry out (Lease events to log, jobs to
delete or dead-letter) as values. A `LeaseBook` is updated in place instead of being
copied: a claim must cost O(jobs handed out), not O(projection).

Owner: `seglog.engine.queues`, under the topic's lock. Expiry is lazy (the sweep that opens
every transition), driven by a min-heap of deadlines, so no per-job timers exist. Stale heap
entries (a lease acked, released or extended since) are recognised and dropped.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from seglog.core.frame_bodies import LEASE_ACKED, LEASE_CLAIMED, LEASE_EXTENDED, LEASE_RELEASED

Live = Callable[[int], bool]
CountLive = Callable[[Collection[int]], int]
# The deadline heap is compacted only past this size (a rebuild costs one pass over the leases).
COMPACT_MIN = 1024


@dataclass(slots=True)
class Lease:
    node: str
    lease_id: int
    deadline: int
    conn: int = 0  # the `/work` connection the lease was delivered on; 0 for polling claims


@dataclass(frozen=True, slots=True)
class Claimer:
    """One member of a claim cohort: `max` is already clamped to [1, 1000]."""

    node: str
    max: int
    conn: int = 0


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, per job
class Grant:
    claimer: int  # index into the cohort
    seq: int
    lease_id: int
    deadline: int
    deliveries: int


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, per job
class LeaseEvent:
    """One entry of the leases log: what a Lease frame (STORAGE §3.2, type 10) carries.
    For `released`, a non-zero `deadline` is when a delayed nack makes the job due again."""

    event: int
    seq: int
    lease_id: int
    deadline: int
    deliveries: int
    node: str


@dataclass(slots=True)
class ClaimOutcome:
    grants: list[Grant] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)  # seqs to dead-letter, in pass order
    events: list[LeaseEvent] = field(default_factory=list)


@dataclass(slots=True)
class Settled:
    """The outcome of an ack, nack or extend: `done` and `skipped` in request order."""

    done: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    events: list[LeaseEvent] = field(default_factory=list)
    deadlines: dict[int, int] = field(default_factory=dict)  # extend: seq → new deadline
    conns: set[int] = field(default_factory=set)  # `/work` connections whose leases these were


@dataclass(frozen=True, slots=True)
class Counts:
    ready: int
    in_flight: int


class LeaseBook:
    """SEMANTICS §10.1's projection: `leases`, `deliveries`, `reclaim`, `delayed`,
    `claim_cursor`, `dead_lettered`, `next_lease_id`."""

    __slots__ = (
        "_by_conn",
        "_compact_min",
        "_deadlines",
        "_delay_at",
        "_delayed",
        "_in_reclaim",
        "_leaving",
        "_reclaim",
        "claim_cursor",
        "dead_lettered",
        "deliveries",
        "leases",
        "next_lease_id",
    )

    def __init__(self, compact_min: int = COMPACT_MIN) -> None:
        self._compact_min = compact_min
        self.leases: dict[int, Lease] = {}
        self.deliveries: dict[int, int] = {}
        self.claim_cursor = 1
        self.dead_lettered = 0
        self.next_lease_id = 1
        self._reclaim: list[int] = []  # min-heap; `_in_reclaim` makes it a set
        self._in_reclaim: set[int] = set()
        self._delayed: list[tuple[int, int]] = []  # (ready_at, seq) min-heap, may be stale
        self._delay_at: dict[int, int] = {}  # the current delay of each delayed seq
        self._deadlines: list[tuple[int, int, int]] = []  # (deadline, seq, lease_id), may be stale
        self._by_conn: dict[int, set[int]] = {}
        # Jobs on their way out: chosen by a claim pass for the dead-letter topic, or acked,
        # until their delete lands (or fails). Still live meanwhile, and after a restart the
        # claim cursor walks from 1 again, so without this a claim could lease a job that is
        # being dead-lettered or was just acked (SEMANTICS §10.4, §10.8).
        self._leaving: set[int] = set()

    # ---- queries ------------------------------------------------------------------------
    def held_by_conn(self, conn: int) -> int:
        """Leases delivered on `conn` (call after a sweep: all of them are un-expired)."""
        return len(self._by_conn.get(conn, ()))

    def counts(self, now: int, live_count: int, count_live: CountLive) -> Counts:
        """SEMANTICS §10.5 (sweeps first). `count_live(seqs)`: how many of `seqs` are live
        jobs (a whole collection at once: a busy queue holds hundreds of leases, and
        every claim and ack answers with these counts)."""
        self.sweep(now)
        leased = count_live(self.leases.keys())
        delayed = count_live([s for s in self._delay_at if s not in self.leases])
        return Counts(max(live_count - leased - delayed, 0), leased)

    def deadline_entries(self) -> int:
        """Entries in the deadline heap, stale ones included (diagnostics, tests)."""
        return len(self._deadlines)

    def reclaimable(self) -> list[int]:
        """The reclaim set, ascending (for tests and diagnostics)."""
        return sorted(self._in_reclaim)

    def delayed(self) -> dict[int, int]:
        return dict(self._delay_at)

    # ---- sweep --------------------------------------------------------------------------
    def sweep(self, now: int) -> list[int]:
        """SEMANTICS §10.2: due delayed nacks and expired leases go to `reclaim`. Returns
        the seqs whose lease expired."""
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            at, seq = heapq.heappop(delayed)
            if self._delay_at.get(seq) != at:
                continue
            del self._delay_at[seq]
            if seq not in self.leases:
                self._push_reclaim(seq)
        expired: list[int] = []
        dl = self._deadlines
        while dl and dl[0][0] < now:
            deadline, seq, lease_id = heapq.heappop(dl)
            lease = self.leases.get(seq)
            if lease is None or lease.lease_id != lease_id or lease.deadline != deadline:
                continue
            self._drop_lease(seq, lease)
            self._push_reclaim(seq)
            expired.append(seq)
        return expired

    # ---- claim pass ---------------------------------------------------------------------
    def claim(
        self,
        cohort: Sequence[Claimer],
        now: int,
        lease_ms: int,
        head: int,
        live: Live,
        max_deliveries: int = 0,
        dead_letter: bool = False,
    ) -> ClaimOutcome:
        """SEMANTICS §10.3: serve the cohort round-robin, reclaimed work before fresh work.
        `lease_ms` is already clamped. A job over `max_deliveries` (with a dead-letter topic)
        is not leased: it is reported in `dead` for the caller to divert."""
        self.sweep(now)
        out = ClaimOutcome()
        remaining = [c.max for c in cohort]
        turn = [i for i, n in enumerate(remaining) if n > 0]
        deadline = now + lease_ms
        pos = 0
        while turn:
            seq = self._next_candidate(head, live)
            if seq is None:
                break
            d = self.deliveries.get(seq, 0) + 1
            if dead_letter and max_deliveries > 0 and d > max_deliveries:
                # its count stays until the copy lands (`diverted`): if the append fails,
                # every later pass tries the dead letter again (SEMANTICS §10.1, §10.6)
                self.dead_lettered += 1
                self._leaving.add(seq)
                out.dead.append(seq)
                continue
            pos %= len(turn)
            ci = turn[pos]
            c = cohort[ci]
            lease_id = self.next_lease_id
            self.next_lease_id += 1
            self._set_lease(seq, Lease(c.node, lease_id, deadline, c.conn))
            self.deliveries[seq] = d
            out.grants.append(Grant(ci, seq, lease_id, deadline, d))
            out.events.append(LeaseEvent(LEASE_CLAIMED, seq, lease_id, deadline, d, c.node))
            remaining[ci] -= 1
            if remaining[ci] == 0:
                turn.pop(pos)  # the next claimer slides into `pos`
            else:
                pos += 1
        return out

    def _next_candidate(self, head: int, live: Live) -> int | None:
        while self._reclaim:
            seq = heapq.heappop(self._reclaim)
            self._in_reclaim.discard(seq)
            if not self._available(seq, live):
                continue
            return seq
        while self.claim_cursor <= head:
            seq = self.claim_cursor
            self.claim_cursor += 1
            if not self._available(seq, live):
                continue
            return seq
        return None

    def _available(self, seq: int, live: Live) -> bool:
        return not (
            seq in self.leases or seq in self._delay_at or seq in self._leaving or not live(seq)
        )

    def diverted(self, seqs: Sequence[int]) -> None:
        """The dead-letter copies of `seqs` were written and the jobs deleted."""
        self._leaving.difference_update(seqs)
        for seq in seqs:
            self.deliveries.pop(seq, None)

    def acked(self, seqs: Sequence[int]) -> None:
        """The deletes of the acked jobs `seqs` landed."""
        self._leaving.difference_update(seqs)

    def undo_dead_letter(self, seqs: Sequence[int]) -> None:
        """The dead-letter append failed: the jobs are due again, the dead-letter counter
        rolls back, and their delivery counts stand, so the next pass diverts them again
        (at-least-once, SEMANTICS §10.6)."""
        self.dead_lettered -= len(seqs)
        self._leaving.difference_update(seqs)
        for seq in seqs:
            self._push_reclaim(seq)

    def requeue(self, seqs: Sequence[int]) -> None:
        """Acked jobs whose delete failed become claimable again (SEMANTICS §10.4)."""
        self._leaving.difference_update(seqs)
        for seq in seqs:
            if seq not in self.leases:
                self._push_reclaim(seq)

    # ---- ack / nack / extend ------------------------------------------------------------
    def _holder(self, node: str, seq: int, fence: int) -> Lease | None:
        lease = self.leases.get(seq)
        if lease is None or lease.node != node or (fence and fence != lease.lease_id):
            return None
        return lease

    def _settle(
        self,
        node: str,
        seqs: Sequence[int],
        fences: Sequence[int],
        now: int,
        act: Callable[[int, Lease], LeaseEvent],
    ) -> Settled:
        """SEMANTICS §10.4's common part: after a sweep, `act` on each requested seq whose
        un-expired lease `node` holds (and whose fence, when given, matches); the rest are
        skipped. `fences[i]` 0 means no fence for `seqs[i]`."""
        self.sweep(now)
        out = Settled()
        for i, seq in enumerate(seqs):
            lease = self._holder(node, seq, fences[i] if fences else 0)
            if lease is None:
                out.skipped.append(seq)
                continue
            if lease.conn:
                out.conns.add(lease.conn)
            out.events.append(act(seq, lease))
            out.done.append(seq)
        return out

    def ack(self, node: str, seqs: Sequence[int], fences: Sequence[int], now: int) -> Settled:
        """The lease and the delivery count go; deleting the job from the jobs log is the
        caller's part, which ends with `acked` (or `requeue` if the delete failed): until
        then no claim takes the job."""

        def act(seq: int, lease: Lease) -> LeaseEvent:
            self._drop_lease(seq, lease)
            self._leaving.add(seq)
            d = self.deliveries.pop(seq, 0)
            return LeaseEvent(LEASE_ACKED, seq, lease.lease_id, 0, d, node)

        return self._settle(node, seqs, fences, now, act)

    def nack(
        self, node: str, seqs: Sequence[int], fences: Sequence[int], now: int, delay_ms: int
    ) -> Settled:
        at = now + delay_ms if delay_ms > 0 else 0

        def act(seq: int, lease: Lease) -> LeaseEvent:
            self._drop_lease(seq, lease)
            self._release(seq, at)
            d = self.deliveries.get(seq, 0)
            return LeaseEvent(LEASE_RELEASED, seq, lease.lease_id, at, d, node)

        return self._settle(node, seqs, fences, now, act)

    def extend(
        self, node: str, seqs: Sequence[int], fences: Sequence[int], now: int, lease_ms: int
    ) -> Settled:
        deadline = now + lease_ms

        def act(seq: int, lease: Lease) -> LeaseEvent:
            lease.deadline = deadline
            self._push_deadline(deadline, seq, lease.lease_id)
            d = self.deliveries.get(seq, 0)
            return LeaseEvent(LEASE_EXTENDED, seq, lease.lease_id, deadline, d, node)

        out = self._settle(node, seqs, fences, now, act)
        out.deadlines = dict.fromkeys(out.done, deadline)
        return out

    def release_conn(self, conn: int) -> list[LeaseEvent]:
        """SEMANTICS §10.7: a `/work` connection ended; its leases are due again at once."""
        events: list[LeaseEvent] = []
        for seq in sorted(self._by_conn.get(conn, ())):
            lease = self.leases[seq]
            self._drop_lease(seq, lease)
            self._push_reclaim(seq)
            d = self.deliveries.get(seq, 0)
            events.append(LeaseEvent(LEASE_RELEASED, seq, lease.lease_id, 0, d, lease.node))
        self._by_conn.pop(conn, None)
        return events

    def projection_events(self) -> list[LeaseEvent]:
        """The events that rebuild this projection from nothing, by seq: what a snapshot's
        WAL tail must hold for durable leases to outlive the snapshot (which does not keep
        them). A held lease is its `claimed` event. A job that is not held but was
        delivered (reclaimed, or delayed by a nack) has no lease left to name, so it is a
        `claimed` + `released` pair under a fresh lease id, the `released` carrying its
        ready time: replay then restores both its delay and its delivery count."""
        events: list[LeaseEvent] = []
        for seq in sorted(self.leases.keys() | self.deliveries.keys()):
            d = self.deliveries.get(seq, 1)
            lease = self.leases.get(seq)
            if lease is not None:
                events.append(
                    LeaseEvent(LEASE_CLAIMED, seq, lease.lease_id, lease.deadline, d, lease.node)
                )
                continue
            lease_id = self.next_lease_id
            self.next_lease_id += 1
            ready_at = self._delay_at.get(seq, 0)
            events.append(LeaseEvent(LEASE_CLAIMED, seq, lease_id, ready_at, d, ""))
            events.append(LeaseEvent(LEASE_RELEASED, seq, lease_id, ready_at, d, ""))
        return events

    # ---- replay ---------------------------------------------------------------------------
    def replay(self, ev: LeaseEvent) -> None:
        """Re-apply a logged event (STORAGE §6): release/extend/ack act only when their
        `lease_id` matches the current lease; the cursor is not moved (claims are found by
        skipping leased seqs)."""
        seq = ev.seq
        if ev.event == LEASE_CLAIMED:
            old = self.leases.get(seq)
            if old is not None:
                self._drop_lease(seq, old)
            self._delay_at.pop(seq, None)
            self._set_lease(seq, Lease(ev.node, ev.lease_id, ev.deadline))
            self.deliveries[seq] = ev.deliveries
            self.next_lease_id = max(self.next_lease_id, ev.lease_id + 1)
            return
        lease = self.leases.get(seq)
        if lease is None or lease.lease_id != ev.lease_id:
            return
        if ev.event == LEASE_EXTENDED:
            lease.deadline = ev.deadline
            self._push_deadline(ev.deadline, seq, lease.lease_id)
        elif ev.event == LEASE_RELEASED:
            self._drop_lease(seq, lease)
            self._release(seq, ev.deadline)
        elif ev.event == LEASE_ACKED:
            self._drop_lease(seq, lease)
            self.deliveries.pop(seq, None)

    # ---- internals ------------------------------------------------------------------------
    def _set_lease(self, seq: int, lease: Lease) -> None:
        self.leases[seq] = lease
        self._push_deadline(lease.deadline, seq, lease.lease_id)
        if lease.conn:
            self._by_conn.setdefault(lease.conn, set()).add(seq)

    def _push_deadline(self, deadline: int, seq: int, lease_id: int) -> None:
        """A deadline into the heap. Entries of settled or extended leases stay in it until
        their deadline passes (a lease window of claims, tens of thousands on a busy queue):
        once they outnumber the live leases, the heap is rebuilt from those, so it holds at
        most about twice the leases and each stale entry is dropped once, in a batch."""
        dl = self._deadlines
        if len(dl) >= self._compact_min and len(dl) > 2 * len(self.leases):
            # `seq`'s own entry is the one pushed below (its lease may be in already)
            dl = [(x.deadline, s, x.lease_id) for s, x in self.leases.items() if s != seq]
            heapq.heapify(dl)
            self._deadlines = dl
        heapq.heappush(dl, (deadline, seq, lease_id))

    def _drop_lease(self, seq: int, lease: Lease) -> None:
        del self.leases[seq]
        if lease.conn:
            held = self._by_conn.get(lease.conn)
            if held is not None:
                held.discard(seq)
                if not held:
                    del self._by_conn[lease.conn]

    def _release(self, seq: int, ready_at: int) -> None:
        if ready_at > 0:
            self._delay_at[seq] = ready_at
            heapq.heappush(self._delayed, (ready_at, seq))
        else:
            self._push_reclaim(seq)

    def _push_reclaim(self, seq: int) -> None:
        if seq not in self._in_reclaim:
            self._in_reclaim.add(seq)
            heapq.heappush(self._reclaim, seq)
