"""WAL faults through the filesystem seam (FaultFs): an fsync or write error is never an
ack and leaves nothing behind that replay could mistake for data; a rotation that cannot
create its file latches read-only; a power cut after any single mutating call keeps every
acked-durable frame and invents nothing."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from seglog.core.frames import encode_append, encode_frame
from seglog.storage.wal import Wal
from seglog.storage.wal_commit import Commit, WalError, WalReadOnly
from seglog.storage.wal_files import discover_groups, read_group, replay_order
from tests.support.faultfs import Crash, FaultFs
from tests.support.wal_tails import truncate_tails

ROOT = Path("/data")
WAL = ROOT / "wal"


def fresh_fs() -> FaultFs:
    fs = FaultFs()
    fs.mkdir(ROOT)  # the data dir is durable before the WAL starts (DataDir's job)
    fs.fsync_dir(Path("/"))
    return fs


def rec(tid: int, seq: int, durable: bool = True) -> bytes:
    return encode_append(tid, seq, seq, "n", None, b'{"d":%d}' % (seq % 10), durable)


def replay(fs: FaultFs, shards: int = 1) -> dict[str, list[bytes]]:
    """Every group's valid frames, re-encoded (framing round-trips byte for byte)."""
    groups = replay_order(discover_groups(fs, WAL), shards)
    return {g.key: [encode_frame(f) for _i, _e, f in read_group(fs, g, (1, 0))] for g in groups}


def open_wal(fs: FaultFs, shards: int = 1, file_size: int = 4096) -> Wal:
    w = Wal(fs, WAL, shards, file_size=file_size, idle_sync=False)
    w.open(truncate_tails(fs, discover_groups(fs, WAL), file_size))
    return w


def hold_writer(fs: FaultFs, w: Wal, frame: bytes) -> Commit:
    """Submit `frame` and return once the writer is stuck in its write at the gate, so
    whatever is submitted next forms one batch."""
    fs.write_gate = threading.Event()
    c = w.submit(0, [frame], durable=True)
    while w.metrics().queue_depth:
        threading.Event().wait(0.001)
    return c


def release(fs: FaultFs) -> None:
    gate, fs.write_gate = fs.write_gate, None
    assert gate is not None
    gate.set()


def test_fsync_eio_fails_every_handle_and_leaves_no_stale_frames() -> None:
    fs = fresh_fs()
    w = open_wal(fs)
    w.submit(0, [rec(1, 1)], durable=True).wait(5)
    held = hold_writer(fs, w, rec(1, 2))
    batch = [
        w.submit(0, [rec(1, 3), rec(1, 4)], durable=True),
        w.submit(0, [rec(1, 5, durable=False)], durable=False),  # shares the failed fsync
        w.submit(0, [rec(1, 6)], durable=True),
    ]
    fs.fail_syncs = {fs.syncs + 2}  # the held batch syncs fine; the next one fails
    release(fs)
    held.wait(5)
    for c in batch:
        with pytest.raises(WalError):
            c.wait(5)
        assert c.error is not None and c.position is None
    assert replay(fs.crash_image("none"))[""] == [rec(1, 1), rec(1, 2)]

    # The failed frames are complete in the file. The engine reuses their seqs; a shorter
    # batch must not leave rec(1, 4).. after it as valid frames, on disk or in the cache.
    w.submit(0, [rec(1, 3)], durable=True).wait(5)
    want = [rec(1, 1), rec(1, 2), rec(1, 3)]
    for keep in ("none", "all"):
        assert replay(fs.crash_image(keep))[""] == want, keep  # type: ignore[arg-type]
    m = w.metrics()
    assert m.read_only == 0 and m.frames == 3  # failed batches count nothing
    w.close()


def test_failed_write_rewinds_and_the_next_batch_replays() -> None:
    fs = fresh_fs()
    w = open_wal(fs)
    w.submit(0, [rec(1, 1)], durable=True).wait(5)
    fs.fail_writes = {fs.writes + 1}
    with pytest.raises(WalError):
        w.submit(0, [rec(1, 2), rec(1, 3)], durable=True).wait(5)
    # a torn write that reports EIO after writing half the batch
    fs.tear_writes, fs.tear_mode = {fs.writes + 1}, "raise"
    with pytest.raises(WalError):
        w.submit(0, [rec(1, 2), rec(1, 3)], durable=False).wait(5)
    w.submit(0, [rec(1, 2)], durable=True).wait(5)
    # a short write is not an error: the rest is written by the same submission
    fs.tear_writes, fs.tear_mode = {fs.writes + 1}, "short"
    w.submit(0, [rec(1, 3), rec(1, 4)], durable=True).wait(5)
    w.close()
    want = [rec(1, s) for s in (1, 2, 3, 4)]
    for keep in ("none", "all"):
        assert replay(fs.crash_image(keep))[""] == want  # type: ignore[arg-type]


def test_a_failed_fsync_that_drops_dirty_pages_is_repaired() -> None:
    # Linux may mark pages clean after failed writeback; a later fsync "succeeds" without
    # them. Buffered rec 2 would then be a hole in front of acked-durable rec 4.
    fs = fresh_fs()
    fs.lose_on_failed_sync = True
    w = open_wal(fs)
    w.submit(0, [rec(1, 1)], durable=True).wait(5)
    w.submit(0, [rec(1, 2, durable=False)], durable=False).wait(5)
    fs.fail_syncs = {fs.syncs + 1}
    with pytest.raises(WalError):
        w.submit(0, [rec(1, 3), rec(1, 4)], durable=True).wait(5)
    w.submit(0, [rec(1, 3)], durable=True).wait(5)
    assert replay(fs.crash_image("none"))[""] == [rec(1, 1), rec(1, 2, False), rec(1, 3)]
    w.close()


