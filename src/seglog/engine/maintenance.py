"""Background upkeep: seal active segments, take snapshots on their triggers, move sealed
segments to the cold tier, drop fully dead segments (STORAGE §4.4, §4.5, §5.3), and let
the index's scratch pages leave the process's memory (`storage.scratch`).

One `Maintenance` thread per engine; `run_once` is also called directly by tests with an
injected clock. Segment file I/O runs outside topic locks (see `TopicSegments`)."""

from __future__ import annotations

import logging
import threading

from seglog.engine.engine import Engine
from seglog.engine.segments import encode_rows
from seglog.engine.topic import TopicState
from seglog.storage.tiers import plan_relocation, relocate

log = logging.getLogger("seglog.maintenance")

SNAPSHOT_CHECK_MS = 5000
RELOCATION_CHECK_MS = 5000
# How often the index's scratch pages leave the process's memory (`storage.scratch`): its
# resident share is what was touched within this interval.
SCRATCH_RELEASE_MS = 5000


def seal_topic(engine: Engine, t: TopicState, force: bool = False) -> int:
    """Seal every full (or, with `force`, any non-empty) active range. Returns segments sealed."""
    sealed = 0
    while True:
        segs = t.segments
        if segs is None or not t.persistent:
            return sealed  # an ephemeral topic's records never reach segment files
        now = engine.clock.now_ms()
        with t.lock:
            if t.deleted:
                return sealed
            rng = segs.seal_range(t, now, force)
            if rng is None:
                return sealed
            captured = segs.capture(t, rng[0], rng[1])
        try:
            info = segs.store.install("hot", rng[0], *encode_rows(captured))
        except OSError:
            # The install runs outside the lock: a topic delete may take its directory
            # away under it. Not an error then, but what the install left must go too.
            with t.lock:
                gone = t.deleted
            if not gone:
                raise
            segs.store.drop_all()
            return sealed
        with t.lock:
            if t.deleted:  # the directory may be one the install made again after the delete
                segs.store.drop_all()
                return sealed
            segs.register(t, info, captured)
            segs.drop_dead(t)
        sealed += 1
        force = False if rng[1] >= t.head else force


def relocate_cold(engine: Engine, t: TopicState) -> int:
    segs = t.segments
    if segs is None or segs.store.cold_root is None:
        return 0
    with t.lock:
        plan = plan_relocation(
            [s for s in segs.sealed if s.tier == "hot"],
            engine.options.hot_retain_segments,
            engine.options.hot_retain_bytes,
        )
    moved = 0
    for info in plan:
        # A segment can be dropped (retention, deletes, topic delete) while it moves: the
        # move runs outside the lock. Its files may vanish under `relocate`, or the cold
        # copy may be installed after the drop; neither is an error, but the copy must go.
        try:
            new = relocate(segs.store, info)
        except FileNotFoundError:
            with t.lock:
                if not t.deleted and segs.holds(info):
                    raise
            new = info
        with t.lock:
            deleted = t.deleted
            kept = not deleted and new is not info and segs.replace(info, new)
        if deleted:
            segs.store.drop_all()
            return moved
        if not kept:
            segs.store.drop(new)
        else:
            moved += 1
    return moved


class Maintenance:
    def __init__(self, engine: Engine, tick_s: float = 0.1) -> None:
        self.engine = engine
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        now = engine.clock.now_ms()
        self._next_snapshot_check = now + SNAPSHOT_CHECK_MS
        self._next_relocation = now + RELOCATION_CHECK_MS
        self._next_release = now + SCRATCH_RELEASE_MS

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="seglog-maintenance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.run_once()
            except Exception:
                log.exception("maintenance pass failed")

    def snapshot_due(self, now: int) -> bool:
        e = self.engine
        if not e.topics or e.wal is None:
            return False
        wal_bytes = e.wal.bytes_written_total - e.wal_bytes_at_snapshot
        return wal_bytes >= e.options.snapshot_wal_bytes or (
            now - e.last_snapshot_ms >= e.options.snapshot_interval_ms
        )

    def run_once(self) -> None:
        e = self.engine
        if not e.ready:
            return
        for t in list(e.by_id.values()):
            try:
                if t.segments is not None:
                    t.segments.flush_flags(t)
                seal_topic(e, t)
            except Exception:  # one topic's failure must not hold up the others, nor snapshots
                log.exception("maintenance of topic %r failed", t.name)
        now = e.clock.now_ms()
        if now >= self._next_snapshot_check:
            self._next_snapshot_check = now + SNAPSHOT_CHECK_MS
            if self.snapshot_due(now):
                e.snapshot()
        if e.scratch is not None and now >= self._next_release:
            self._next_release = now + SCRATCH_RELEASE_MS
            e.scratch.release_resident()
        if e.options.cold_dir is not None and now >= self._next_relocation:
            self._next_relocation = now + RELOCATION_CHECK_MS
            for t in list(e.by_id.values()):
                try:
                    relocate_cold(e, t)
                except Exception:  # as for seals: the other topics still move
                    log.exception("relocating topic %r to the cold tier failed", t.name)
