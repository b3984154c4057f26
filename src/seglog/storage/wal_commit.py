"""The completion handle of one WAL submission, and the errors a submission ends in.

A `Commit` is created by `WalShard.submit` and completed exactly once, by whoever wrote
its batch (`_complete`, which nothing else calls): the shard's writer thread; for a
buffered submission written inline, the submitting thread, before `submit` returns (then
it is already done and no callback can have been added); or a thread that was about to
block in `wait` on this or another commit of the same shard and wrote the queue itself
(`WalShard.commit_here`). Callbacks run on the completing thread and must not block; one
that raises is logged, never propagated into the writer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from seglog.storage.wal_files import Position

log = logging.getLogger("seglog.wal")


class WalError(Exception):
    """A batch write or fsync failed: nothing of that submission is durable."""


class WalQueueFull(Exception):
    """The shard's submission queue is full; nothing was written."""


class WalReadOnly(WalError):
    """The shard could not create its next file and refuses every write."""


# One process-wide lock guards every Commit's tiny state transitions: creating a
# threading.Event (Condition + Lock) per commit cost more than the rest of a write.
_COMMIT_LOCK = threading.Lock()


class Commit:
    """Completion handle of one submission. `wait` blocks on a lock created only when
    somebody actually has to wait; callbacks run on the completing (writer) thread.
    `position` is `(file idx, offset right after the submission)` once it succeeded."""

    __slots__ = (
        "_callbacks",
        "_done",
        "_run_here",
        "_waiters",
        "error",
        "fsync_ms",
        "position",
        "wal_ms",
    )

    def __init__(self) -> None:
        self._done = False
        # Set by the shard that queued this submission: lets a thread that is about to
        # block in `wait` write the queue itself when the writer is idle.
        self._run_here: Callable[[Commit], None] | None = None
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
        """Block until done; raise the batch's `WalError`, or `TimeoutError`. A thread that
        would block first offers to write the queue itself (`WalShard.commit_here`): with
        the writer idle, the wait is then the write and its fdatasync, without waking the
        writer and being woken by it (`timeout` does not bound that write)."""
        gate = None
        if not self._done and self._run_here is not None:
            self._run_here(self)
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
