"""Locks that hold back Ctrl-C while the state they guard is half changed.

Python runs signal handlers on the main thread between any two bytecodes, and its default
SIGINT handler raises KeyboardInterrupt there. A program that embeds the engine and calls it
on its main thread could take that exception in the middle of a write: after the write's
frames went to the WAL but before its seqs were recorded (the next write then reused them),
or while it published committed writes (the topic's head then fell behind its queue). Every
such step runs under one of the engine's locks, so those locks are `ShieldedLock`s: on the
main thread, a SIGINT that arrives while any of them is held is remembered and handed to
the handler it was meant for (Python's raises KeyboardInterrupt) when the outermost one is
released, with the state whole.

Only handlers that raise where they land are held back (`_holds`): Python's own
`signal.default_int_handler`, and `asyncio.run`'s (its second Ctrl-C raises). The outermost
section on the main thread swaps such a handler for a deferring one and puts it back (two
`sigaction` calls), so outside the engine Ctrl-C behaves as always and `asyncio.run` still
finds the default handler it looks for. A program's own handler is its own business, and
the server's event loop handles signals as callbacks that raise nothing: those are left
alone, and a section under them costs one `getsignal`. Off the main thread no handler ever
runs, so there a `ShieldedLock` is only a lock. A call that waits outside the locks (for a
commit) is interrupted as before; its write stays queued and is published by the next. One
that waits inside a lock (a control-plane change's fsync) holds Ctrl-C until it returns.

Owner: the main thread's shield depth and deferred signal are touched only by the main
thread (signal handlers run there too).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # `signal`'s functions wrap these: ~2 µs vs 15 ns
import asyncio
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

_get_ident = threading.get_ident
_MAIN = threading.main_thread().ident
_SIGINT = signal.SIGINT
_getsignal = _signal.getsignal
_setsignal = _signal.signal
_DEFAULT = signal.default_int_handler
Handler = Callable[[int, FrameType | None], Any]


class _Shield:
    depth = 0  # ShieldedLock sections the main thread is inside
    saved: Handler | None = None  # the handler `_deferring_handler` stands in for
    deferred = 0  # SIGINTs that arrived inside a section


def _holds(handler: Any) -> bool:
    """Whether a SIGINT `handler` may raise between two bytecodes and is ours to hold
    back: Python's default one, and `asyncio.Runner`'s (`asyncio.run`: the first Ctrl-C
    cancels the main task, any later one raises KeyboardInterrupt)."""
    if handler is _DEFAULT:
        return True
    func = getattr(handler, "func", None)  # Runner installs partial(self._on_sigint, ...)
    return getattr(func, "__name__", None) == "_on_sigint" and isinstance(
        getattr(func, "__self__", None), asyncio.Runner
    )


def _deferring_handler(signum: int, frame: FrameType | None) -> None:
    if _Shield.depth:
        _Shield.deferred += 1
        return
    _Shield.deferred = 0  # run now: nothing is left for a later section to run
    (_Shield.saved or _DEFAULT)(signum, frame)


def depth() -> int:
    """How many shielded sections the main thread is inside (0 on any other thread)."""
    return _Shield.depth if _get_ident() == _MAIN else 0


def _enter() -> bool:
    """Main thread, before taking a lock: whether this section is counted (shielded). The
    outermost one is while a handler `_holds` covers is installed (or ours, left in place
    by a signal that landed just as the last section ended); sections inside a counted
    one always are. A signal that lands before the swap is handled here, with nothing
    guarded yet; one that lands after it is deferred."""
    if _Shield.depth:
        _Shield.depth += 1
        return True
    handler = _getsignal(_SIGINT)
    if handler is not _deferring_handler and not _holds(handler):
        return False  # a program's own handler, or the server's loop: not ours to hold
    _Shield.depth = 1
    try:
        if handler is not _deferring_handler:
            _Shield.saved = handler
            _setsignal(_SIGINT, _deferring_handler)
        elif _Shield.saved is None:
            _Shield.saved = _DEFAULT
    except BaseException:
        _leave()
        raise
    return True


def _leave() -> None:
    """Main thread, after releasing a lock: at the outermost end, the saved handler back
    and run once for each SIGINT held back (the default one raises KeyboardInterrupt).
    Whenever another SIGINT lands in here, it is handled once and nothing is left for a
    later section: once the depth is 0 our handler runs the saved one at once and clears
    the count (a handler left in place is taken back by the next section), and the count
    is taken before the saved handler, which would not clear it, is back."""
    if _Shield.depth > 1:
        _Shield.depth -= 1
        return
    _Shield.depth = 0
    pending, _Shield.deferred = _Shield.deferred, 0
    saved = _Shield.saved
    if saved is not None:
        _setsignal(_SIGINT, saved)
        _Shield.saved = None
    for _ in range(pending):
        (saved or _DEFAULT)(_SIGINT, None)


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
