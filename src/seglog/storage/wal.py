"""The sharded write-ahead log with adaptive group commit (STORAGE §3.3–§3.5, §5.3, §6).

Each shard is one writer thread that owns its directory and active file; submissions
(an atomic list of frames, one durable flag, one `Commit`) arrive through a bounded queue.
The writer takes one submission, then everything queued, and writes it as one batch: a
lone durable write is synced at once, and whatever arrives during that fdatasync becomes
the next batch, so under load one fdatasync serves many writers. One write per batch at
the logical tail; on a write or sync error every handle of the batch fails and the tail
rewinds (later batches overwrite bytes nobody was told were durable).

Two things make "rewind" safe, and both are why a shard tracks more than its tail (and
both are repaired at once, before the failed handles complete: `_erase_failed`):
- *Stale frames past the tail.* A failed batch may have left complete, checksummed frames
  in the file; a shorter later batch would leave some of them right after the new tail,
  where recovery would replay them (with seqs the engine has since reused). So the next
  write is padded with zeros up to the failed batch's end (`_scrub_to`), and a rotation
  zeroes them before leaving the file.
- *A failed fsync may drop dirty pages silently* (Linux marks them clean), so a later
  successful fsync would vouch for bytes that are not on disk and recovery would stop at
  the hole, before later acked-durable frames. The shard therefore keeps every chunk it
  wrote since the last good fsync (bounded: it forces a sync every `SYNC_EVERY_BYTES` or
  `SYNC_EVERY_S`) and after any failure re-sends that whole window with the next write.
Both repairs are followed by an fsync in the same batch.

Threads: `Wal`'s methods may be called from any thread. A `_Shard`'s file state is owned
by its writer thread; `_cv` guards its queue, `_lock` its metrics. The writer never takes
engine locks and runs completion callbacks, which must not block.
All file access goes through the `Fs` seam.
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
    Buffer,
    CheckpointMarkBody,
    FrameScanner,
    FrameType,
    WalFrame,
    encode_control,
    valid_end,
)
from seglog.storage.fs import File, Fs, write_all_at

FILE_SIZE = 64 << 20
QUEUE_SIZE = 4096
TAKE_TIMEOUT_S = 0.05
SYNC_EVERY_BYTES = 8 << 20  # bounds the re-send window and what a crash can drop
SYNC_EVERY_S = 1.0
FSYNC_BUCKETS_US = (50, 100, 250, 500, 1000, 5000, 10000, 50000, 100000)
log = logging.getLogger("seglog.wal")
_WAL_NAME = re.compile(r"wal-(\d{16})\.log")
_SHARD_DIR = re.compile(r"shard-(\d{2})")

Position = tuple[int, int]  # (file idx, byte offset)


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
    somebody actually has to wait; callbacks run on the completing (writer) thread.
    `position` is `(file idx, offset right after the submission)` once it succeeded."""

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
        """A successful handle for callers that skip the WAL."""
        c = cls()
        c._done = True
        return c

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None = None) -> None:
        """Block until done; raise the batch's `WalError`, or `TimeoutError`."""
        gate = None
        if not self._done:
            with _COMMIT_LOCK:
                if not self._done:
                    gate = threading.Lock()
                    gate.acquire()
                    if self._waiters is None:
                        self._waiters = []
                    self._waiters.append(gate)
            if gate is not None and not gate.acquire(timeout=-1 if timeout is None else timeout):
                raise TimeoutError("WAL commit did not complete in time")
        if self.error is not None:
            raise self.error

    def add_done_callback(self, fn: Callable[[Commit], None]) -> None:
        """Run `fn(self)` on completion (now, on this thread, if already done)."""
        with _COMMIT_LOCK:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

    def _complete(self, error: BaseException | None = None) -> None:
        self.error = error  # published before `_done`, which readers check first
        with _COMMIT_LOCK:
            self._done = True
            waiters, self._waiters = self._waiters, None
            callbacks, self._callbacks = self._callbacks, None
        if waiters:
            for gate in waiters:
                gate.release()
        if callbacks:
            for fn in callbacks:
                try:
                    fn(self)
                except Exception:
                    # A broken callback must not kill the writer (and every later commit).
                    log.exception("WAL commit callback failed")


