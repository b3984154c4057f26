"""The sharded write-ahead log with adaptive group commit (STORAGE §3.3–§3.5, §6).

Each shard is one writer thread that owns its directory and active file; submissions
(an atomic list of frames, one durable flag, one `Commit`) arrive through a bounded queue.
The writer takes one submission, then everything queued; when the batch is durable and
others are arriving it keeps collecting in 0.5 ms slices (≤ 10 ms), so one fdatasync
serves many writers, while a lone durable write is synced at once. One write per batch at
the logical tail; on a write or sync error every handle of the batch fails and the tail
rewinds (later batches overwrite bytes nobody was told were durable).

The writer thread never takes engine locks and runs completion callbacks, which must not
block. All file access goes through the `Fs` seam.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from seglog.core.framing import (
    CheckpointMarkBody,
    FrameScanner,
    FrameType,
    RawFrame,
    WalFrame,
    encode_control,
    iter_raw,
)
from seglog.storage.fs import File, Fs, write_all_at

FILE_SIZE = 64 << 20
QUEUE_SIZE = 4096
TAKE_TIMEOUT_S = 0.05
SLICE_S = 0.0005
WINDOW_S = 0.010
FSYNC_BUCKETS_US = (50, 100, 250, 500, 1000, 5000, 10000, 50000, 100000)
log = logging.getLogger("seglog.wal")
_WAL_NAME = re.compile(r"wal-(\d{16})\.log")
_SHARD_DIR = re.compile(r"shard-(\d{2})")

Position = tuple[int, int]


class WalError(Exception):
    """A batch write or fsync failed: nothing of that submission is durable."""


class WalQueueFull(Exception):
    """The shard's submission queue is full; nothing was written."""


class WalReadOnly(WalError):
    """The shard could not create its next file and refuses every write."""


def wal_file_name(idx: int) -> str:
    return f"wal-{idx:016d}.log"


def group_key(shard: int, shards: int) -> str:
    return "" if shards == 1 else f"shard-{shard:02d}"


# One process-wide lock guards every Commit's tiny state transitions: creating a
# threading.Event (Condition + Lock) per commit cost more than the rest of a write.
_COMMIT_LOCK = threading.Lock()


class Commit:
    """Completion handle of one submission. `wait` blocks on a lock created only when
    somebody actually has to wait; callbacks run on the completing (writer) thread."""

    __slots__ = ("_callbacks", "_done", "_waiters", "error", "fsync_ms", "position", "wal_ms")

    def __init__(self) -> None:
        self._done = False
        self._waiters: list[threading.Lock] | None = None
        self._callbacks: list[Callable[[Commit], None]] | None = None
        self.error: BaseException | None = None
        self.wal_ms = 0.0
        self.fsync_ms = 0.0
        self.position: Position | None = None

    @classmethod
    def completed(cls) -> Commit:
        c = cls()
        c._done = True
        return c

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None = None) -> None:
        if not self._done:
            with _COMMIT_LOCK:
                if not self._done:
                    gate = threading.Lock()
                    gate.acquire()
                    if self._waiters is None:
                        self._waiters = []
                    self._waiters.append(gate)
                else:
                    gate = None
            if gate is not None and not gate.acquire(timeout=-1 if timeout is None else timeout):
                raise TimeoutError("WAL commit did not complete in time")
        if self.error is not None:
            raise self.error

    def add_done_callback(self, fn: Callable[[Commit], None]) -> None:
        with _COMMIT_LOCK:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

    def _complete(self, error: BaseException | None = None) -> None:
        self.error = error
        with _COMMIT_LOCK:
            self._done = True
            waiters, self._waiters = self._waiters, None
            callbacks, self._callbacks = self._callbacks, None
        if waiters:
            for gate in waiters:
                gate.release()
        if callbacks:
            for fn in callbacks:
                fn(self)


@dataclass
class WalMetrics:
    frames: int = 0
    batches: int = 0
    fsyncs: int = 0
    bytes_written: int = 0
    rotations: int = 0
    queue_depth: int = 0
    queue_depth_peak: int = 0
    submit_full_total: int = 0
    read_only: int = 0
    fsync_count: int = 0
    fsync_micros_total: int = 0
    fsync_hist: list[int] = field(default_factory=lambda: [0] * len(FSYNC_BUCKETS_US))


@dataclass(slots=True)
class _Submission:
    frames: list[bytes]
    durable: bool
    commit: Commit


