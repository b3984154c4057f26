"""Queue topics (SEMANTICS §10): claim, ack, nack, extend and `/work` releases, carried out
against the jobs log.

The lease projection of a queue topic instance is a `LeaseBook` (pure state machine) kept
on its `TopicState` and only touched under that topic's lock, so a claim pass, an ack and an
append to the same topic are serialized and a job has at most one holder. What a transition
asks for outside the book happens here: Lease frames (only with `leases_durable` on a
persistent class, submitted under the lock so they keep their order, never waited for),
deleting acked or dead-lettered jobs (an explicit-seq delete through the normal delete path,
durable before it returns on an `fsync` topic) and the dead-letter copies (an ordinary write
to the dead-letter topic). Every call may wait for the disk: callers on an event loop run
them in a thread.

A lease book is not in snapshots (STORAGE §5.2): after a restart it is rebuilt from the
Lease frames after the snapshot (durable leases) or starts empty, so every unacked job is
claimable again. An acked job is deleted from the log before the ack returns, so it never
comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import orjson

from seglog.clock import Clock
from seglog.core.frame_bodies import LeaseBody
from seglog.core.frames import FrameType, WalFrame, encode_control
from seglog.core.leases import Claimer, ClaimOutcome, LeaseBook, LeaseEvent, Settled
from seglog.engine import payloads
from seglog.engine.ops import PendingOp
from seglog.engine.registry import Registry
from seglog.engine.topic import PLACEHOLDER, Missing, TopicState
from seglog.errors import ErrorCode, SeglogError, topic_not_found
from seglog.model import (
    DeleteResult,
    Durability,
    QueueCounts,
    Record,
    RecordIn,
    TopicType,
    WriteResult,
    clamp_lease,
)
from seglog.storage.segment import PinnedSegment


class QueueHost(Protocol):
    """What queue operations need of the engine (the engine passes itself)."""

    registry: Registry
    clock: Clock

    def drain_routers_into(self, name: str) -> None: ...
    def prepare_read(self, name: str) -> PendingOp | None: ...
    def drain(self, op: PendingOp) -> None: ...
    def write(
        self, name: str, records: Sequence[RecordIn], *, create: bool | None = None
    ) -> WriteResult: ...
    def delete_records(
        self, name: str, *, seqs: Sequence[int] = (), ack: bool = False
    ) -> DeleteResult: ...
    def delete_begin(
        self, name: str, seqs: Sequence[int], ack: bool = False, may_wait: bool = True
    ) -> PendingOp | None: ...
    def submit_frames(self, topic_id: int, frames: list[bytes]) -> object: ...


log = logging.getLogger("seglog.queues")


@dataclass(slots=True)  # not frozen: built per job handed out (a frozen init costs 4x)
class Job:
    """One leased job as a claim hands it out (API §9.1)."""

    record: Record
    lease_id: int
    deadline: int
    deliveries: int


@dataclass(frozen=True, slots=True)
class ClaimResult:
    topic: str
    jobs: list[list[Job]]  # per cohort member, in delivery order
    ready: int


@dataclass(frozen=True, slots=True)
class ClaimPass:
    """A claim pass done under the lock, its payload reads and dead letters still to do."""

    topic: TopicState
    cohort: int
    outcome: ClaimOutcome
    now: int
    found: dict[int, Record]
    missing: list[Missing]
    pins: list[PinnedSegment]


@dataclass(frozen=True, slots=True)
class PendingAck:
    topic: TopicState
    done: list[int]
    skipped: list[int]
    now: int
    delete: PendingOp | None  # the submitted delete of the acked jobs
    conns: set[int]
    # The delete must settle routers and was not submitted (`ack_begin(may_wait=False)`):
    # the caller runs `settle_ack` off the loop.
    deferred: bool = False


@dataclass(frozen=True, slots=True)
class SettleResult:
    """An ack, nack or extend: `done`/`skipped` in request order, counts after it."""

    topic: str
    done: list[int]
    skipped: list[int]
    ready: int
    in_flight: int
    deadlines: dict[int, int]
    conns: set[int]  # the `/work` connections that held the settled leases
    fsync_ms: float = 0.0  # an `fsync` topic's ack: the fsync its delete waited for


def book_of(t: TopicState) -> LeaseBook:
    """The topic instance's lease projection (under `t.lock`), created on first use."""
    if t.leases is None:
        t.leases = LeaseBook()
    book: LeaseBook = t.leases
    return book


def counts_of(t: TopicState, now: int) -> QueueCounts:
    """SEMANTICS §10.5, under `t.lock`."""
    book = book_of(t)
    c = book.counts(now, t.count, t.count_live)
    return QueueCounts(c.ready, c.in_flight, book.dead_lettered)