@dataclass
class WalMetrics:
    """Counters summed over shards. `fsync_hist[i]` counts fsyncs ≤ `FSYNC_BUCKETS_US[i]`
    µs (cumulative); the +Inf bucket is `fsync_count` and the sum `fsync_micros_total`."""

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

    def add(self, m: WalMetrics) -> None:
        self.frames += m.frames
        self.batches += m.batches
        self.fsyncs += m.fsyncs
        self.bytes_written += m.bytes_written
        self.rotations += m.rotations
        self.queue_depth += m.queue_depth
        self.queue_depth_peak = max(self.queue_depth_peak, m.queue_depth_peak)
        self.submit_full_total += m.submit_full_total
        self.read_only = max(self.read_only, m.read_only)
        self.fsync_count += m.fsync_count
        self.fsync_micros_total += m.fsync_micros_total
        self.fsync_hist = [a + b for a, b in zip(self.fsync_hist, m.fsync_hist, strict=True)]


@dataclass(slots=True)
class _Submission:
    frames: list[bytes]
    durable: bool
    commit: Commit


class _Shard:
    """One shard: its directory, active file, queue and writer thread."""

    def __init__(
        self,
        fs: Fs,
        directory: Path,
        file_size: int,
        queue_size: int,
        tail: Position | None,
        idle_sync: bool,
    ) -> None:
        self.fs = fs
        self.dir = directory
        self.file_size = file_size
        self.queue_size = queue_size
        self.idle_sync = idle_sync
        self._pending: deque[_Submission] = deque()
        self._cv = threading.Condition(threading.Lock())
        self._idle = False
        self._stopping = False
        self._inflight: list[Commit] = []
        self.m = WalMetrics()
        self._lock = threading.Lock()  # guards `m` for readers on other threads
        self.read_only = False
        # Writer-owned file state: [synced, tail) was written but is not yet known
        # durable and is held in `_unsynced`; `_resend` after a failure; stale bytes
        # of failed batches may sit in [tail, _scrub_to).
        self.idx, self.tail = self._open_tail(tail)
        self.synced = self.tail
        self._unsynced: list[bytes] = []
        self._unsynced_bytes = 0
        self._resend = False
        self._scrub_to = 0
        self._last_sync = time.monotonic()
        self._bg_failing = False  # log a failing background sync once, not every 50 ms
        self.thread = threading.Thread(
            target=self._run, name=f"seglog-wal-{directory.name}", daemon=True
        )

    def _open_tail(self, tail: Position | None) -> Position:
        files = _files(self.fs, self.dir)
        if tail is None and not files:
            self.file, self.cap = self._create(1, 0)
            return 1, 0
        if tail is None:
            # Nobody told us where the valid log ends: find it ourselves, exactly as
            # recovery would, rather than overwrite or trust unvalidated bytes.
            tail = _seal_tail(self.fs, files[-1][0], files[-1][1], self.file_size, None)
        if files and files[-1][0] != tail[0]:
            raise ValueError(f"WAL tail {tail} in {self.dir} is not in the newest file")
        self.file = self.fs.open(self.dir / wal_file_name(tail[0]))
        self.cap = max(self.file_size, self.file.size())
        return tail

    def _create(self, idx: int, need: int) -> tuple[File, int]:
        """A new preallocated file, durable (file + directory) before any use."""
        size = max(self.file_size, need)
        f = self.fs.open(self.dir / wal_file_name(idx), create=True)
        try:
            f.truncate(size)
            f.sync()
            self.fs.fsync_dir(self.dir)
        except BaseException:
            f.close()
            raise
        return f, size

    # -- submission side (any thread) --
    def submit(self, frames: list[bytes], durable: bool) -> Commit:
        if self.read_only:
            raise WalReadOnly(f"WAL shard {self.dir.name} is read-only")
        c = Commit()
        with self._cv:
            if self._stopping:
                raise WalError(f"WAL shard {self.dir.name} is closed")
            depth = len(self._pending)
            if depth >= self.queue_size:
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
            with self._lock:
                self.m.read_only = 1
            err = WalError(f"WAL writer {self.dir.name} stopped: {e!r}")
            with self._cv:
                pending = list(self._pending)
                self._pending.clear()
                self._stopping = True
            for c in [*self._inflight, *(s.commit for s in pending)]:
                if not c.done():
                    c._complete(err)
            if isinstance(e, Exception):
                log.exception("WAL writer %s stopped", self.dir.name)

    def _loop(self) -> None:
        while True:
            batch, stopping = self._take(TAKE_TIMEOUT_S)
            if not batch and not stopping:
                if self.idle_sync and self._dirty():
                    self._background_sync()
                continue
            # No gathering window: whatever queued while the previous fdatasync ran is
            # the next group, so the group size follows the load by itself. A sleeping
            # window measured slower (it waited on writers that were waiting on it).
            if batch:
                self._inflight = [sub.commit for sub in batch]
                self._commit(batch)
                self._inflight = []
            if stopping:
                rest, _ = self._take(None)  # submit refuses once stopping; belt and braces
                if rest:
                    self._commit(rest)
                self._background_sync()
                self.file.close()
                return

    def _commit(self, batch: list[_Submission]) -> None:
        if self.read_only:
            ro = WalReadOnly(f"WAL shard {self.dir.name} is read-only")
            for s in batch:
                s.commit._complete(ro)
            return
        parts: list[bytes] = []
        ends: list[int] = []
        n = 0
        for s in batch:
            parts.extend(s.frames)
            n += sum(map(len, s.frames))
            ends.append(n)
        data = b"".join(parts)
        # A repair (re-send or scrub) is only trusted once fsynced: sync this batch too.
        durable = self._resend or bool(self._scrub_to) or any(s.durable for s in batch)
        t0 = time.perf_counter()
        try:
            if self.tail + len(data) > self.cap:
                self._rotate(len(data))
            start = self.tail
            self._write(data)
            t1 = time.perf_counter()
            fsync_us = 0
            if durable:
                try:
                    fsync_us = self._sync()
                except OSError:
                    self._rewind(start, data)
                    raise
        except WalError as e:
            self._fail(batch, e)
            return
        except OSError as e:
            self._fail(batch, WalError(f"WAL write failed in {self.dir.name}: {e}"))
            return
        wal_ms = (t1 - t0) * 1000.0
        fsync_ms = fsync_us / 1000.0
        with self._lock:
            self.m.frames += sum(len(s.frames) for s in batch)
            self.m.batches += 1
            self.m.bytes_written += len(data)
        for s, end in zip(batch, ends, strict=True):
            c = s.commit
            c.wal_ms = wal_ms
            c.fsync_ms = fsync_ms
            c.position = (self.idx, start + end)
            c._complete()
        if not durable and (
            self._unsynced_bytes >= SYNC_EVERY_BYTES
            or time.monotonic() - self._last_sync >= SYNC_EVERY_S
        ):
            self._background_sync()

    def _fail(self, batch: list[_Submission], err: WalError) -> None:
        """Fail every handle of the batch, after erasing what it may have left (§3.5)."""
        if not self._erase_failed():
            err = WalReadOnly(
                f"{err}; the failed bytes could not be erased, so the shard is read-only and "
                "this write may reappear after a restart (outcome unknown)"
            )
        for s in batch:
            s.commit._complete(err)

    def _erase_failed(self) -> bool:
        """A failed batch's bytes must not resurface after a restart (a 500 means nothing
        was applied): zero them now — re-sending the unsynced window a failed fsync may have
        dropped — and sync, before any handle fails. If that fails too, latch read-only
        (nothing more may be written behind bytes we could not erase). False then."""
        if self.read_only:
            return False
        if not (self._resend or self._scrub_to):
            return True
        try:
            self._write(b"")
            self._sync()
        except OSError as e:
            self.read_only = True
            with self._lock:
                self.m.read_only = 1
            log.error("WAL shard %s: could not erase a failed batch (%s); read-only", self.dir, e)
            return False
        return True

    def _write(self, data: bytes) -> None:
        """One write of `data` at the tail, advancing it. After a failure the write also
        re-sends the unsynced window and zeroes stale bytes of failed batches. On error the
        tail stays put (the rewind) and what the write may have touched is remembered."""
        start = self.tail
        end = start + len(data)
        at, payload = start, data
        if self._resend and self._unsynced:
            at, payload = self.synced, b"".join([*self._unsynced, data])
        if self._scrub_to > end:
            payload += bytes(self._scrub_to - end)
        try:
            if payload:
                write_all_at(self.file, payload, at)
        except BaseException:
            self._resend = True
            self._scrub_to = max(self._scrub_to, end)
            raise
        self._resend = False
        self._scrub_to = 0
        self.tail = end
        if data:
            self._unsynced.append(data)
            self._unsynced_bytes += len(data)

    def _rewind(self, start: int, data: bytes) -> None:
        """Undo a written batch whose fsync failed: its frames are stale bytes now."""
        if data:
            self._unsynced.pop()
            self._unsynced_bytes -= len(data)
        self._scrub_to = max(self._scrub_to, start + len(data))
        self.tail = start

    def _sync(self) -> int:
        """fdatasync the active file; on success everything below the tail is durable.
        Returns the µs it took (also recorded in the metrics)."""
        t0 = time.perf_counter()
        try:
            self.file.sync()
        except BaseException:
            # Linux may have dropped the dirty pages: the window must be written again.
            self._resend = True
            raise
        us = int((time.perf_counter() - t0) * 1e6)
        self.synced = self.tail
        self._unsynced.clear()
        self._unsynced_bytes = 0
        self._last_sync = time.monotonic()
        with self._lock:
            m = self.m
            m.fsyncs += 1
            m.fsync_count += 1
            m.fsync_micros_total += us
            for i, bound in enumerate(FSYNC_BUCKETS_US):
                if us <= bound:
                    m.fsync_hist[i] += 1
        return us

    def _dirty(self) -> bool:
        return self.tail > self.synced or self._resend or bool(self._scrub_to)

    def _rotate(self, need: int) -> None:
        """Make the active file sound and durable, then switch to a new preallocated one.
        Failing to sync the old file fails only this batch; failing to create the new one
        latches the shard read-only (there is nowhere left to write)."""
        if self._resend or self._scrub_to:
            self._write(b"")
        self._sync()
        try:
            new, cap = self._create(self.idx + 1, need)
        except OSError as e:
            self.read_only = True
            with self._lock:
                self.m.read_only = 1
            raise WalReadOnly(f"cannot create the next WAL file in {self.dir}: {e}") from e
        self.file.close()
        self.file, self.cap = new, cap
        self.idx += 1
        self.tail = self.synced = 0
        with self._lock:
            self.m.rotations += 1

    def _background_sync(self) -> None:
        """Make buffered frames durable (idle, periodic, shutdown). A failure is only
        remembered: those frames were acked as buffered, and the next write re-sends them."""
        if not self._dirty():
            return
        try:
            if self._resend or self._scrub_to:
                self._write(b"")
            self._sync()
        except OSError as e:
            if not self._bg_failing:
                log.warning("WAL background sync failed in %s: %s", self.dir, e)
            self._bg_failing = True
            return
        self._bg_failing = False


