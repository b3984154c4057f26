"""Router crash cases found by review (2026-11-28): a snapshot must capture a router and its
dest together, and a dest whose durable floor outlived the copies it covered must not hand
its seqs out again (SEMANTICS §8.4, §12 invariants 1, 3 and 12; STORAGE §5.3 steps 3–5,
§6 step 9)."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from seglog.clock import ManualClock
from seglog.engine.engine import Engine
from seglog.model import Durability, RecordIn, TopicConfig
from seglog.router_model import RouterSpec
from tests.engine.oracle import abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs


def _reopen(e: Engine, fs: FaultFs, clock: ManualClock) -> Engine:
    img = image(fs, "process")
    abandon(e, fs)
    return open_engine(img, clock=clock)


class _ReleaseHook:
    """The registry's lock, running `hook` on this thread right after its first release
    by a snapshot (the moment a concurrent control-plane request could take it)."""

    def __init__(self, lock: Any, hook: Any) -> None:
        self._lock, self._hook = lock, hook
        self.armed = False
        self.acquire, self.release = lock.acquire, lock.release

    def __enter__(self) -> bool:
        return bool(self._lock.__enter__())

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.__exit__(et, ev, tb)
        if self.armed:
            self.armed = False
            self._hook()


def test_a_router_created_while_a_snapshot_captures_is_in_it_wholly_or_not_at_all() -> None:
    """Another thread creates a router (and its dest) and forwards, just after the snapshot
    listed the topics: it must wait for the capture (the router table is taken before the
    registry is let go), or the snapshot holds the router's cursor without the dest's copies
    and a crash loses them silently."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.write("s", [RecordIn.of("x0")], create=True)
    done = threading.Event()

    def concurrent_request() -> None:
        e.put_router(RouterSpec("r", "s", "d"))
        e.write("s", [RecordIn.of(i) for i in range(3)])
        e.forwarder.forward_all()
        done.set()

    worker = threading.Thread(target=concurrent_request)
    hooked = _ReleaseHook(e.registry.lock, lambda: (worker.start(), done.wait(0.2)))
    e.registry.lock = hooked  # type: ignore[assignment]
    hooked.armed = True
    e.snapshot()
    worker.join(10)
    e.registry.lock = hooked._lock
    assert done.is_set()
    e.forwarder.forward_all()
    assert [r.data for r in read_all(e, "d").values()] == [0, 1, 2]
    e2 = _reopen(e, fs, clock)
    try:
        assert [r.data for r in read_all(e2, "d").values()] == [0, 1, 2]
    finally:
        e2.close(snapshot=False)


def test_a_dest_floor_above_what_replay_restores_is_padded_after_a_crash() -> None:
    """The copies expired (a durable EvictWatermark), then the router went: nothing
    re-derives them after a crash, and the next acked write must not take their seqs."""
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("d", TopicConfig(ttl_ms=1_000))
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    e.write("s", [RecordIn.of(i) for i in range(3)])
    e.forwarder.forward_all()
    clock.advance(5_000)
    assert read_all(e, "d") == {} and e.topics["d"].expiry_floor == 3
    e.delete_router("r")
    e2 = _reopen(e, fs, clock)
    try:
        w = e2.write("d", [RecordIn.of("fresh")])
        assert w.first_seq == 4
        assert {s: r.data for s, r in read_all(e2, "d").items()} == {4: "fresh"}
    finally:
        e2.close(snapshot=False)


def test_an_ephemeral_sources_copies_expired_in_the_dest_leave_no_seq_to_reuse() -> None:
    clock, fs = ManualClock(), FaultFs()
    e = open_engine(fs, clock=clock)
    e.put_topic("s", TopicConfig(durability=Durability.EPHEMERAL))
    e.put_topic("d", TopicConfig(ttl_ms=1_000))
    e.put_router(RouterSpec("r", "s", "d"))
    e.snapshot()
    e.write("s", [RecordIn.of(i) for i in range(3)])
    e.forwarder.forward_all()
    clock.advance(5_000)
    assert read_all(e, "d") == {} and e.topics["d"].expiry_floor == 3
    e2 = _reopen(e, fs, clock)
    try:
        w = e2.write("d", [RecordIn.of("fresh")])
        assert {s: r.data for s, r in read_all(e2, "d").items()} == {w.first_seq: "fresh"}
        assert w.first_seq > 3
    finally:
        e2.close(snapshot=False)
