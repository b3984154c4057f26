"""Disk-class head reservations (SEMANTICS §3.2) logged ahead of need: each reservation is
max(head, reservation) + 256, it is logged before any seq at or above the previous one is
made visible, it never runs more than two steps ahead of the head, and a write whose seqs
an already committed reservation covers does not wait for an fsync."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog.core.frame_bodies import HeadWatermarkBody
from seglog.core.frame_scanner import scan_frames
from seglog.core.frames import FrameType
from seglog.engine.ops import PendingOp
from seglog.engine.topic import TopicState
from seglog.engine.writes import HEAD_RESERVATION_STEP, submit_append
from seglog.model import Durability, RecordBatch, RecordIn, TopicConfig
from seglog.storage.wal_commit import Commit

STEP = HEAD_RESERVATION_STEP


class FakeWal:
    """Records submissions; commits complete when told to (`settle`)."""

    def __init__(self) -> None:
        self.subs: list[tuple[list[bytes], bool, Commit]] = []

    def submit(self, _tid: int, frames: list[bytes], durable: bool) -> Commit:
        c = Commit()
        self.subs.append((frames, durable, c))
        return c

    def settle(self) -> None:
        for _, _, c in self.subs:
            if not c.done():
                c._complete()


def reservations(frames: list[bytes]) -> list[int]:
    return [
        HeadWatermarkBody.decode(f.data).reserved_head
        for _, _, f in scan_frames(b"".join(frames))[0]
        if f.type is FrameType.HEAD_WATERMARK
    ]


def publish(t: TopicState, ops: list[PendingOp]) -> None:
    """What the publisher does with a committed write's reservation."""
    for op in ops:
        if op.commit.done() and op.reservation > t.reservation_durable:
            t.reservation_durable = op.reservation


@given(st.lists(st.tuples(st.integers(1, 700), st.booleans()), min_size=1, max_size=60))
def test_reservations_cover_every_write_and_stay_close_to_the_head(
    batches: list[tuple[int, bool]],
) -> None:
    t = TopicState("d", 1, TopicConfig(durability=Durability.DISK))
    wal = FakeWal()
    ops: list[PendingOp] = []
    logged = 0  # the highest reservation logged so far
    for n, settle in batches:
        before = len(wal.subs)
        durable_before = max(
            [0] + [max(reservations(f), default=0) for f, _, c in wal.subs if c.done()]
        )
        op = submit_append(t, RecordBatch.of([RecordIn.of(1)] * n), n, 0, wal.submit)
        ops.append(op)
        last = op.first_seq + n - 1
        write_frames, write_durable, _ = wal.subs[before]
        own = reservations(write_frames)
        if own:  # rides with the write (which then waits for its fsync) and covers it
            assert write_durable and last < own[0]
        else:  # covered by a reservation committed before the write was submitted (a
            # crash then restores the head to at least that reservation: no seq reissued)
            assert not write_durable and last <= durable_before
        for frames, durable, _ in wal.subs[before:]:
            for r in reservations(frames):
                assert durable
                if r > logged:  # a new reservation: SEMANTICS §3.2's formula
                    assert r == max(last, logged) + STEP
                    logged = r
                else:  # the current one again, not yet known committed
                    assert r == logged
        assert last <= logged <= last + 2 * STEP
        if settle:
            wal.settle()
        publish(t, ops)


def test_steady_disk_writes_do_not_wait_for_reservation_fsyncs() -> None:
    t = TopicState("d", 1, TopicConfig(durability=Durability.DISK))
    wal = FakeWal()
    waited = 0
    for _ in range(100):
        before = len(wal.subs)
        op = submit_append(t, RecordBatch.of([RecordIn.of(1)] * 100), 100, 0, wal.submit)
        waited += wal.subs[before][1]
        wal.settle()  # the WAL keeps up: reservations commit between writes
        publish(t, [op])
    assert waited == 1  # only the first write carried its reservation


def test_a_reservation_ahead_goes_through_the_waking_submit() -> None:
    """A sync writer's own frames are queued without waking the WAL writer (it writes them
    itself when it waits); nobody waits for a reservation logged ahead, so that one must
    wake the writer, or it sits queued until the writer's idle timeout."""
    t = TopicState("d", 1, TopicConfig(durability=Durability.DISK))
    quiet, waking = FakeWal(), FakeWal()
    for _ in range(10):
        submit_append(
            t, RecordBatch.of([RecordIn.of(1)] * 100), 100, 0, quiet.submit, waking.submit
        )
        quiet.settle()
        waking.settle()
    ahead = [frames for frames, _, _ in waking.subs]
    assert ahead, "no reservation was logged ahead"
    assert all(reservations(frames) and len(frames) == 1 for frames in ahead)
    assert not any(len(reservations(f)) == len(f) for f, _, _ in quiet.subs)  # writes only