def _files(fs: Fs, d: Path) -> list[tuple[int, Path]]:
    out = []
    for name in fs.listdir(d):
        m = _WAL_NAME.fullmatch(name)
        if m:
            out.append((int(m.group(1)), d / name))
    return sorted(out)


def _shard_dir(wal_dir: Path, shard: int, shards: int) -> Path:
    key = group_key(shard, shards)
    return wal_dir / key if key else wal_dir


class Wal:
    """The sharded WAL. `open` starts one writer per shard; `submit` never blocks."""

    def __init__(
        self,
        fs: Fs,
        wal_dir: Path,
        shards: int,
        *,
        file_size: int = FILE_SIZE,
        queue_size: int = QUEUE_SIZE,
        idle_sync: bool = True,
    ) -> None:
        self.fs = fs
        self.wal_dir = wal_dir
        self.shards = max(1, shards)
        self.file_size = file_size
        self.queue_size = queue_size
        self.idle_sync = idle_sync  # tests turn the timing-dependent idle fsync off
        self._shards: list[_Shard] = []
        self._open = False

    def group_dir(self, shard: int) -> Path:
        return _shard_dir(self.wal_dir, shard, self.shards)

    def open(self, tails: dict[str, Position] | None = None) -> None:
        """Start the writers, each appending after its group's valid tail (`truncate_tails`
        guarantees nothing past it parses as a frame). A group without files gets a fresh,
        durable `wal-0000000000000001.log`; with files but no tail, its tail is found here."""
        tails = tails or {}
        fs = self.fs
        fs.mkdir(self.wal_dir)
        fs.fsync_dir(self.wal_dir.parent)
        shards: list[_Shard] = []
        try:
            for i in range(self.shards):
                d = self.group_dir(i)
                if d != self.wal_dir:
                    fs.mkdir(d)
                    fs.fsync_dir(self.wal_dir)
                tail = tails.get(group_key(i, self.shards))
                shards.append(_Shard(fs, d, self.file_size, self.queue_size, tail, self.idle_sync))
        except BaseException:
            for s in shards:
                with contextlib.suppress(Exception):
                    s.file.close()
            raise
        for s in shards:
            s.thread.start()
        self._shards = shards
        self._open = True

    def shard_of(self, topic_id: int) -> int:
        if self.shards == 1 or topic_id == 0:
            return 0
        return int(xxhash.xxh3_64_intdigest(topic_id.to_bytes(8, "little")) % self.shards)

    def submit(self, shard: int, frames: list[bytes], durable: bool) -> Commit:
        """Queue one atomic submission. Raises `WalQueueFull` (nothing written),
        `WalReadOnly`, or `WalError` once closed."""
        if not self._open:
            raise WalError("WAL is not open")
        return self._shards[shard].submit(frames, durable)

    def checkpoint(self, ts_ms: int) -> dict[str, Position]:
        """§5.3 steps 1–2: a durable CheckpointMark on every shard; returns each group's
        position right after its mark. Groups on disk that the current layout does not use
        (an earlier shard count) get the end of their valid log: everything in them was
        replayed before the writers opened, so the snapshot absorbs all of it."""
        frame = encode_control(
            FrameType.CHECKPOINT_MARK, 0, CheckpointMarkBody(0).encode(), ts_ms, True
        )
        commits: list[tuple[str, Commit]] = []
        for i in range(self.shards):
            try:
                commits.append((group_key(i, self.shards), self.submit(i, [frame], True)))
            except WalQueueFull as e:
                raise WalError(f"checkpoint not queued: {e}") from e
        out: dict[str, Position] = {}
        for key, c in commits:
            c.wait()
            assert c.position is not None
            out[key] = c.position
        for g in discover_groups(self.fs, self.wal_dir):
            if g.key not in out and g.files:
                idx, path = g.files[-1]
                out[g.key] = (idx, _file_valid_end(self.fs, path))
        return out

    def delete_absorbed(self, needed: dict[str, Position] | None) -> None:
        """§5.3 step 7, given `needed`: the positions the older kept snapshot replays from
        (None: there is no older snapshot, so a fallback replays everything and every file
        stays). Per group, files numbered below its position go; a group the current layout
        does not use goes whole once that position is at its end; a group the older
        snapshot does not know is kept whole (it replays it from the start). Best effort:
        a failure is logged and retried by the next snapshot."""
        if needed is None:
            return
        current = {group_key(i, self.shards) for i in range(self.shards)}
        fs = self.fs
        for g in discover_groups(fs, self.wal_dir):
            pos = needed.get(g.key)
            if pos is None or not g.files:
                continue
            try:
                last_idx, last_path = g.files[-1]
                if g.key not in current and pos >= (last_idx, _file_valid_end(fs, last_path)):
                    for _idx, path in g.files:
                        fs.unlink(path)
                    if g.key:
                        fs.rmtree(g.dir)
                    fs.fsync_dir(self.wal_dir)
                    continue
                doomed = [p for idx, p in g.files if idx < pos[0]]
                for path in doomed:
                    fs.unlink(path)
                if doomed:
                    fs.fsync_dir(g.dir)
            except OSError as e:
                log.warning("could not delete absorbed WAL files in %s: %s", g.dir, e)

    @property
    def bytes_written_total(self) -> int:
        return sum(s.m.bytes_written for s in self._shards)

    def metrics(self) -> WalMetrics:
        out = WalMetrics()
        for s in self._shards:
            with s._lock:
                out.add(s.m)
            out.queue_depth += s.queue_depth()
        return out

    def close(self) -> None:
        """Stop accepting, commit everything accepted, fsync, join the writers."""
        self._open = False
        for s in self._shards:
            s.stop()
        for s in self._shards:
            s.thread.join()


