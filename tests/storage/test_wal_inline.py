"""Buffered submissions written by their caller (STORAGE §3.5, `WalShard.submit`): when the
shard's writer is idle and nothing is queued, a non-durable submission is written by the
submitting thread before `submit` returns; everything else goes through the writer. These
tests pin down when the shortcut is taken, that it never reorders submissions, and that
its failures behave exactly like the writer's."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from seglog.storage.fs import File, RealFs
from seglog.storage.wal import Wal
from seglog.storage.wal_commit import WalError, WalReadOnly
from seglog.storage.wal_shard import INLINE_MAX_BYTES
from tests.storage.test_wal import FS, HookedFile, HookedFs, rec, replay, seqs


@pytest.fixture
def wal_dir(tmp_path: Path) -> Path:
    return tmp_path / "wal"


def _inline(w: Wal) -> int:
    return w.metrics().inline_batches


def test_a_buffered_submission_on_an_idle_shard_is_written_before_submit_returns(
    wal_dir: Path,
) -> None:
    w = Wal(FS, wal_dir, 1, idle_sync=False)
    w.open()
    c1 = w.submit(0, [rec(1, 1, durable=False)], durable=False)
    assert c1.done() and c1.error is None and c1.position is not None
    assert _inline(w) == 1
    c2 = w.submit(0, [rec(1, 2)], durable=True)  # a durable one is the writer's (fsync)
    c2.wait(5)
    assert c2.error is None and _inline(w) == 1
    c3 = w.submit(0, [rec(1, 3, durable=False), rec(1, 4, durable=False)], durable=False)
    assert c3.done() and _inline(w) == 2
    m = w.metrics()
    assert (m.batches, m.frames) == (3, 4)
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1, 2, 3, 4]


def test_buffered_submissions_behind_queued_work_wait_their_turn(wal_dir: Path) -> None:
    fs = HookedFs()
    w = Wal(fs, wal_dir, 1, idle_sync=False)
    w.open()
    fs.gate.clear()
    first = w.submit(0, [rec(1, 1)], durable=True)
    while w.metrics().queue_depth:  # the writer took it and is held in its write
        threading.Event().wait(0.001)
    # The writer holds the file: these may not overtake it, nor each other.
    behind = [w.submit(0, [rec(1, s, durable=False)], durable=False) for s in (2, 3, 4)]
    assert not any(c.done() for c in behind)
    assert w.metrics().queue_depth == 3
    fs.gate.set()
    for c in (first, *behind):
        c.wait(5)
        assert c.error is None
    assert _inline(w) == 0
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1, 2, 3, 4]


def test_a_large_buffered_submission_goes_through_the_writer(wal_dir: Path) -> None:
    w = Wal(FS, wal_dir, 1, idle_sync=False)
    w.open()
    big = [rec(1, s, size=1000, durable=False) for s in range(1, 80)]
    assert sum(map(len, big)) > INLINE_MAX_BYTES
    w.submit(0, big, durable=False).wait(5)
    assert _inline(w) == 0
    w.submit(0, [rec(1, 80, durable=False)], durable=False).wait(5)
    assert _inline(w) == 1
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == list(range(1, 81))


def test_inline_writes_can_be_turned_off(wal_dir: Path) -> None:
    w = Wal(FS, wal_dir, 1, idle_sync=False, inline_buffered=False)
    w.open()
    cs = [w.submit(0, [rec(1, s, durable=False)], durable=False) for s in range(1, 20)]
    for c in cs:
        c.wait(5)
    assert _inline(w) == 0
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == list(range(1, 20))


def test_a_submission_that_needs_a_rotation_is_left_to_the_writer(wal_dir: Path) -> None:
    frames = [rec(1, s, size=200, durable=False) for s in range(1, 12)]
    w = Wal(FS, wal_dir, 1, idle_sync=False, file_size=sum(map(len, frames[:10])))
    w.open()
    cs = [w.submit(0, [f], durable=False) for f in frames]
    for c in cs:
        c.wait(5)
        assert c.error is None
    m = w.metrics()
    # The first file's worth was written inline; the one that needed a new file was not.
    assert (m.inline_batches, m.rotations) == (10, 1)
    assert cs[-1].position == (2, len(frames[-1]))
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == list(range(1, 12))


def test_concurrent_submitters_never_reorder(wal_dir: Path) -> None:
    """Seqs are taken and submitted under one lock, as the engine does under a topic's
    lock; buffered submissions race the writer's durable batches (each fsync made slow so
    the writer is often busy). Replay must show exactly the submission order."""
    w = Wal(HookedFs(sync_s=0.0005), wal_dir, 1, idle_sync=False)
    w.open()
    order = threading.Lock()
    next_seq = [0]
    errors: list[BaseException] = []
    threads, per_thread = 8, 150

    def submitter(k: int) -> None:
        try:
            for i in range(per_thread):
                durable = (i + k) % 9 == 0
                with order:
                    next_seq[0] += 1
                    s = next_seq[0]
                    c = w.submit(0, [rec(1, s, durable=durable)], durable=durable)
                c.wait(10)
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=submitter, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    m = w.metrics()
    total = threads * per_thread
    assert 0 < m.inline_batches < m.batches <= total  # both paths were taken
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == list(range(1, total + 1))


class _WriteHookFile(HookedFile):
    """A real file whose writes first pass through `hook(data, offset, write)`."""

    def __init__(self, inner: File, hook: Callable[[bytes, int, Callable[..., int]], int]) -> None:
        super().__init__(inner, _OPEN_GATE, 0.0)
        self.hook = hook

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        return self.hook(bytes(data), offset, self.inner.write_at)


_OPEN_GATE = threading.Event()
_OPEN_GATE.set()


class _FailOnce(RealFs):
    """Fails the first write carrying `marker` with EIO, after writing half of it."""

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.fired = False

    def open(self, path: Path, *, create: bool = False) -> File:
        return _WriteHookFile(super().open(path, create=create), self._write)

    def _write(self, data: bytes, offset: int, write: Callable[..., int]) -> int:
        if not self.fired and self.marker in data:
            self.fired = True
            write(data[: len(data) // 2], offset)
            raise OSError(errno.EIO, "injected")
        return write(data, offset)


def test_a_failed_inline_write_fails_only_itself_and_leaves_nothing(wal_dir: Path) -> None:
    fs = _FailOnce(b"t2")
    w = Wal(fs, wal_dir, 1, idle_sync=False)
    w.open()
    ok1 = w.submit(0, [rec(1, 1, durable=False)], durable=False)
    bad = w.submit(0, [rec(1, 2, durable=False), rec(1, 3, durable=False)], durable=False)
    assert bad.done() and isinstance(bad.error, WalError)  # failed before submit returned
    assert fs.fired
    ok2 = w.submit(0, [rec(1, 4, durable=False)], durable=False)
    ok2.wait(5)
    assert ok1.error is None and ok2.error is None
    assert w.metrics().read_only == 0
    w.close()
    # The failed frames were erased (not merely skipped), and the write after them is there.
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1, 4]


class _Stop(BaseException):
    pass


class _StopOnWrite(RealFs):
    def __init__(self) -> None:
        self.armed = False

    def open(self, path: Path, *, create: bool = False) -> File:
        return _WriteHookFile(super().open(path, create=create), self._write)

    def _write(self, data: bytes, offset: int, write: Callable[..., int]) -> int:
        if self.armed:
            raise _Stop()
        return write(data, offset)


def test_an_inline_write_that_dies_latches_the_shard_like_a_dead_writer(wal_dir: Path) -> None:
    fs = _StopOnWrite()
    w = Wal(fs, wal_dir, 1, idle_sync=False)
    w.open()
    w.submit(0, [rec(1, 1, durable=False)], durable=False)
    fs.armed = True
    with pytest.raises(_Stop):
        w.submit(0, [rec(1, 2, durable=False)], durable=False)
    assert w.metrics().read_only == 1
    with pytest.raises(WalReadOnly):  # nothing more is accepted
        w.submit(0, [rec(1, 3)], durable=True)
    fs.armed = False
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1]


class _HoldThenStop(RealFs):
    """The write carrying `marker` waits for `go`, then the world stops (`_Stop`)."""

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.held = threading.Event()
        self.go = threading.Event()

    def open(self, path: Path, *, create: bool = False) -> File:
        return _WriteHookFile(super().open(path, create=create), self._write)

    def _write(self, data: bytes, offset: int, write: Callable[..., int]) -> int:
        if self.marker in data:
            self.held.set()
            self.go.wait(10)
            raise _Stop()
        return write(data, offset)


def test_a_submission_queued_behind_a_dying_inline_write_fails_once_and_is_not_written(
    wal_dir: Path,
) -> None:
    fs = _HoldThenStop(b"t2")
    w = Wal(fs, wal_dir, 1, idle_sync=False)
    w.open()
    w.submit(0, [rec(1, 1, durable=False)], durable=False).wait(5)
    died: list[BaseException] = []

    def inline_writer() -> None:
        try:
            w.submit(0, [rec(1, 2, durable=False)], durable=False)
        except _Stop as e:
            died.append(e)

    th = threading.Thread(target=inline_writer)
    th.start()
    assert fs.held.wait(10)  # the inline write holds the file
    queued = w.submit(0, [rec(1, 3)], durable=True)
    completions: list[object] = []
    queued.add_done_callback(lambda c: completions.append(c.error))
    while w.metrics().queue_depth < 1:  # the writer waits for the file, the queue keeps it
        threading.Event().wait(0.001)
    fs.go.set()
    th.join(10)
    assert died, "the inline write's death reaches its caller"
    with pytest.raises(WalError):
        queued.wait(5)
    w.close()
    assert len(completions) == 1, "completed more than once"
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1], "a failed submission was written"
