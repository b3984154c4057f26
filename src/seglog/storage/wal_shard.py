"""One WAL shard: its writer thread, adaptive group commit, failure repair and rotation
(STORAGE §3.3, §3.5).

Each shard has one writer thread; submissions (an atomic list of frames, one durable
flag, one `Commit`) arrive through a bounded queue.
The writer takes one submission, then everything queued, and writes it as one batch: a
lone durable write is synced at once, and whatever arrives during that fdatasync becomes
the next batch, so under load one fdatasync serves many writers. One write per batch at
the logical tail; on a write or sync error every handle of the batch fails and the tail
rewinds (later batches overwrite bytes nobody was told were durable).

Two things make "rewind" safe, and both are why a shard tracks more than its tail (and
both are repaired at once, before the failed handles complete: `_erase_failed`):
- *Stale frames past the tail.* A failed batch may have left complete, checksummed frames
  in the file; a shorter later batch would leave some of them right after the new tail,
  where recovery would replay them as if they had succeeded (a `500` that comes back). So
  the failed range is zeroed up to the failed batch's end (`_scrub_to`) before the error
  is reported, and a rotation zeroes any left before leaving the file.
- *A failed fsync may drop dirty pages silently* (Linux marks them clean), so a later
  successful fsync would vouch for bytes that are not on disk and recovery would stop at
  the hole, before later acked-durable frames. The shard therefore keeps every chunk it
  wrote since the last good fsync (bounded: it forces a sync every `SYNC_EVERY_BYTES` or
  `SYNC_EVERY_S`) and after any failure re-sends that whole window with the next write.
Both repairs are followed by an fsync in the same batch.

Two shortcuts. A buffered (non-durable) submission that finds the queue empty and the
writer idle is written by the submitting thread itself, the same `_commit` under the same
lock (`submit`). A small `disk` or `memory` write then costs one pwrite instead of two
thread wake-ups, which were most of its latency. Fsyncs, rotations, the periodic sync and
large submissions stay with the writer there; the repair after a failed inline write
(zero the range, fsync) runs on the failing submitter before its error is reported, as it
would on the writer. And a thread (not the main thread) about to block on a commit takes
the whole queue and commits it itself when the file is free (`commit_here`, from
`Commit.wait`): everything the writer would do with that batch, fsync and rotation
included, runs on that thread instead.

Threads: the file state belongs to whoever holds `_file_lock` (the writer for each batch
it takes, an inline submitter, or a waiter in `commit_here`); `_cv` guards the queue,
`_lock` the metrics. Lock order: `_file_lock` before `_cv`. A submitter holding `_cv`
only *tries* `_file_lock`, and the writer takes `_file_lock` without holding `_cv`: while
anything is queued no inline write can start, so the writer waits for one in progress,
then takes the queue. `submit`,
`queue_depth`, `add_metrics_to` and `stop` may be called from any thread and never wait
for a write. The shard never takes engine locks (an inline write runs under the
submitter's, which the writer never needs) and runs completion callbacks, which must not
block. All file access goes through the `Fs` seam.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from seglog.storage.fs import File, Fs, write_all_at
from seglog.storage.wal_commit import Commit, WalError, WalQueueFull, WalReadOnly
from seglog.storage.wal_files import Position, list_files, seal_tail, wal_file_name
from seglog.storage.wal_metrics import FSYNC_BUCKETS_US, WalMetrics

QUEUE_SIZE = 4096
TAKE_TIMEOUT_S = 0.05
SYNC_EVERY_BYTES = 8 << 20  # bounds the re-send window and what a crash can drop
SYNC_EVERY_S = 1.0
# Larger buffered submissions go through the writer even when it is idle: the two thread
# wake-ups saved are a small share of their cost, and a big pwrite that the kernel
# throttles (dirty-page writeback) should stall the writer, not the submitter's loop.
INLINE_MAX_BYTES = 64 << 10
log = logging.getLogger("seglog.wal")


@dataclass(slots=True)
class _Submission:
    frames: list[bytes]
    durable: bool
    commit: Commit


class WalShard:
    """One shard: its directory, active file, queue and writer thread."""

    def __init__(
        self,
        fs: Fs,
        directory: Path,
        file_size: int,
        queue_size: int,
        tail: Position | None,
        idle_sync: bool,
        inline_buffered: bool = True,
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
        # Whoever writes the file holds `_file_lock`: the writer thread for the batch it
        # takes (`_take`), or a submitting thread writing its buffered submission inline
        # (`submit`).
        self._file_lock = threading.Lock()
        self.inline_buffered = inline_buffered
        self.m = WalMetrics()
        self._lock = threading.Lock()  # guards `m` for readers on other threads
        self.read_only = False
        # File state (under `_file_lock`): [synced, tail) was written but is not yet known
        # durable and is held in `_unsynced` (since `_dirty_since`); `_resend` after a
        # failure; stale bytes of failed batches may sit in [tail, _scrub_to).
        self.idx, self.tail = self._open_tail(tail)
        self.synced = self.tail
        self._unsynced: list[bytes] = []
        self._unsynced_bytes = 0
        self._resend = False
        self._scrub_to = 0
        self._dirty_since = 0.0  # when the oldest unsynced byte was written
        self._last_inline = 0.0  # when a submitter last wrote inline (idle syncs wait)
        self._bg_failing = False  # log a failing background sync once, not every 50 ms
        # Group-commit gathering window, 0 = none (the default: measured faster). The
        # delivery scheduler widens it under pressure, trading ack latency for fewer
        # write/fsync calls per record so the event loop gets the CPU back.
        self.gather_s = 0.0
        self.thread = threading.Thread(
            target=self._run, name=f"seglog-wal-{directory.name}", daemon=True
        )

    def _open_tail(self, tail: Position | None) -> Position:
        files = list_files(self.fs, self.dir)
        if tail is None and not files:
            self.file, self.cap = self._create(1, 0)
            return 1, 0
        if tail is None:
            # Nobody told us where the valid log ends: find it ourselves, exactly as
            # recovery would, rather than overwrite or trust unvalidated bytes.
            tail = seal_tail(self.fs, files[-1][0], files[-1][1], self.file_size, None)
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
    def submit(self, frames: list[bytes], durable: bool, wake: bool = True) -> Commit:
        """Queue (or write inline) one atomic submission. `wake=False`: the submitter will
        block on the commit (`Commit.wait`), which writes the queue on its own thread when
        the writer is idle (`commit_here`), so waking the writer now would only race it."""
        if self.read_only:
            raise WalReadOnly(f"WAL shard {self.dir.name} is read-only")
        if not wake and threading.current_thread() is threading.main_thread():
            wake = True  # its wait will not write the queue (`commit_here`): wake now
        c = Commit()
        with self._cv:
            if self._stopping:
                raise WalError(f"WAL shard {self.dir.name} is closed")
            depth = len(self._pending)
            # A buffered submission that finds the writer idle and nothing queued is written
            # here, by its caller: one pwrite into the page cache instead of two thread
            # wake-ups (this one's to the writer and the writer's back), the largest cost
            # of a small `disk` write. Order holds: only an empty queue lets a submission
            # in, and the writer holds `_file_lock` from before it takes a batch until
            # that batch is written, so no earlier submission can still be unwritten.
            if (
                durable
                or depth
                or not self.inline_buffered
                or not self._file_lock.acquire(blocking=False)
            ):
                self._queue(frames, durable, c, depth, wake)
                return c
            if not self._inline_fits(frames):
                self._file_lock.release()
                self._queue(frames, durable, c, depth, wake)
                return c
        failure: BaseException | None = None
        try:
            self._commit([_Submission(frames, False, c)], inline=True)
        except BaseException as e:  # a bug, or a test's simulated power cut
            failure = e
            # Latched before the file is let go: a batch the writer takes from now on
            # fails as read-only (exactly once, by the writer), never half-written.
            self.read_only = True
        finally:
            self._file_lock.release()  # before `_die`, which takes `_cv`
        if failure is not None:
            self._die(failure, [c])
            raise failure
        return c

    def _inline_fits(self, frames: list[bytes]) -> bool:
        """Under `_file_lock`: may this buffered submission be written by its caller now?
        Only a small plain write at the tail: anything that may block (a rotation's new
        file and fsyncs, a repair, a periodic sync, a large write) stays on the writer."""
        size = sum(map(len, frames))
        now = time.monotonic()
        fits = (
            size <= INLINE_MAX_BYTES
            and not self.read_only
            and not self._resend
            and not self._scrub_to
            and self.gather_s <= 0
            and self.tail + size <= self.cap
            and self._unsynced_bytes + size < SYNC_EVERY_BYTES
            and (not self._unsynced or now - self._dirty_since < SYNC_EVERY_S)
        )
        if fits:
            self._last_inline = now
        return fits

    def _queue(
        self, frames: list[bytes], durable: bool, c: Commit, depth: int, wake: bool = True
    ) -> None:
        """Under `_cv`: hand the submission to the writer thread (waking it if `wake`)."""
        if depth >= self.queue_size:
            self.m.submit_full_total += 1
            raise WalQueueFull(f"WAL shard {self.dir.name} queue is full")
        c._run_here = self.commit_here
        self._pending.append(_Submission(frames, durable, c))
        if depth + 1 > self.m.queue_depth_peak:
            self.m.queue_depth_peak = depth + 1
        if self._idle and wake:
            self._cv.notify()

    def _wake(self) -> None:
        with self._cv:
            if self._idle:
                self._cv.notify()

    def commit_here(self, c: Commit) -> None:
        """Called by a thread about to block on `c` (`Commit.wait`): if the file is free,
        write (and fsync, if any is durable) everything queued, `c`'s submission among it,
        here — the writer's own `_commit` under the same lock, in queue order — instead of
        waking the writer and waiting to be woken. Wakes the writer instead when the file
        is held (by the writer or an inline write), the shard is read-only or stopping,
        the group commit window is widened (then the writer gathers), or this is the main
        thread (where signal handlers run: see the condition); does nothing when `c` is
        done. Whatever kills the write here kills the shard as it would kill the writer
        (`_die`: every handle of the batch fails); only a `BaseException` that is not an
        `Exception` (an interrupt, a test's simulated power cut) is re-raised, as an
        inline write re-raises it."""
        if c.done():
            return
        if (
            self.gather_s > 0
            or self.read_only
            # Python runs signal handlers (KeyboardInterrupt, a SIGTERM handler's exit) on
            # the main thread, between any two bytecodes: one landing inside `_commit`,
            # after the batch reached the disk, would fail other callers' writes that
            # come back after a restart. The writer and other threads never see them.
            or threading.current_thread() is threading.main_thread()
            or not self._file_lock.acquire(blocking=False)
        ):
            self._wake()  # `c` may have been queued without waking the writer
            return
        failure: BaseException | None = None
        batch: list[_Submission] = []
        try:
            with self._cv:
                if self._stopping:
                    self._cv.notify()
                    return
                batch = list(self._pending)
                self._pending.clear()
            if batch:
                # Recent activity, as an inline write's: the writer, woken for this queue
                # and finding it empty, must not take that for idleness and sync now.
                self._last_inline = time.monotonic()
                try:
                    self._commit(batch)
                except BaseException as e:
                    failure = e
                    # As after an inline death: a batch the writer takes from now on fails
                    # as read-only, never half-written.
                    self.read_only = True
        finally:
            self._file_lock.release()  # before `_die`, which takes `_cv`
        if failure is not None:
            self._die(failure, [sub.commit for sub in batch])
            if not isinstance(failure, Exception):
                raise failure

    def queue_depth(self) -> int:
        return len(self._pending)

    def add_metrics_to(self, out: WalMetrics) -> None:
        """Add this shard's counters and current queue depth to `out`."""
        with self._lock:
            out.add(self.m)
        out.queue_depth += self.queue_depth()

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()

    # -- writer thread --
    def _take(self, timeout: float | None) -> tuple[list[_Submission], bool]:
        """Everything queued (waiting up to `timeout` for the first), and whether to stop.
        A non-empty batch comes with `_file_lock` held, for the caller to release."""
        with self._cv:
            if not self._pending and not self._stopping and timeout:
                self._idle = True
                self._cv.wait(timeout)
                self._idle = False
            if not self._pending:
                return [], self._stopping
        # Something is queued, so no inline write can start until it is taken: wait for
        # one in progress here, not holding `_cv` (submitters never wait for a write).
        self._file_lock.acquire()
        with self._cv:
            batch = list(self._pending)
            self._pending.clear()
            stopping = self._stopping
        if not batch:  # an inline death failed the queue meanwhile
            self._file_lock.release()
        return batch, stopping

    def _gather(self, window_s: float) -> list[_Submission]:
        """What else is submitted within `window_s` (the widened group-commit window)."""
        deadline = time.monotonic() + window_s
        more: list[_Submission] = []
        with self._cv:
            while not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle = True
                self._cv.wait(left)
                self._idle = False
            more.extend(self._pending)
            self._pending.clear()
        return more

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:
            self._die(e)

    def _die(self, e: BaseException, held: list[Commit] | None = None) -> None:
        """The writer (or a write on a submitter's thread: `held` are its commits) died (a
        bug, or a test's simulated power cut): nobody may wait forever, and nothing more is
        accepted. After such a death on another thread the writer lives on and fails
        whatever batch it holds itself (read-only), so only the queue and `held` are
        failed here."""
        self.read_only = True
        with self._lock:
            self.m.read_only = 1
        err = WalError(f"WAL writer {self.dir.name} stopped: {e!r}")
        with self._cv:
            pending = list(self._pending)
            self._pending.clear()
            self._stopping = True
            self._cv.notify()
        if held is None:
            held = self._inflight
        for c in [*held, *(s.commit for s in pending)]:
            if not c.done():
                c._complete(err)
        if isinstance(e, Exception):
            log.error("WAL writer %s stopped", self.dir.name, exc_info=e)

    def _loop(self) -> None:
        while True:
            batch, stopping = self._take(TAKE_TIMEOUT_S)
            if not batch and not stopping:
                if self.idle_sync:
                    with self._file_lock:
                        # Idle means no inline writes either: a steady stream of them
                        # is synced every SYNC_EVERY_S (they are refused once it is due,
                        # and the writer's commit syncs), not at every empty take.
                        recent = time.monotonic() - self._last_inline < TAKE_TIMEOUT_S
                        if self._dirty() and not recent:
                            self._background_sync()
                continue
            if not batch:
                self._file_lock.acquire()
            try:
                # No gathering window: whatever queued while the previous fdatasync ran is
                # the next group, so the group size follows the load by itself. A sleeping
                # window measured slower (it waited on writers that were waiting on it).
                if batch and self.gather_s > 0 and not stopping:
                    batch.extend(self._gather(self.gather_s))
                if batch:
                    self._inflight = [sub.commit for sub in batch]
                    self._commit(batch)
                    self._inflight = []
                if stopping:
                    with self._cv:  # submit refuses once stopping; belt and braces
                        rest = list(self._pending)
                        self._pending.clear()
                    if rest:
                        self._commit(rest)
                    self._background_sync()
                    self.file.close()
                    return
            finally:
                self._file_lock.release()

    def _commit(self, batch: list[_Submission], inline: bool = False) -> None:
        """Write (and fsync, if any is durable) `batch` at the tail under `_file_lock`, then
        complete its handles. `inline`: a submitter's own buffered write (no periodic sync:
        that is the writer's)."""
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
            self.m.inline_batches += inline
            self.m.bytes_written += len(data)
        for s, end in zip(batch, ends, strict=True):
            c = s.commit
            c.wal_ms = wal_ms
            c.fsync_ms = fsync_ms
            c.position = (self.idx, start + end)
            c._complete()
        if (
            not durable
            and not inline
            and (
                self._unsynced_bytes >= SYNC_EVERY_BYTES
                or (self._unsynced and time.monotonic() - self._dirty_since >= SYNC_EVERY_S)
            )
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
        if not (self._resend or self._scrub_to):
            return True  # nothing of the batch reached the file
        if self.read_only:
            return False
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
            if not self._unsynced:
                self._dirty_since = time.monotonic()
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