def replay_lease(t: TopicState, f: WalFrame) -> None:
    """Recovery: re-apply one logged Lease event (STORAGE §6; non-ephemeral queues only)."""
    if t.config.type is not TopicType.QUEUE or not t.persistent:
        return
    b = LeaseBody.decode(f.data)
    book_of(t).replay(LeaseEvent(b.event, f.seq, b.lease_id, b.deadline, b.deliveries, b.node))


def not_a_queue(name: str) -> SeglogError:
    return SeglogError(ErrorCode.NOT_A_QUEUE, f"topic {name!r} is not a queue", {"topic": name})


class Queues:
    """The queue operations of one engine. Stateless itself: each book lives on its topic."""

    def __init__(self, engine: QueueHost) -> None:
        self.engine = engine

    def topic(self, name: str) -> TopicState:
        """API §9: absent ⇒ `404 topic_not_found`, a log topic ⇒ `409 not_a_queue`."""
        t = self.engine.registry.get(name)
        if t is None:
            raise topic_not_found(name)
        if t.config.type is not TopicType.QUEUE:
            raise not_a_queue(name)
        return t

    # ---- claim ----------------------------------------------------------------------------
    def claim(self, name: str, cohort: Sequence[Claimer], lease_ms: int | None) -> ClaimResult:
        """SEMANTICS §10.3: one pass serving `cohort` round-robin. Jobs over
        `max_deliveries` are diverted to the dead-letter topic on the way. (Sync callers;
        an event loop runs `claim_pass` and `claim_finish` itself.)"""
        e = self.engine
        self.topic(name)
        e.drain_routers_into(name)
        op = e.prepare_read(name)  # the retention pass, waited for
        if op is not None:
            e.drain(op)
        return self.claim_finish(self.claim_pass(name, cohort, lease_ms))

    def claim_pass(self, name: str, cohort: Sequence[Claimer], lease_ms: int | None) -> ClaimPass:
        """The pass itself, under the topic lock, never waiting: leases granted, Lease
        frames submitted, payloads in memory taken and sealed ones pinned."""
        t = self.topic(name)
        now = self.engine.clock.now_ms()
        cfg = t.config
        lease = clamp_lease(cfg.lease_ms if lease_ms is None else lease_ms)
        with t.lock:
            if t.deleted:
                raise topic_not_found(name)
            out = book_of(t).claim(
                cohort,
                now,
                lease,
                t.head,
                t.liveness(),
                cfg.max_deliveries,
                cfg.dead_letter is not None,
            )
            self._log(t, out.events, now)
            wanted = [g.seq for g in out.grants] + out.dead
            found, missing, pins = self._gather(t, wanted)
        return ClaimPass(t, len(cohort), out, now, found, missing, pins)

    def claim_finish(self, p: ClaimPass) -> ClaimResult:
        """Read the pinned payloads, divert dead letters (a write: may wait), build jobs."""
        t, out = p.topic, p.outcome
        records = self._fill(t, p.found, p.missing, p.pins)
        if out.dead:
            self._dead_letter(t, [records[s] for s in out.dead], p.now)
        jobs: list[list[Job]] = [[] for _ in range(p.cohort)]
        for g in out.grants:
            jobs[g.claimer].append(Job(records[g.seq], g.lease_id, g.deadline, g.deliveries))
        with t.lock:
            ready = counts_of(t, p.now).ready
        return ClaimResult(t.name, jobs, ready)

    def _gather(
        self, t: TopicState, seqs: list[int]
    ) -> tuple[dict[int, Record], list[Missing], list[PinnedSegment]]:
        """Under `t.lock`: the records of live `seqs` whose payloads are in memory, and the
        others described and their sealed segments pinned, to be read after the lock is
        released (`_fill`): a slow disk then delays this claim, never the topic's writers."""
        out: dict[int, Record] = {}
        missing: list[Missing] = []
        for seq in sorted(seqs):
            ts, data, meta, node, tag = t.slot(seq)
            if data is None:
                missing.append((len(missing), seq, ts, node, tag))
            else:
                out[seq] = Record(seq, ts, data, meta, node, tag)
        pins: list[PinnedSegment] = []
        if missing and t.segments is not None:
            pins = t.segments.pin_range(missing[0][1], missing[-1][1])
        return out, missing, pins

    @staticmethod
    def _fill(
        t: TopicState, out: dict[int, Record], missing: list[Missing], pins: list[PinnedSegment]
    ) -> dict[int, Record]:
        if missing:
            if t.segments is None:
                raise LookupError(f"{t.name!r}: payloads of {missing[0][1]} missing")
            filled = [PLACEHOLDER] * len(missing)
            payloads.fill(filled, missing, t.segments.store, pins)
            out.update((r.seq, r) for r in filled)
        return out

    def _dead_letter(self, t: TopicState, records: list[Record], now: int) -> None:
        """SEMANTICS §10.6: copy to the dead-letter topic, then delete from the queue like
        an ack; if the copy fails, the jobs are due again and the counter rolls back."""
        cfg = t.config
        assert cfg.dead_letter is not None
        copies = [_dead_letter_copy(t.name, cfg.max_deliveries, r) for r in records]
        # One write for all of them; if it is refused, one per job: a batch larger than
        # what a capped dead-letter topic admits must not keep every job from landing.
        batches = [(copies, records)]
        seqs: list[int] = []
        while batches:
            batch, recs = batches.pop(0)
            try:
                self.engine.write(cfg.dead_letter, batch, create=True)
                seqs += [r.seq for r in recs]
            except SeglogError as err:
                if len(batch) > 1:
                    batches[:0] = [([c], [r]) for c, r in zip(batch, recs, strict=True)]
                    continue
                log.warning("queue %r: dead-lettering job %d failed: %s", t.name, recs[0].seq, err)
                with t.lock:
                    book_of(t).undo_dead_letter([recs[0].seq])
            except BaseException:  # a Ctrl-C (`interrupts`): due again, never stuck diverting
                left = seqs + [r.seq for r in recs] + [r.seq for _, rs in batches for r in rs]
                with t.lock:
                    book_of(t).undo_dead_letter(left)  # landed ones too: diverted again
                raise
        if not seqs:
            return
        try:
            self._delete(t, seqs)
        except SeglogError as err:
            # The copies landed; `_delete` put the jobs back in reclaim, delivery counts
            # kept, so the next pass diverts them again (at least once: a second copy)
            # instead of handing a poisoned job to workers `max_deliveries` more times.
            # The claim that found them goes on: its leases are granted.
            log.warning("queue %r: %d dead-lettered jobs not deleted: %s", t.name, len(seqs), err)
            return
        except BaseException:
            with t.lock:
                book_of(t).diverted(seqs)
            raise
        with t.lock:
            book_of(t).diverted(seqs)

    # ---- ack / nack / extend ------------------------------------------------------------
    def ack(self, name: str, node: str, seqs: Sequence[int], fences: Sequence[int]) -> SettleResult:
        """SEMANTICS §10.4: the leases go, then the jobs are deleted from the log (durably
        first on an `fsync` topic); a failed delete makes them claimable again and fails."""
        op = self.engine.prepare_read(name)  # the counters follow a retention pass
        if op is not None:
            self.engine.drain(op)
        a = self.ack_begin(name, node, seqs, fences)
        if a.delete is not None:
            self.engine.drain(a.delete)
        return self.ack_finish(a)

    def ack_begin(
        self,
        name: str,
        node: str,
        seqs: Sequence[int],
        fences: Sequence[int],
        may_wait: bool = True,
    ) -> PendingAck:
        """The leases go and the delete of the acked jobs is submitted (never waits for
        its commit: the caller awaits `delete` — `Engine.drain` or the loop's `finish_op` —
        then calls `ack_finish`). One that must settle routers first waits for that here,
        or with `may_wait=False` is left `deferred` for `settle_ack`."""
        t = self.topic(name)
        now = self.engine.clock.now_ms()
        s: Settled | None = None
        try:
            with t.lock:
                s = book_of(t).ack(node, seqs, fences, now)
                self._log(t, s.events, now)
            op = None
            if s.done:
                op = self.engine.delete_begin(name, s.done, ack=True, may_wait=may_wait)
        except BaseException:
            # The leases went but the delete did not go in (refused, or a Ctrl-C held back
            # to the end of a section, `interrupts`): the jobs are claimable again.
            if s is not None and s.done:
                with t.lock:
                    book_of(t).requeue(s.done)
            raise
        return PendingAck(t, s.done, s.skipped, now, op, s.conns, bool(s.done) and op is None)

    def settle_ack(self, a: PendingAck) -> PendingAck:
        """A `deferred` ack's delete, settling routers first (waits: off the loop)."""
        try:
            op = self.engine.delete_begin(a.topic.name, a.done, ack=True)
        except BaseException:
            with a.topic.lock:
                book_of(a.topic).requeue(a.done)
            raise
        return replace(a, delete=op, deferred=False)

    def ack_finish(self, a: PendingAck) -> SettleResult:
        op = a.delete
        if op is not None and op.error is not None:
            with a.topic.lock:
                book_of(a.topic).requeue(a.done)  # not deleted: claimable again
            raise op.error
        res = self._settled(a.topic, a.done, a.skipped, a.now, {}, a.conns, acked=True)
        if op is not None and a.topic.config.durability is Durability.FSYNC:
            res = replace(res, fsync_ms=op.commit.fsync_ms)
        return res

    def nack(
        self, name: str, node: str, seqs: Sequence[int], fences: Sequence[int], delay_ms: int
    ) -> SettleResult:
        t = self.topic(name)
        now = self.engine.clock.now_ms()
        with t.lock:
            s = book_of(t).nack(node, seqs, fences, now, delay_ms)
            self._log(t, s.events, now)
        return self._settled(t, s.done, s.skipped, now, {}, s.conns)

    def extend(
        self, name: str, node: str, seqs: Sequence[int], fences: Sequence[int], lease_ms: int
    ) -> SettleResult:
        t = self.topic(name)
        now = self.engine.clock.now_ms()
        with t.lock:
            s = book_of(t).extend(node, seqs, fences, now, clamp_lease(lease_ms))
            self._log(t, s.events, now)
        return self._settled(t, s.done, s.skipped, now, s.deadlines, s.conns)

    def release_conn(self, name: str, conn: int) -> int:
        """SEMANTICS §10.7: a `/work` connection ended; its jobs are claimable at once.
        Returns how many were released (0 if the topic is gone)."""
        t = self.engine.registry.get(name)
        if t is None or t.leases is None:
            return 0
        with t.lock:
            events = book_of(t).release_conn(conn)
            self._log(t, events, self.engine.clock.now_ms())
        return len(events)

    def held_by_conn(self, name: str, conn: int) -> int:
        """Un-expired leases delivered on `conn` (sweeps first)."""
        t = self.topic(name)
        now = self.engine.clock.now_ms()
        with t.lock:
            book = book_of(t)
            book.sweep(now)
            return book.held_by_conn(conn)

    def counts(self, name: str) -> QueueCounts:
        t = self.topic(name)
        with t.lock:
            return counts_of(t, self.engine.clock.now_ms())

    def relog_leases(self) -> None:
        """After a snapshot: log every durable queue's projection again (held leases,
        delayed nacks, delivery counts). Snapshots do not keep leases (STORAGE §5.2) and
        the WAL before the snapshot may go, so without this none of it would survive a
        restart."""
        now = self.engine.clock.now_ms()
        for t in list(self.engine.registry.by_id.values()):
            if t.leases is None or not t.config.leases_durable:
                continue
            with t.lock:
                self._log(t, book_of(t).projection_events(), now)

    # ---- internals ------------------------------------------------------------------------
    def _settled(
        self,
        t: TopicState,
        done: list[int],
        skipped: list[int],
        now: int,
        dl: dict[int, int],
        conns: set[int],
        acked: bool = False,
    ) -> SettleResult:
        with t.lock:
            if acked and done:  # their deletes landed
                book_of(t).acked(done)
            c = counts_of(t, now)
        return SettleResult(t.name, done, skipped, c.ready, c.in_flight, dl, conns)

    def _delete(self, t: TopicState, seqs: list[int]) -> None:
        try:
            self.engine.delete_records(t.name, seqs=seqs, ack=True)
        except SeglogError:
            with t.lock:
                book_of(t).requeue(seqs)
            raise

    @staticmethod
    def needs_thread(p: ClaimPass) -> bool:
        """Whether finishing `p` may wait (a dead-letter write) or read the cold tier."""
        return bool(p.outcome.dead) or any(pin.info.tier == "cold" for pin in p.pins)

    def _log(self, t: TopicState, events: list[LeaseEvent], now: int) -> None:
        """Under `t.lock`: the Lease frames of `events`, if this queue logs them. Best
        effort (STORAGE §3.3): a lost lease event only makes a job claimable again."""
        if not events or not t.config.leases_durable or not t.persistent:
            return
        frames = [
            encode_control(
                FrameType.LEASE,
                t.topic_id,
                LeaseBody(ev.event, ev.lease_id, ev.deadline, ev.deliveries, ev.node).encode(),
                now,
                True,
                seq=ev.seq,
            )
            for ev in events
        ]
        try:
            self.engine.submit_frames(t.topic_id, frames)
        except SeglogError as err:
            log.warning("queue %r: %d lease events not logged: %s", t.name, len(frames), err)


def _dead_letter_copy(source: str, max_deliveries: int, r: Record) -> RecordIn:
    """The job as the dead-letter topic receives it: `$node`, `$tag` and `data` kept, meta
    extended with where it came from (a non-object meta becomes `{}` first)."""
    meta = orjson.loads(r.meta_json) if r.meta_json is not None else {}
    if not isinstance(meta, dict):
        meta = {}
    meta["$dead_letter_from"] = source
    meta["$dead_letter_deliveries"] = str(max_deliveries)
    meta["$dead_letter_src_seq"] = str(r.seq)
    return RecordIn(r.data_json, orjson.dumps(meta), r.node, r.tag)