def test_idle_sync_failure_is_repaired() -> None:
    fs = fresh_fs()
    fs.lose_on_failed_sync = True
    w = Wal(fs, WAL, 1, file_size=4096, idle_sync=True)  # the only test with idle fsyncs
    w.open()
    w.submit(0, [rec(1, 1, durable=False)], durable=False).wait(5)
    fs.fail_syncs = {fs.syncs + 1}
    for _ in range(5000):  # wait (bounded) for the idle fsync to have failed
        if fs.syncs in fs.fail_syncs:
            break
        threading.Event().wait(0.001)
    assert fs.syncs in fs.fail_syncs
    w.submit(0, [rec(1, 2)], durable=True).wait(5)  # or an idle retry got there first
    assert replay(fs.crash_image("none"))[""] == [rec(1, 1, False), rec(1, 2)]
    w.close()


def test_rotation_that_cannot_create_a_file_latches_read_only() -> None:
    fs = fresh_fs()
    w = open_wal(fs, file_size=256)
    acked = []
    fs.fail_creates = {fs.creates + 1}
    err: WalError | None = None
    for seq in range(1, 20):
        try:
            w.submit(0, [rec(1, seq)], durable=True).wait(5)
        except WalError as e:
            err = e
            break
        acked.append(rec(1, seq))
    assert isinstance(err, WalReadOnly) and acked
    assert w.metrics().read_only == 1
    with pytest.raises(WalReadOnly):
        w.submit(0, [rec(1, 99)], durable=True)
    w.close()
    assert replay(fs.crash_image("none"))[""] == acked


def test_rotation_whose_old_file_cannot_sync_fails_only_that_batch() -> None:
    fs = fresh_fs()
    fs.lose_on_failed_sync = True  # and the buffered frames before it must survive anyway
    w = open_wal(fs, file_size=256)
    acked: list[bytes] = []
    failed: list[int] = []
    end = 0
    for i in range(1, 12):
        durable = i % 3 == 0  # rec 4, buffered, is unsynced when the rotation starts
        frame = rec(1, len(acked) + 1, durable)
        rotating = end + len(frame) > 256 and not failed
        if rotating:  # the rotation syncs the old file first: that sync fails
            fs.fail_syncs = {fs.syncs + 1}
        c = w.submit(0, [frame], durable)
        try:
            c.wait(5)
        except WalError as e:
            assert not isinstance(e, WalReadOnly)
            failed.append(i)
            assert rotating
            continue
        acked.append(frame)
        assert c.position is not None
        end = c.position[1]
    m = w.metrics()
    w.close()
    assert len(failed) == 1 and m.read_only == 0 and m.rotations >= 1
    assert replay(fs.crash_image("none"))[""] == acked


@dataclass
class Ledger:
    submitted: dict[str, list[bytes]] = field(default_factory=dict)  # per group, in order
    durable: set[bytes] = field(default_factory=set)  # acked after an fsync


def workload(fs: FaultFs, ledger: Ledger) -> None:
    """Two shards, tiny files (rotations), durable and buffered submissions, a checkpoint."""
    w = Wal(fs, WAL, 2, file_size=300, idle_sync=False)
    try:
        w.open()
        for i in range(16):
            tid = 1 + i % 3
            shard = w.shard_of(tid)
            durable = i % 3 != 1
            frames = [rec(tid, 3 * i + k, durable) for k in range(1 + i % 3)]
            ledger.submitted.setdefault(f"shard-{shard:02d}", []).extend(frames)
            w.submit(shard, frames, durable).wait(5)
            if durable:
                ledger.durable.update(frames)
            if i == 7:
                w.checkpoint(ts_ms=1)  # its marks are not in the ledger: filtered below
    except (Crash, WalError):
        pass  # the world stopped here
    finally:
        fs.crashed = True  # nothing more reaches the disk, not even the shutdown sync
        w.close()


def check(img: FaultFs, ledger: Ledger) -> dict[str, list[bytes]]:
    got = replay(img, 2)
    ours = {f for fr in ledger.submitted.values() for f in fr}
    for key, frames in got.items():
        records = [f for f in frames if f in ours]
        assert len(frames) - len(records) <= 1, "only the checkpoint mark is not a record"
        # each group holds a prefix of what was submitted to it: nothing invented,
        # nothing reordered, no hole
        assert records == ledger.submitted.get(key, [])[: len(records)], key
    present = {f for fr in got.values() for f in fr}
    assert ledger.durable <= present, "an acked-durable frame was lost"
    return got


def test_crash_after_every_mutating_call() -> None:
    clean = fresh_fs()
    base = clean.mutations
    workload_fs, ledger = clean, Ledger()
    workload_fs.crash_at = None
    workload(workload_fs, ledger)
    total = workload_fs.mutations - base
    assert total > 40
    rng = random.Random(11)
    for n in range(1, total + 1):
        fs, ledger = fresh_fs(), Ledger()
        fs.crash_after(fs.mutations + n)
        workload(fs, ledger)
        for keep in ("none", "random", "all"):
            img = fs.crash_image(keep, rng)  # type: ignore[arg-type]
            try:
                before = check(img, ledger)
            except AssertionError as err:
                raise AssertionError(f"crash after mutating call {n} ({keep}): {err}") from err
            # recovery is repeatable: seal the tails, reopen, append, and find it all again
            w = open_wal(img, shards=2, file_size=300)
            extra = {key: rec(7, 1000 + i) for i, key in enumerate(("shard-00", "shard-01"))}
            for i, frame in enumerate(extra.values()):
                w.submit(i, [frame], durable=True).wait(5)
            w.close()
            after = replay(img.crash_image("none"), 2)
            for key in extra:
                assert after[key] == [*before.get(key, []), extra[key]], (n, keep, key)
