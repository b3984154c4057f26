"""The sharded WAL on a real filesystem (STORAGE §3.3–§3.5, §5.3, §6): write/replay round
trips, shard layout and a changed shard count, rotation, group commit, checkpoints."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash

from seglog.core.frames import FrameType, WalFrame, encode_append, encode_control
from seglog.storage.fs import File, Fs, RealFs
from seglog.storage.wal import Wal
from seglog.storage.wal_commit import Commit, WalError, WalQueueFull
from seglog.storage.wal_files import (
    discover_groups,
    read_group,
    replay_order,
    wal_file_name,
)
from seglog.storage.wal_metrics import FSYNC_BUCKETS_US
from tests.support.wal_tails import truncate_tails

FS = RealFs()


def rec(tid: int, seq: int, size: int = 20, durable: bool = True) -> bytes:
    return encode_append(
        tid, seq, seq * 10, None, f"t{seq}", b'{"d":"%s"}' % (b"x" * size), durable
    )


def replay(fs: Fs, wal_dir: Path, shards: int) -> dict[str, list[WalFrame]]:
    groups = replay_order(discover_groups(fs, wal_dir), shards)
    return {g.key: [f for _i, _e, f in read_group(fs, g, (1, 0))] for g in groups}


def seqs(frames: list[WalFrame], tid: int | None = None) -> list[int]:
    return [
        f.seq for f in frames if f.type is FrameType.APPEND and (tid is None or f.topic_id == tid)
    ]


@pytest.fixture
def wal_dir(tmp_path: Path) -> Path:
    return tmp_path / "wal"


@pytest.fixture
def opened() -> Iterator[list[Wal]]:
    wals: list[Wal] = []
    yield wals
    for w in wals:
        w.close()


def start(wals: list[Wal], wal_dir: Path, shards: int = 1, **kw: int) -> Wal:
    w = Wal(FS, wal_dir, shards, idle_sync=False, **kw)  # type: ignore[arg-type]
    w.open(truncate_tails(FS, discover_groups(FS, wal_dir)))
    wals.append(w)
    return w


def test_write_and_replay_round_trip(wal_dir: Path, opened: list[Wal]) -> None:
    w = start(opened, wal_dir)
    assert (wal_dir / wal_file_name(1)).stat().st_size == 64 << 20  # preallocated
    c1 = w.submit(0, [rec(1, 1), rec(1, 2)], durable=True)
    c2 = w.submit(0, [rec(1, 3, durable=False)], durable=False)
    ctl = encode_control(FrameType.HEAD_WATERMARK, 1, (256).to_bytes(8, "little"), 5, True)
    c3 = w.submit(0, [ctl], durable=True)
    for c in (c1, c2, c3):
        c.wait(5)
        assert c.done() and c.error is None
    assert c1.position is not None and c3.position is not None
    assert c1.position[0] == 1 and c1.position[1] == len(rec(1, 1)) * 2
    w.close()
    frames = replay(FS, wal_dir, 1)[""]
    assert seqs(frames) == [1, 2, 3]
    assert [f.durable for f in frames] == [True, True, False, True]
    assert frames[0].tag == "t1" and frames[0].node is None
    assert frames[3].type is FrameType.HEAD_WATERMARK

    # restart after the valid tail: new frames follow the old ones in the same file
    tails = truncate_tails(FS, discover_groups(FS, wal_dir))
    assert tails == {"": (1, c3.position[1])}
    w2 = start(opened, wal_dir)
    w2.submit(0, [rec(1, 4)], durable=True).wait(5)
    w2.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1, 2, 3, 4]
    g = discover_groups(FS, wal_dir)[0]
    assert len(list(read_group(FS, g))) == 5
    assert len(list(read_group(FS, g, (1, c1.position[1])))) == 3


def test_open_without_tails_finds_the_valid_end(wal_dir: Path, opened: list[Wal]) -> None:
    w = start(opened, wal_dir)
    w.submit(0, [rec(1, 1)], durable=True).wait(5)
    w.close()
    w2 = Wal(FS, wal_dir, 1, idle_sync=False)
    w2.open()  # no tails: must neither overwrite nor trust bytes past the valid end
    opened.append(w2)
    w2.submit(0, [rec(1, 2)], durable=True).wait(5)
    w2.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1, 2]


def test_truncate_tails_cuts_garbage_and_keeps_the_preallocation(
    wal_dir: Path, opened: list[Wal]
) -> None:
    w = start(opened, wal_dir, file_size=4096)
    c = w.submit(0, [rec(1, 1), rec(1, 2)], durable=True)
    c.wait(5)
    w.close()
    path = wal_dir / wal_file_name(1)
    end = c.position[1] if c.position else 0
    with path.open("r+b") as fh:  # a torn third frame past the valid end
        fh.seek(end)
        fh.write(rec(1, 3)[:30])
    tails = truncate_tails(FS, discover_groups(FS, wal_dir), 4096)
    assert tails == {"": (1, end)}
    data = path.read_bytes()
    assert len(data) == 4096 and data[end:] == bytes(4096 - end)


def test_shard_of_follows_the_spec(wal_dir: Path) -> None:
    w = Wal(FS, wal_dir, 5)
    for tid in (1, 2, 10, 2**40):
        assert w.shard_of(tid) == xxhash.xxh3_64_intdigest(tid.to_bytes(8, "little")) % 5
    assert w.shard_of(0) == 0
    assert Wal(FS, wal_dir, 1).shard_of(12345) == 0


def test_multi_shard_layout(wal_dir: Path, opened: list[Wal]) -> None:
    w = start(opened, wal_dir, shards=4)
    assert sorted(p.name for p in wal_dir.iterdir()) == [f"shard-0{i}" for i in range(4)]
    commits = []
    for tid in range(1, 13):
        for seq in (1, 2):
            commits.append(w.submit(w.shard_of(tid), [rec(tid, seq)], durable=seq == 2))
    for c in commits:
        c.wait(5)
    w.close()
    by_group = replay(FS, wal_dir, 4)
    assert list(by_group) == [f"shard-0{i}" for i in range(4)]
    for tid in range(1, 13):
        key = f"shard-{w.shard_of(tid):02d}"
        assert seqs(by_group[key], tid) == [1, 2]
        assert all(seqs(fr, tid) == [] for k, fr in by_group.items() if k != key)


def test_changed_shard_count_replays_every_group(wal_dir: Path, opened: list[Wal]) -> None:
    w4 = start(opened, wal_dir, shards=4)
    for tid in range(1, 9):
        w4.submit(w4.shard_of(tid), [rec(tid, 1)], durable=True).wait(5)
    w4.close()

    w2 = start(opened, wal_dir, shards=2)  # shard-00/01 continue, shard-02/03 are leftovers
    for tid in range(1, 9):
        w2.submit(w2.shard_of(tid), [rec(tid, 2)], durable=True).wait(5)
    groups = discover_groups(FS, wal_dir)
    assert [g.key for g in replay_order(groups, 2)] == [
        "shard-02", "shard-03", "shard-00", "shard-01",
    ]  # fmt: skip
    assert [g.key for g in replay_order(groups, 1)] == [g.key for g in groups]  # all stale

    # every topic's frames are found, in per-group order
    by_group = replay(FS, wal_dir, 2)
    for tid in range(1, 9):
        found = [s for fr in by_group.values() for s in seqs(fr, tid)]
        assert sorted(found) == [1, 2]

    # a checkpoint covers the leftovers too; then they are deleted
    positions = w2.checkpoint(ts_ms=1)
    assert set(positions) == {f"shard-0{i}" for i in range(4)}
    w2.delete_absorbed(positions)
    assert sorted(p.name for p in wal_dir.iterdir()) == ["shard-00", "shard-01"]
    w2.close()

    w1 = start(opened, wal_dir, shards=1)  # flat layout now; shard dirs are leftovers
    w1.submit(0, [rec(99, 1)], durable=True).wait(5)
    groups = discover_groups(FS, wal_dir)
    assert [g.key for g in replay_order(groups, 1)] == ["shard-00", "shard-01", ""]
    w1.delete_absorbed(w1.checkpoint(ts_ms=1))
    assert [g.key for g in discover_groups(FS, wal_dir)] == [""]
    w1.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1]


def test_rotation_with_a_tiny_file_size(wal_dir: Path, opened: list[Wal]) -> None:
    w = start(opened, wal_dir, file_size=512)
    n = len(rec(1, 1))
    for seq in range(1, 41):
        w.submit(0, [rec(1, seq)], durable=seq % 3 == 0).wait(5)
    big = [rec(1, s, size=300) for s in range(41, 44)]  # one batch larger than a file
    c = w.submit(0, big, durable=True)
    c.wait(5)
    w.submit(0, [rec(1, 44)], durable=True).wait(5)
    m = w.metrics()
    w.close()
    files = discover_groups(FS, wal_dir)[0].files
    assert [i for i, _p in files] == list(range(1, len(files) + 1))
    assert m.rotations == len(files) - 1 >= 40 * n // 512
    assert c.position is not None
    big_file = wal_dir / wal_file_name(c.position[0])
    assert big_file.stat().st_size == c.position[1] == sum(map(len, big))  # a file of its own
    assert seqs(replay(FS, wal_dir, 1)[""]) == list(range(1, 45))


class HookedFile:
    """A real file whose writes wait for `gate` and whose fdatasync takes `sync_s` longer."""

    def __init__(self, inner: File, gate: threading.Event, sync_s: float) -> None:
        self.inner, self.gate, self.sync_s = inner, gate, sync_s
        self.path = inner.path

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        self.gate.wait()
        return self.inner.write_at(data, offset)

    def read_at(self, size: int, offset: int) -> bytes:
        return self.inner.read_at(size, offset)

    def sync(self) -> None:
        if self.sync_s:
            threading.Event().wait(self.sync_s)
        self.inner.sync()

    def truncate(self, size: int) -> None:
        self.inner.truncate(size)

    def size(self) -> int:
        return self.inner.size()

    def close(self) -> None:
        self.inner.close()


class HookedFs(RealFs):
    """`gate` holds the writer mid-batch, deterministically; `sync_s` makes fdatasync cost
    what it costs on a disk (what group commit is for)."""

    def __init__(self, sync_s: float = 0.0) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.sync_s = sync_s

    def open(self, path: Path, *, create: bool = False) -> File:
        return HookedFile(super().open(path, create=create), self.gate, self.sync_s)


def test_group_commit_shares_fsyncs(wal_dir: Path) -> None:
    w = Wal(HookedFs(sync_s=0.001), wal_dir, 1, idle_sync=False)
    w.open()
    per_thread, threads = 10, 64
    errors: list[BaseException] = []

    def writer(tid: int) -> None:
        try:
            for seq in range(1, per_thread + 1):
                w.submit(0, [rec(tid, seq)], durable=True).wait(10)
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=writer, args=(tid,)) for tid in range(1, threads + 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    m = w.metrics()
    w.close()
    assert not errors
    submissions = per_thread * threads
    assert m.frames == submissions
    assert m.fsyncs <= submissions // 4, m  # far fewer fsyncs than durable submissions
    assert m.batches == m.fsyncs  # every batch was durable: one fsync each
    frames = replay(FS, wal_dir, 1)[""]
    for tid in range(1, threads + 1):
        assert seqs(frames, tid) == list(range(1, per_thread + 1))


def test_a_lone_durable_write_is_fsynced_and_buffered_ones_are_not(
    wal_dir: Path, opened: list[Wal]
) -> None:
    w = start(opened, wal_dir)
    w.submit(0, [rec(1, 1, durable=False)], durable=False).wait(5)
    m = w.metrics()
    assert (m.batches, m.fsyncs) == (1, 0)
    c = w.submit(0, [rec(1, 2)], durable=True)
    c.wait(5)
    m = w.metrics()
    assert (m.batches, m.fsyncs, m.fsync_count) == (2, 1, 1)
    assert c.fsync_ms >= 0.0 and c.wal_ms >= 0.0
    assert m.fsync_hist == sorted(m.fsync_hist) and m.fsync_hist[-1] <= m.fsync_count
    assert len(m.fsync_hist) == len(FSYNC_BUCKETS_US)
    assert m.bytes_written == len(rec(1, 1)) * 2 == w.bytes_written_total


def test_checkpoint_then_delete_absorbed(wal_dir: Path, opened: list[Wal]) -> None:
    w = start(opened, wal_dir, file_size=400)
    for seq in range(1, 11):
        w.submit(0, [rec(1, seq)], durable=False).wait(5)
    positions = w.checkpoint(ts_ms=123)
    idx, off = positions[""]
    assert idx > 1  # rotated before the mark
    for seq in range(11, 14):
        w.submit(0, [rec(1, seq)], durable=True).wait(5)
    group = discover_groups(FS, wal_dir)[0]
    after = [f for _i, _e, f in read_group(FS, group, (idx, off))]
    assert seqs(after) == [11, 12, 13]  # the mark itself ends at `off`
    every = [f for _i, _e, f in read_group(FS, group, (1, 0))]
    marks = [f for f in every if f.type is FrameType.CHECKPOINT_MARK]
    assert len(marks) == 1 and marks[0].ts == 123 and marks[0].durable

    w.delete_absorbed(positions)
    group = discover_groups(FS, wal_dir)[0]
    assert group.files[0][0] == idx
    assert seqs([f for _i, _e, f in read_group(FS, group, (idx, off))]) == [11, 12, 13]
    w.close()


def test_queue_full_rejects_without_writing(wal_dir: Path) -> None:
    fs = HookedFs()
    w = Wal(fs, wal_dir, 1, queue_size=3, idle_sync=False)
    w.open()
    fs.gate.clear()
    first = w.submit(0, [rec(1, 1)], durable=True)
    while w.metrics().queue_depth:  # the writer took it and is held in its write
        threading.Event().wait(0.001)
    queued = [w.submit(0, [rec(1, s)], durable=True) for s in (2, 3, 4)]
    with pytest.raises(WalQueueFull):
        w.submit(0, [rec(1, 5)], durable=True)
    with pytest.raises(TimeoutError):
        first.wait(0.01)
    m = w.metrics()
    assert (m.submit_full_total, m.queue_depth, m.queue_depth_peak) == (1, 3, 3)
    fs.gate.set()
    for c in (first, *queued):
        c.wait(5)
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1, 2, 3, 4]


def test_close_commits_everything_accepted(wal_dir: Path) -> None:
    fs = HookedFs()
    # Every submission through the queue (none written inline by this thread), held there.
    w = Wal(fs, wal_dir, 1, idle_sync=False, inline_buffered=False)
    w.open()
    fs.gate.clear()
    commits = [w.submit(0, [rec(1, s, durable=False)], durable=False) for s in range(1, 50)]
    closer = threading.Thread(target=w.close)
    closer.start()
    fs.gate.set()
    closer.join()
    assert all(c.done() and c.error is None for c in commits)
    with pytest.raises(WalError):
        w.submit(0, [rec(1, 50)], durable=True)
    assert seqs(replay(FS, wal_dir, 1)[""]) == list(range(1, 50))


def test_commit_handles_and_callbacks(wal_dir: Path, opened: list[Wal]) -> None:
    done = Commit.completed()
    assert done.done() and done.error is None and done.wal_ms == done.fsync_ms == 0.0
    done.wait(0)
    seen: list[Commit] = []
    done.add_done_callback(seen.append)  # already done: runs right away
    assert seen == [done]

    w = start(opened, wal_dir)
    c = w.submit(0, [rec(1, 1)], durable=True)
    got = threading.Event()

    def boom(_c: Commit) -> None:
        raise RuntimeError("a broken callback must not kill the writer")

    c.add_done_callback(boom)
    c.add_done_callback(lambda _c: got.set())
    assert got.wait(5)
    w.submit(0, [rec(1, 2)], durable=True).wait(5)  # the writer survived


def test_a_widened_gathering_window_groups_buffered_writes(
    wal_dir: Path, opened: list[Wal]
) -> None:
    """The pressure ladder's group-commit rung: with a window, non-durable writes from
    concurrent writers share batches (they would not otherwise: no fsync to wait on),
    and every frame still lands, in each writer's order."""
    w = start(opened, wal_dir)
    w.set_gather_window(0.005)
    per_thread, threads = 20, 8

    def writer(tid: int) -> None:
        for seq in range(1, per_thread + 1):
            w.submit(0, [rec(tid, seq, durable=False)], durable=False).wait(10)

    ts = [threading.Thread(target=writer, args=(tid,)) for tid in range(1, threads + 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    m = w.metrics()
    assert m.frames == per_thread * threads
    # Each batch waits out the window, so all waiting writers join it: ≤ per_thread + slack.
    assert m.batches <= per_thread * 2, m
    w.set_gather_window(0)
    w.submit(0, [rec(99, 1, durable=False)], durable=False).wait(10)
    frames = replay(FS, wal_dir, 1)[""]
    for tid in range(1, threads + 1):
        assert seqs(frames, tid) == list(range(1, per_thread + 1))
    assert seqs(frames, 99) == [1]
