"""Locks that hold back Ctrl-C while the state they guard is half changed.

Python runs signal handlers on the main thread between any two bytecodes, and its default
SIGINT handler raises KeyboardInterrupt there. A program that embeds the engine and calls it
on its main thread could take that exception in the middle of a write: after the write's
frames went to the WAL but before its seqs were recorded (the next write then reused them),
or while it published committed writes (the topic's head then fell behind its queue). Every
such step runs under one of the engine's locks, so those locks are `ShieldedLock`s: on the
main thread, a SIGINT that arrives while any of them is held is remembered and raised as
KeyboardInterrupt when the outermost one is released, with the state whole.

Only Python's own `signal.default_int_handler` is held back, and only while a section runs:
the outermost section on the main thread swaps it for a deferring handler and puts it back
(two `sigaction` calls, ~0.4 µs), so outside the engine Ctrl-C behaves as always and
`asyncio.run` still finds the default handler it looks for. A program's own handler is its
own business, and the server's event loop handles signals as callbacks that raise nothing:
those are left alone. Off the main thread no handler ever runs, so there a `ShieldedLock` is
only a lock. A call that waits outside the locks (for a commit) is interrupted as before;
its write stays queued and is published by the next.

Owner: the main thread's shield depth and deferred signal are touched only by the main
thread (signal handlers run there too).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # `signal`'s functions wrap these: ~2 µs vs 15 ns
import signal
import threading
from types import FrameType, TracebackType

_get_ident = threading.get_ident
_MAIN = threading.main_thread().ident
_SIGINT = signal.SIGINT
_getsignal = _signal.getsignal
_setsignal = _signal.signal
_DEFAULT = signal.default_int_handler


class _Shield:
    depth = 0  # ShieldedLock sections the main thread is inside
    swapped = False  # the default handler was swapped for `_deferring_handler`
    deferred = False  # a SIGINT arrived inside a section


def _deferring_handler(signum: int, frame: FrameType | None) -> None:
    if _Shield.depth:
        _Shield.deferred = True
        return
    _DEFAULT(signum, frame)


def depth() -> int:
    """How many shielded sections the main thread is inside (0 on any other thread)."""
    return _Shield.depth if _get_ident() == _MAIN else 0


def _enter() -> bool:
    """Main thread, before taking a lock: whether this section is counted (shielded). The
    outermost one is, while Python's default handler (or ours, left in place by a signal
    that landed just as the last section ended) is installed; sections inside a counted
    one always are. A signal that lands before the swap raises here, with nothing guarded
    yet; one that lands after it is deferred."""
    if _Shield.depth:
        _Shield.depth += 1
        return True
    handler = _getsignal(_SIGINT)
    if handler is not _DEFAULT and handler is not _deferring_handler:
        return False  # a program's own handler, or the server's loop: not ours to hold
    _Shield.depth = 1
    try:
        _setsignal(_SIGINT, _deferring_handler)
        _Shield.swapped = True
    except BaseException:
        _leave()
        raise
    return True


def _leave() -> None:
    """Main thread, after releasing a lock: at the outermost end, the default handler back
    and a deferred SIGINT raised."""
    _Shield.depth -= 1
    if _Shield.depth:
        return
    if _Shield.swapped:
        _Shield.swapped = False
        _setsignal(_SIGINT, _DEFAULT)
    if _Shield.deferred:
        _Shield.deferred = False
        raise KeyboardInterrupt


class ShieldedLock:
    """A `threading.Lock` (or `RLock`) whose `with` sections are shielded on the main
    thread. Use it with `with`: a bare `acquire`/`release` pair is not shielded."""

    __slots__ = ("_lock", "acquire", "release")

    def __init__(self, reentrant: bool = False) -> None:
        lock = threading.RLock() if reentrant else threading.Lock()
        self._lock = lock
        self.acquire = lock.acquire
        self.release = lock.release

    def locked(self) -> bool:
        """Whether the lock is held (a non-reentrant one: `RLock` has no such test)."""
        return self._lock.locked()  # type: ignore[union-attr]

    def __enter__(self) -> bool:
        if _get_ident() == _MAIN and _enter():
            try:
                self._lock.acquire()
            except BaseException:
                _leave()
                raise
            return True
        return self._lock.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()
        if _Shield.depth and _get_ident() == _MAIN:
            _leave()