# ---- recovery-side reading -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WalGroup:
    """One WAL directory: `key` "" for `wal/`, "shard-NN" for `wal/shard-NN/`; `files` is
    `(idx, path)` ascending."""

    key: str
    shard_no: int | None
    dir: Path
    files: list[tuple[int, Path]]


def discover_groups(fs: Fs, wal_dir: Path) -> list[WalGroup]:
    """`wal/` if it holds `wal-*.log`, then every `wal/shard-NN/` (even empty ones)."""
    groups: list[WalGroup] = []
    flat = _files(fs, wal_dir)
    if flat:
        groups.append(WalGroup("", None, wal_dir, flat))
    for name in sorted(fs.listdir(wal_dir)):
        m = _SHARD_DIR.fullmatch(name)
        if m and fs.is_dir(wal_dir / name):
            d = wal_dir / name
            groups.append(WalGroup(name, int(m.group(1)), d, _files(fs, d)))
    return groups


def replay_order(groups: list[WalGroup], current_shards: int) -> list[WalGroup]:
    """§6 step 3: groups the current layout does not use first, then current ones; each
    part by shard number (the flat group first)."""
    current = {group_key(i, max(1, current_shards)) for i in range(max(1, current_shards))}

    def by_shard(g: WalGroup) -> int:
        return -1 if g.shard_no is None else g.shard_no

    stale = sorted((g for g in groups if g.key not in current), key=by_shard)
    live = sorted((g for g in groups if g.key in current), key=by_shard)
    return stale + live


