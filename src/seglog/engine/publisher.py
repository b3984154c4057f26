"""Publication: a topic's completed operations applied strictly in order, and the wake-ups
of whoever listens — the public hook live delivery (watch, WebSocket, routers) subscribes to.

Owner: each `TopicState.pending` queue is applied under the topic's lock by whichever thread
sees its head op complete (`apply_ready`); the WAL writer threads only complete commits and
never take a topic lock, so waiting for a commit outside that lock cannot deadlock. An op
that leaves the queue is always completed (applied or failed), whatever goes wrong.
Listeners run on the publishing thread, after the topic lock is released; they must not
block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from seglog.clock import Clock
from seglog.engine.deletes import apply_delete
from seglog.engine.ops import OpKind, PendingOp
from seglog.engine.retention import apply_evict
from seglog.engine.topic import TopicState
from seglog.errors import internal
from seglog.model import Durability, WriteResult
from seglog.storage.wal_commit import WalError

log = logging.getLogger("seglog.engine")

AppendListener = Callable[[str, int], None]
RetentionPass = Callable[[TopicState, int], "PendingOp | None"]


class Publisher:
    def __init__(self, clock: Clock, retain: RetentionPass) -> None:
        self.clock = clock
        self._retain = retain  # run after every publish (SEMANTICS §4.2); never waits
        self._listeners: list[AppendListener] = []

    def add_listener(self, fn: AppendListener) -> None:
        """`fn(topic, head_seq)` runs after records are published, and with head 0 after
        the topic was dropped; it must not block."""
        self._listeners.append(fn)

    def remove_listener(self, fn: AppendListener) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def notify(self, name: str, head: int) -> None:
        for fn in list(self._listeners):
            fn(name, head)

    def drain(self, op: PendingOp) -> None:
        """Apply every completed op ahead of and including `op`, waiting (outside the topic
        lock) for earlier commits when needed."""
        topic: TopicState = op.owner
        while not op.applied:
            with topic.lock:
                head = self.apply_ready(topic, self.clock.now_ms())
                first = topic.pending[0] if topic.pending else None
            if head is not None:
                self.notify(topic.name, head)
            if op.applied or first is None:
                break
            try:
                first.commit.wait()
            except WalError:
                pass

    def apply_ready(self, t: TopicState, now: int) -> int | None:
        """Under `t.lock`: apply completed ops from the queue head, in order. Returns the new
        head if records were published (to notify listeners outside the lock). An op that
        is popped is always completed, whatever goes wrong while applying it."""
        published = False
        while t.pending and t.pending[0].commit.done():
            op = t.pending.popleft()
            try:
                if op.kind is OpKind.APPEND:
                    published |= self._apply_append(t, op)
                elif op.kind is OpKind.FORWARD:
                    published |= self._apply_forward(t, op)
                elif op.kind is OpKind.DELETE:
                    apply_delete(t, op)
                else:
                    apply_evict(t, op)
            except Exception as e:  # a bug: fail this op loudly, never strand its waiter
                log.exception("applying a %s on topic %r failed", op.kind.name, t.name)
                op.error = internal(f"applying the operation failed: {e!r}")
            op.applied = True
        if published:
            self._retain(t, now)
            return t.head
        return None

    def _apply_forward(self, t: TopicState, op: PendingOp) -> bool:
        """Router copies (SEMANTICS §8.3 step 4): source-trim holes first, each raising the
        topic's `source_trim_floor`, then the copies. Derived, so never logged."""
        t.pending_count -= op.count
        t.pending_bytes -= op.size
        if t.deleted:
            op.records = None
            return False
        first = op.first_seq
        if op.holes:
            last_hole = first + op.holes - 1
            t.append_holes(last_hole, op.ts)
            t.source_trim_floor = max(t.source_trim_floor, last_hole)
            t.pop_front()
            first = last_hole + 1
        if op.records:
            t.publish_batch(first, op.ts, op.records)
        op.records = None
        return True

    def _apply_append(self, t: TopicState, op: PendingOp) -> bool:
        n = op.count
        t.pending_count -= n
        t.pending_bytes -= op.size
        err = op.commit.error
        if err is None and t.deleted:
            # Committed, then the topic was deleted: its TopicDelete follows these frames
            # in the log, so the write happened first and went with the topic.
            op.records = None
            op.write_result = _result(t, op, n, op.first_seq + n - 1)
            return False
        if err is not None or t.deleted:
            if not t.deleted:
                # Only this write fails: its seqs stay a hole, later writes keep theirs.
                t.append_holes(op.first_seq + n - 1, op.ts)
            op.error = internal(
                f"WAL commit failed: {err}" if err is not None else "the topic was deleted"
            )
            if op.idempotency_key is not None:
                t.dedupe.pop(op.idempotency_key, None)
            op.records = None
            return False
        assert op.records is not None
        if op.reservation > t.reservation_durable:
            t.reservation_durable = op.reservation
        t.publish_batch(op.first_seq, op.ts, op.records)
        op.records = None
        op.write_result = _result(t, op, n, t.head)
        return True


def _result(t: TopicState, op: PendingOp, n: int, head: int) -> WriteResult:
    return WriteResult(
        topic=t.name,
        first_seq=op.first_seq,
        last_seq=op.first_seq + n - 1,
        seqs=list(range(op.first_seq, op.first_seq + n)),
        head_seq=head,
        count=n,
        created=False,
        deduped=False,
        wal_append_ms=op.commit.wal_ms,
        # fsync_ms is the class's own cost: a disk write that also carried its head
        # reservation waited for an fsync, but that is not the class's ack condition.
        fsync_ms=op.commit.fsync_ms if t.config.durability is Durability.FSYNC else 0.0,
    )
