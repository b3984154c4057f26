"""A thread that blocks on a commit writes the queue itself when the writer is idle
(`Commit.wait` → `WalShard.commit_here`), and a submission made for such a waiter does not
wake the writer (`submit(..., wake=False)`). These tests pin down which thread writes, that
order and group commit hold, that a waiter that cannot take the file wakes the writer (or
it would sleep out the writer's idle timeout), and that a write that dies on the waiter's
thread fails exactly like the writer's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from seglog.storage import wal_shard
from seglog.storage.fs import File, RealFs
from seglog.storage.wal import Wal
from seglog.storage.wal_commit import Commit, WalError, WalReadOnly
from tests.storage.test_wal import FS, rec, replay, seqs
from tests.storage.test_wal_inline import _WriteHookFile


class _ThreadsFs(RealFs):
    """Records the thread of every write and fdatasync of the WAL files."""

    def __init__(self) -> None:
        self.writers: list[str] = []
        self.syncers: list[str] = []

    def open(self, path: Path, *, create: bool = False) -> File:
        return _SyncSpyFile(super().open(path, create=create), self)


class _SyncSpyFile(_WriteHookFile):
    def __init__(self, inner: File, fs: _ThreadsFs) -> None:
        super().__init__(inner, self._write)
        self._fs = fs

    def _write(self, data: bytes, offset: int, write: Callable[..., int]) -> int:
        self._fs.writers.append(threading.current_thread().name)
        return write(data, offset)

    def sync(self) -> None:
        self._fs.syncers.append(threading.current_thread().name)
        super().sync()


def on_a_thread(fn: Callable[[], object]) -> str:
    """Run `fn` on a new (non-main) thread, as an embedder's worker would; its name. What
    `fn` raises is raised here."""
    box: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:
            box.append(e)

    th = threading.Thread(target=run, name="waiter")
    th.start()
    th.join(30)
    assert not th.is_alive(), "the waiter hangs"
    if box:
        raise box[0]
    return th.name


@pytest.fixture
def wal_dir(tmp_path: Path) -> Path:
    return tmp_path / "wal"


@pytest.fixture
def sleepy_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle writer only looks at its queue when woken: a lost wake-up hangs a test."""
    monkeypatch.setattr(wal_shard, "TAKE_TIMEOUT_S", 60.0)


def test_a_waiter_writes_and_syncs_its_durable_submission_itself(
    wal_dir: Path, sleepy_writer: None
) -> None:
    fs = _ThreadsFs()
    w = Wal(fs, wal_dir, 1, idle_sync=False)
    w.open()
    fs.writers.clear()
    fs.syncers.clear()
    got: list[Commit] = []

    def write() -> None:
        c = w.submit(0, [rec(1, 1), rec(1, 2)], durable=True, wake=False)
        assert not c.done()  # queued, the writer not woken
        got.append(c)
        c.wait(10)

    me = on_a_thread(write)
    c = got[0]
    assert c.error is None and c.position is not None
    assert fs.writers == [me] and fs.syncers == [me]
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1, 2]


def test_the_main_thread_leaves_the_write_to_the_writer(wal_dir: Path, sleepy_writer: None) -> None:
    """Signal handlers (KeyboardInterrupt) run on the main thread between any two
    bytecodes: one inside a batch it wrote for others would fail their written writes."""
    assert threading.current_thread() is threading.main_thread()
    fs = _ThreadsFs()
    w = Wal(fs, wal_dir, 1, idle_sync=False)
    w.open()
    fs.writers.clear()
    # A worker's submission, queued without waking the writer; the main thread waits on
    # it: it must wake the writer, not write the queue itself.
    queued: list[Commit] = []
    on_a_thread(lambda: queued.append(w.submit(0, [rec(1, 1)], durable=True, wake=False)))
    assert not queued[0].done()
    queued[0].wait(10)
    assert queued[0].error is None
    assert fs.writers and threading.main_thread().name not in fs.writers
    # And the main thread's own submission wakes the writer at once (its wait will not
    # write it), whatever it asked for.
    fs.writers.clear()
    done = threading.Event()
    mine = w.submit(0, [rec(1, 2)], durable=True, wake=False)
    mine.add_done_callback(lambda _c: done.set())
    assert done.wait(10), "the main thread's submission did not wake the writer"
    assert threading.main_thread().name not in fs.writers
    w.close()


def test_a_waiter_takes_everything_queued_in_order(wal_dir: Path, sleepy_writer: None) -> None:
    fs = _ThreadsFs()
    w = Wal(fs, wal_dir, 1, idle_sync=False, inline_buffered=False)
    w.open()
    commits: list[Commit] = []

    def write() -> None:
        commits.extend(
            w.submit(0, [rec(1, s)], durable=s % 2 == 0, wake=False) for s in range(1, 7)
        )
        assert not any(c.done() for c in commits)
        commits[2].wait(10)  # one wait writes the whole queue, as one batch

    on_a_thread(write)
    assert all(c.done() and c.error is None for c in commits)
    assert len(fs.writers) == 1 and w.metrics().batches == 1
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1, 2, 3, 4, 5, 6]