@contextlib.contextmanager
def _mapped(fs: Fs, path: Path) -> Iterator[Buffer]:
    buf = fs.map_file(path)
    try:
        yield buf
    finally:
        close = getattr(buf, "close", None)
        if close is not None:
            with contextlib.suppress(BufferError):
                close()


def _group_files(group: WalGroup, start: Position) -> Iterator[tuple[int, Path, int]]:
    """`(idx, path, scan offset)` of the files at or after `start`. The start offset is a
    frame end recorded by a checkpoint, so scanning from it equals scanning from 0 and
    skipping frames that end at or before it, without reading the absorbed prefix."""
    start_idx, start_off = start
    for idx, path in group.files:
        if idx >= start_idx:
            yield idx, path, start_off if idx == start_idx else 0


def read_group(
    fs: Fs, group: WalGroup, start: Position = (1, 0)
) -> Iterator[tuple[int, int, WalFrame]]:
    """`(file idx, frame end, frame)` after `start`, each file up to its first invalid
    frame. Streams: one mapped file and one chunk of frames at a time."""
    for idx, path, off in _group_files(group, start):
        with _mapped(fs, path) as buf:
            it = FrameScanner(buf, off).__iter__()
            try:
                for _o, end, frame in it:
                    yield idx, end, frame
            finally:
                it.close()  # releases the view before unmapping