class _Shard:
    def __init__(
        self, fs: Fs, directory: Path, file_size: int, queue_size: int, tail: Position | None
    ) -> None:
        self.fs = fs
        self.dir = directory
        self.file_size = file_size
        self.queue_size = queue_size
        self._pending: deque[_Submission] = deque()
        self._cv = threading.Condition(threading.Lock())
        self._idle = False
        self._stopping = False
        self._inflight: list[Commit] = []
        self.m = WalMetrics()
        self.read_only = False
        self.dirty = False
        self._lock = threading.Lock()  # guards `m` for readers on other threads
        fs.mkdir(directory)
        fs.fsync_dir(directory.parent)
        if tail is None:
            self.idx, self.tail = 1, 0
            self.file: File = self._create(1)
        else:
            self.idx, self.tail = tail
            self.file = fs.open(directory / wal_file_name(self.idx))
        self.thread = threading.Thread(
            target=self._run, name=f"seglog-wal-{directory.name}", daemon=True
        )

    def _create(self, idx: int, size: int = 0) -> File:
        path = self.dir / wal_file_name(idx)
        f = self.fs.open(path, create=True)
        f.truncate(max(self.file_size, size))
        f.sync()
        self.fs.fsync_dir(self.dir)
        return f

    # -- submission side --
    def submit(self, frames: list[bytes], durable: bool) -> Commit:
        if self.read_only:
            raise WalReadOnly(f"WAL shard {self.dir.name} is read-only")
        c = Commit()
        with self._cv:
            depth = len(self._pending)
            if depth >= self.queue_size or self._stopping:
                self.m.submit_full_total += 1
                raise WalQueueFull(f"WAL shard {self.dir.name} queue is full")
            self._pending.append(_Submission(frames, durable, c))
            if depth + 1 > self.m.queue_depth_peak:
                self.m.queue_depth_peak = depth + 1
            if self._idle:
                self._cv.notify()
        return c

    def queue_depth(self) -> int:
        return len(self._pending)

    def position(self) -> Position:
        return self.idx, self.tail

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()

    # -- writer thread --
    def _take(self, timeout: float | None) -> tuple[list[_Submission], bool]:
        """Everything queued (waiting up to `timeout` for the first), and whether to stop."""
        with self._cv:
            if not self._pending and not self._stopping and timeout:
                self._idle = True
                self._cv.wait(timeout)
                self._idle = False
            batch = list(self._pending)
            self._pending.clear()
            return batch, self._stopping

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:
            # The writer died (a bug, or a test's simulated power cut): nobody may wait
            # forever, and nothing more is accepted.
            self.read_only = True
            err = WalError(f"WAL writer {self.dir.name} stopped: {e!r}")
            with self._cv:
                pending = list(self._pending)
                self._pending.clear()
                self._stopping = True
            for sub in pending:
                sub.commit._complete(err)
            for c in self._inflight:
                if not c.done():
                    c._complete(err)
            if isinstance(e, Exception):
                log.exception("WAL writer %s stopped", self.dir.name)

    def _loop(self) -> None:
        while True:
            batch, stopping = self._take(TAKE_TIMEOUT_S)
            if not batch and not stopping:
                if self.dirty:
                    self._background_sync()
                continue
            if len(batch) > 1 and any(s.durable for s in batch) and not stopping:
                # Writers are arriving together: give the rest of the group a chance to
                # join this fsync (slices of 0.5 ms, at most 10 ms, stop on a quiet slice).
                deadline = time.perf_counter() + WINDOW_S
                while time.perf_counter() < deadline:
                    time.sleep(SLICE_S)
                    more, stopping = self._take(None)
                    batch.extend(more)
                    if not more or stopping:
                        break
            if batch:
                self._inflight = [sub.commit for sub in batch]
                self._commit(batch)
                self._inflight = []
            if stopping:
                rest, _ = self._take(None)
                if rest:
                    self._commit(rest)
                self._final_sync()
                return

    def _commit(self, batch: list[_Submission]) -> None:
        if self.read_only:
            ro = WalReadOnly(f"WAL shard {self.dir.name} is read-only")
            for s in batch:
                s.commit._complete(ro)
            return
        ends: list[int] = []
        parts: list[bytes] = []
        n = 0
        nframes = 0
        for s in batch:
            for fr in s.frames:
                parts.append(fr)
                n += len(fr)
            nframes += len(s.frames)
            ends.append(n)
        data = b"".join(parts)
        durable = any(s.durable for s in batch)
        t0 = time.perf_counter()
        try:
            if self.tail + len(data) > self._capacity():
                self._rotate(len(data))
            start = self.tail
            write_all_at(self.file, data, start)
            t1 = time.perf_counter()
            fsync_us = 0
            if durable:
                self.file.sync()
                fsync_us = int((time.perf_counter() - t1) * 1e6)
                self.dirty = False
            else:
                self.dirty = True
        except WalReadOnly as e:
            for s in batch:
                s.commit._complete(e)
            return
        except OSError as e:
            err = WalError(f"WAL write failed in {self.dir.name}: {e}")
            for s in batch:
                s.commit._complete(err)
            return
        self.tail = start + len(data)
        wal_ms = (t1 - t0) * 1000.0
        with self._lock:
            m = self.m
            m.frames += nframes
            m.batches += 1
            m.bytes_written += len(data)
            if durable:
                self._record_fsync(fsync_us)
        for s, end in zip(batch, ends, strict=True):
            c = s.commit
            c.wal_ms = wal_ms
            c.fsync_ms = fsync_us / 1000.0 if s.durable else 0.0
            c.position = (self.idx, start + end)
            c._complete()

    def _record_fsync(self, us: int) -> None:
        m = self.m
        m.fsyncs += 1
        m.fsync_count += 1
        m.fsync_micros_total += us
        for i, bound in enumerate(FSYNC_BUCKETS_US):
            if us <= bound:
                m.fsync_hist[i] += 1

    def _capacity(self) -> int:
        return max(self.file_size, self.file.size())

    def _rotate(self, need: int) -> None:
        self.file.sync()
        try:
            new = self._create(self.idx + 1, need)
        except OSError as e:
            self.read_only = True
            with self._lock:
                self.m.read_only = 1
            raise WalReadOnly(f"cannot create the next WAL file in {self.dir}: {e}") from e
        self.file.close()
        self.file = new
        self.idx += 1
        self.tail = 0
        with self._lock:
            self.m.rotations += 1

    def _background_sync(self) -> None:
        try:
            t0 = time.perf_counter()
            self.file.sync()
            with self._lock:
                self._record_fsync(int((time.perf_counter() - t0) * 1e6))
            self.dirty = False
        except OSError:
            pass  # buffered frames were acked as buffered; the next durable batch retries

    def _final_sync(self) -> None:
        with contextlib.suppress(OSError):
            self.file.sync()
        self.file.close()