def test_a_waiter_that_cannot_take_the_file_wakes_the_writer(
    wal_dir: Path, sleepy_writer: None
) -> None:
    w = Wal(FS, wal_dir, 1, idle_sync=False)
    w.open()
    shard = w._shards[0]
    woke = threading.Event()
    real_wake = shard._wake

    def wake() -> None:
        real_wake()
        woke.set()

    shard._wake = wake  # type: ignore[method-assign]
    shard._file_lock.acquire()  # as an inline write in progress would hold it
    c = w.submit(0, [rec(1, 1)], durable=True, wake=False)
    done = threading.Event()
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            c.wait(30)
        except BaseException as e:
            errors.append(e)
        done.set()

    th = threading.Thread(target=waiter)
    th.start()
    assert woke.wait(10), "the waiter gave up the file without waking the writer"
    shard._file_lock.release()
    # The writer, woken, writes it: well before its 60 s idle timeout would have.
    assert done.wait(10) and not errors, errors
    th.join(10)
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1]


def test_a_submission_that_wakes_the_writer_is_written_with_nobody_waiting(
    wal_dir: Path, sleepy_writer: None
) -> None:
    w = Wal(FS, wal_dir, 1, idle_sync=False)
    w.open()
    c = w.submit(0, [rec(1, 1)], durable=True)  # wake=True: the async callers' way
    done = threading.Event()
    c.add_done_callback(lambda _c: done.set())
    assert done.wait(10) and c.error is None
    w.close()


def test_group_commit_holds_with_waiters_writing(wal_dir: Path) -> None:
    w = Wal(FS, wal_dir, 1, idle_sync=False)
    w.open()
    per_thread, threads = 20, 16
    errors: list[BaseException] = []

    def writer(tid: int) -> None:
        try:
            for seq in range(1, per_thread + 1):
                w.submit(0, [rec(tid, seq)], durable=True, wake=False).wait(30)
        except BaseException as e:
            errors.append(e)

    ths = [threading.Thread(target=writer, args=(t,)) for t in range(1, threads + 1)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    assert not errors, errors
    w.close()
    got = replay(FS, wal_dir, 1)[""]
    for tid in range(1, threads + 1):  # every write is there, each writer's in order
        assert [f.seq for f in got if f.topic_id == tid] == list(range(1, per_thread + 1))


class _Stop(BaseException):
    pass


class _RaiseOnMarker(RealFs):
    """The write carrying `marker` raises `error()` instead: `_Stop` is the world
    stopping, an `Exception` a bug in the write path."""

    def __init__(self, marker: bytes, error: Callable[[], BaseException]) -> None:
        self.marker = marker
        self.error = error

    def open(self, path: Path, *, create: bool = False) -> File:
        return _WriteHookFile(super().open(path, create=create), self._write)

    def _write(self, data: bytes, offset: int, write: Callable[..., int]) -> int:
        if self.marker in data:
            raise self.error()
        return write(data, offset)


def test_a_write_that_dies_on_the_waiter_latches_the_shard_and_fails_the_batch(
    wal_dir: Path, sleepy_writer: None
) -> None:
    w = Wal(_RaiseOnMarker(b"t9", _Stop), wal_dir, 1, idle_sync=False, inline_buffered=False)
    w.open()
    w.submit(0, [rec(1, 1)], durable=True).wait(10)
    completions: list[object] = []
    subs: list[Commit] = []

    def write() -> None:
        good = w.submit(0, [rec(1, 2)], durable=True, wake=False)
        doomed = w.submit(0, [rec(1, 9)], durable=True, wake=False)  # its tag is "t9"
        subs.extend((good, doomed))
        good.add_done_callback(lambda c: completions.append(c.error))
        doomed.wait(10)

    with pytest.raises(_Stop):  # the world stopping reaches the thread it stopped
        on_a_thread(write)
    good, doomed = subs
    # The whole batch failed, each handle once; nothing more is accepted.
    assert isinstance(good.error, WalError) and isinstance(doomed.error, WalError)
    assert len(completions) == 1
    assert w.metrics().read_only == 1
    with pytest.raises(WalReadOnly):
        w.submit(0, [rec(1, 3)], durable=True)
    w.close()
    assert seqs(replay(FS, wal_dir, 1)[""]) == [1], "a failed batch was written"


def test_a_bug_on_the_waiter_fails_the_waits_as_a_dead_writer_does(
    wal_dir: Path, sleepy_writer: None
) -> None:
    w = Wal(
        _RaiseOnMarker(b"t9", lambda: RuntimeError("a bug")),
        wal_dir,
        1,
        idle_sync=False,
        inline_buffered=False,
    )
    w.open()
    with pytest.raises(WalError, match="stopped"):  # not the RuntimeError itself
        on_a_thread(lambda: w.submit(0, [rec(1, 9)], durable=True, wake=False).wait(10))
    assert w.metrics().read_only == 1
    w.close()