def _file_valid_end(fs: Fs, path: Path) -> int:
    with _mapped(fs, path) as buf:
        return valid_end(buf)


def _seal_tail(fs: Fs, idx: int, path: Path, file_size: int, end: int | None) -> Position:
    """Cut `path` at its logical end and re-extend it to its preallocated size: the
    re-extended bytes read as zeros, so garbage past the end (a torn frame, stale frames of
    a failed batch) can never parse later. Cheaper than writing zeros over up to 64 MiB,
    and fdatasync covers the size/extent change. `end`, when known from replay, saves a scan."""
    if end is None:
        end = _file_valid_end(fs, path)
    f = fs.open(path)
    try:
        size = f.size()
        if size > end:
            f.truncate(end)
        f.truncate(max(file_size, end))
        f.sync()
    finally:
        f.close()
    return idx, end


def truncate_tails(
    fs: Fs,
    groups: list[WalGroup],
    file_size: int = FILE_SIZE,
    known_ends: dict[str, Position] | None = None,
) -> dict[str, Position]:
    """§6 step 6: seal each group's newest file at its valid length (see `_seal_tail`) and
    fsync it; returns `{key: (idx, valid end)}` to pass to `Wal.open`. `known_ends` (from
    `read_group_raw`) spares scanning files replay has just scanned."""
    tails: dict[str, Position] = {}
    known = known_ends or {}
    for g in groups:
        if g.files:
            idx, path = g.files[-1]
            k = known.get(g.key)
            tails[g.key] = _seal_tail(fs, idx, path, file_size, k[1] if k and k[0] == idx else None)
    return tails