class Wal:
    def __init__(
        self,
        fs: Fs,
        wal_dir: Path,
        shards: int,
        *,
        file_size: int = FILE_SIZE,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self.fs = fs
        self.wal_dir = wal_dir
        self.shards = max(1, shards)
        self.file_size = file_size
        self.queue_size = queue_size
        self._shards: list[_Shard] = []

    def group_dir(self, shard: int) -> Path:
        key = group_key(shard, self.shards)
        return self.wal_dir / key if key else self.wal_dir

    def open(self, tails: dict[str, Position] | None = None) -> None:
        tails = tails or {}
        self.fs.mkdir(self.wal_dir)
        shards: list[_Shard] = []
        try:
            for i in range(self.shards):
                key = group_key(i, self.shards)
                shards.append(
                    _Shard(self.fs, self.group_dir(i), self.file_size, self.queue_size, tails.get(key))
                )
        except BaseException:
            for s in shards:
                with contextlib.suppress(BaseException):
                    s.file.close()
            raise
        for s in shards:
            s.thread.start()
        self._shards = shards

    def shard_of(self, topic_id: int) -> int:
        if self.shards == 1 or topic_id == 0:
            return 0
        return xxhash.xxh3_64_intdigest(topic_id.to_bytes(8, "little")) % self.shards

    def submit(self, shard: int, frames: list[bytes], durable: bool) -> Commit:
        return self._shards[shard].submit(frames, durable)

    def checkpoint(self) -> dict[str, Position]:
        """A durable CheckpointMark on every shard; positions right after each mark."""
        commits = []
        for i, s in enumerate(self._shards):
            frame = encode_control(
                FrameType.CHECKPOINT_MARK,
                0,
                CheckpointMarkBody(0).encode(),
                int(time.time() * 1000),
                True,
            )
            commits.append((group_key(i, self.shards), s.submit([frame], True)))
        out: dict[str, Position] = {}
        for key, c in commits:
            c.wait()
            assert c.position is not None
            out[key] = c.position
        return out

    def delete_absorbed(self, positions: dict[str, Position]) -> None:
        current = {group_key(i, self.shards) for i in range(self.shards)}
        for g in discover_groups(self.fs, self.wal_dir):
            if g.key in current:
                pos = positions.get(g.key)
                if pos is None:
                    continue
                for idx, path in g.files:
                    if idx < pos[0]:
                        self.fs.unlink(path)
            else:
                for _idx, path in g.files:
                    self.fs.unlink(path)
                if g.key:
                    self.fs.rmtree(g.dir)
            self.fs.fsync_dir(g.dir if g.key in current else self.wal_dir)

    @property
    def bytes_written_total(self) -> int:
        return sum(s.m.bytes_written for s in self._shards)

    def metrics(self) -> WalMetrics:
        out = WalMetrics()
        for s in self._shards:
            with s._lock:
                m = s.m
                out.frames += m.frames
                out.batches += m.batches
                out.fsyncs += m.fsyncs
                out.bytes_written += m.bytes_written
                out.rotations += m.rotations
                out.queue_depth += s.queue_depth()
                out.queue_depth_peak = max(out.queue_depth_peak, m.queue_depth_peak)
                out.submit_full_total += m.submit_full_total
                out.read_only = max(out.read_only, m.read_only)
                out.fsync_count += m.fsync_count
                out.fsync_micros_total += m.fsync_micros_total
                out.fsync_hist = [a + b for a, b in zip(out.fsync_hist, m.fsync_hist, strict=True)]
        return out

    def close(self) -> None:
        for s in self._shards:
            s.stop()
        for s in self._shards:
            s.thread.join()
        self._shards = []


# ---- recovery-side reading -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WalGroup:
    key: str
    shard_no: int | None
    dir: Path
    files: list[tuple[int, Path]]


def _files(fs: Fs, d: Path) -> list[tuple[int, Path]]:
    out = []
    for name in fs.listdir(d):
        m = _WAL_NAME.fullmatch(name)
        if m:
            out.append((int(m.group(1)), d / name))
    return sorted(out)


def discover_groups(fs: Fs, wal_dir: Path) -> list[WalGroup]:
    groups: list[WalGroup] = []
    flat = _files(fs, wal_dir)
    if flat:
        groups.append(WalGroup("", None, wal_dir, flat))
    for name in sorted(fs.listdir(wal_dir)):
        m = _SHARD_DIR.fullmatch(name)
        if m and fs.is_dir(wal_dir / name):
            groups.append(
                WalGroup(name, int(m.group(1)), wal_dir / name, _files(fs, wal_dir / name))
            )
    return groups


def replay_order(groups: list[WalGroup], current_shards: int) -> list[WalGroup]:
    current = {group_key(i, current_shards) for i in range(current_shards)}
    stale = sorted((g for g in groups if g.key not in current), key=lambda g: g.key)
    live = sorted((g for g in groups if g.key in current), key=lambda g: g.shard_no or 0)
    return stale + live


def read_group(
    fs: Fs, group: WalGroup, start: Position = (1, 0)
) -> Iterator[tuple[int, int, WalFrame]]:
    """Valid frames after `start`, file by file, each file up to its first invalid frame."""
    start_idx, start_off = start
    for idx, path in group.files:
        if idx < start_idx:
            continue
        buf = fs.map_file(path)
        try:
            off = start_off if idx == start_idx else 0
            for _o, end, frame in FrameScanner(buf, off):
                yield idx, end, frame
        finally:
            close = getattr(buf, "close", None)
            if close is not None:
                with contextlib.suppress(BufferError):
                    close()


def read_group_raw(
    fs: Fs, group: WalGroup, start: Position = (1, 0)
) -> Iterator[tuple[int, RawFrame]]:
    """`read_group` for recovery's hot loop: `(file_idx, raw frame tuple)`."""
    start_idx, start_off = start
    for idx, path in group.files:
        if idx < start_idx:
            continue
        buf = fs.map_file(path)
        try:
            off = start_off if idx == start_idx else 0
            for raw in iter_raw(buf, off):
                yield idx, raw
        finally:
            close = getattr(buf, "close", None)
            if close is not None:
                with contextlib.suppress(BufferError):
                    close()


def valid_end(fs: Fs, path: Path) -> int:
    buf = fs.map_file(path)
    try:
        end = 0
        for raw in iter_raw(buf, 0):
            end = raw[0]
        return end
    finally:
        close = getattr(buf, "close", None)
        if close is not None:
            with contextlib.suppress(BufferError):
                close()


def truncate_tails(
    fs: Fs, groups: list[WalGroup], file_size: int = FILE_SIZE
) -> dict[str, Position]:
    """Cut each group's newest file at its logical end (zeroing what follows, so nothing
    past it can ever parse as a frame) and fsync it; returns the tails to append after."""
    tails: dict[str, Position] = {}
    for g in groups:
        if not g.files:
            continue
        idx, path = g.files[-1]
        end = valid_end(fs, path)
        f = fs.open(path)
        try:
            size = f.size()
            if size > end:
                f.truncate(end)
            f.truncate(max(file_size, end))
            f.sync()
        finally:
            f.close()
        tails[g.key] = (idx, end)
    return tails
