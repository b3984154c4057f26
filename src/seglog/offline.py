"""Read-only recovery of a data directory, for readers that do not own it (the Spark
offline reader, `seglog.spark.files`).

Offline must equal online-after-restart, so this runs the engine's own replay
(`seglog.engine.recovery.replay`: snapshot, WAL groups, torn tails, unfinished submissions,
deletes, caps, watermarks, head reservations) instead of a second copy of those rules that
would drift. It is the only door from readers into the engine: it hands out plain values
(`TopicView`, `OfflineRecord`), never engine objects, and every file access goes through
`ReadOnlyFs`, which refuses any change — a torn tail is cut in memory (replay stops at it),
never on disk, and no lock is taken.

Two modes, chosen by whether a server holds the directory's lock (`.seglog.lock`):

- **stopped** (clean stop or crash): newest valid snapshot + every WAL group replayed to its
  valid end, then STORAGE §6 step 8 in memory (sealed segments with `last_seq <= head` are
  reused and their delete flags applied) and the retention pass an online read runs at
  `now_ms`. Mid-WAL corruption raises `WalCorruptionError` (file, offset), as the server
  refuses to start on it.
- **running**: the WAL is being written, so it is not read; the state is the newest
  snapshot's, plus delete flags found in reused sealed segments, plus retention at `now_ms`.

Router copies made since the snapshot are in no file: like the server at startup (STORAGE
§6 step 9) they are re-derived with the engine's forwarding step, in memory, stamped
`now_ms` (the server stamps its start time). `underived` names any router still behind.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from seglog.core.segment_format import SegmentCorruption
from seglog.engine.forwarding import Forwarder
from seglog.engine.publisher import Publisher
from seglog.engine.recovery import (
    Replayed,
    SealedReader,
    held_runs,
    pad_to_floors,
    replay,
)
from seglog.engine.segments import SealPolicy, TopicSegments
from seglog.engine.topic import TopicState
from seglog.storage.datadir import LOCK_NAME
from seglog.storage.fs import Fs, ReadOnlyFs, RealFs
from seglog.storage.segment import SegmentInfo, SegmentStore
from seglog.storage.snapshot import SealedSegmentMissingError, snapshot_ids

Ranges = tuple[tuple[int, int], ...]  # inclusive (first, last) seq runs, ascending
_SHARD_DIR = re.compile(r"shard-(\d{2})")


class DirectoryChangedError(RuntimeError):
    """A re-derivation on an executor does not match the plan: the directory changed."""


@dataclass(frozen=True, slots=True)
class TopicView:
    """One persistent topic as an online read after a restart would see it at `now_ms`:
    `live` are the seqs it returns; `segments` the reused sealed segments holding some of
    them (read from their bytes); `tail` the live seqs no such segment holds (their
    payloads come from the snapshot or the WAL, i.e. from a replay)."""

    name: str
    topic_id: int
    head: int
    earliest: int
    count: int
    live: Ranges
    segments: tuple[SegmentInfo, ...]
    tail: Ranges


@dataclass(frozen=True, slots=True)
class OfflineRecord:
    seq: int
    ts: int
    node: str | None
    tag: str | None
    data: bytes  # JSON text of `data`
    meta: bytes | None  # JSON text of `meta`


@dataclass(frozen=True)
class TopicFilter:
    """The topics a reader needs: those `match` accepts (a picklable callable), plus `also`
    — the sources that feed them through routers, whose records re-derive their copies."""

    match: Callable[[str], bool]
    also: frozenset[str] = frozenset()

    def __call__(self, name: str) -> bool:
        return name in self.also or self.match(name)


@dataclass(frozen=True, slots=True)
class Point:
    """What a re-derivation must reproduce: the snapshot replay started from (None: no
    snapshot, the WAL from its beginning), whether the WAL was replayed, `now_ms`, the
    topics whose records were replayed (None: all). Records of reused sealed segments are
    always restored without their payloads (they are read from the segments)."""

    snapshot_id: int | None
    use_wal: bool
    now_ms: int
    only: TopicFilter | None = None


_SNAPSHOT_RACE_RETRIES = 3


class _SourcesLeftOut(Exception):
    """The filter leaves out router sources feeding topics it keeps."""

    def __init__(self, names: frozenset[str]) -> None:
        super().__init__(sorted(names))
        self.names = names


class _FixedClock:
    def __init__(self, now_ms: int) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def monotonic(self) -> float:
        return 0.0


def server_running(root: Path, fs: Fs | None = None) -> bool:
    """Whether a server holds `root`'s lock right now (probed without writing)."""
    return (fs or RealFs()).lock_held(root / LOCK_NAME)


def _wal_shards(fs: Fs, wal_dir: Path) -> int:
    """The shard layout on disk (replay order puts the other layouts' groups first; it
    only matters after a crash during a restart that changed the shard count)."""
    nums = [int(m.group(1)) for n in fs.listdir(wal_dir) if (m := _SHARD_DIR.fullmatch(n))]
    return max(nums) + 1 if nums else 1


class OfflineDir:
    """A data directory recovered in memory at a `Point`. Owner: the caller; nothing in
    it is shared or written back."""

    def __init__(
        self, root: Path, cold_root: Path | None, point: Point, fs: Fs | None = None
    ) -> None:
        self.root = root
        self.cold_root = cold_root
        self.point = point
        self.fs = ReadOnlyFs(fs or RealFs())
        self._listed: dict[int, list[SegmentInfo]] = {}
        self._sealed = SealedReader(self.fs, root, cold_root, checksums=False)
        self._rp: Replayed = replay(
            self.fs,
            root / "meta",
            root / "wal",
            wal_shards=_wal_shards(self.fs, root / "wal"),
            clock=_FixedClock(point.now_ms),
            attach_segments=lambda _t: None,  # segments are reconciled read-only below
            snapshot_id=point.snapshot_id,
            use_wal=point.use_wal,
            records_for=point.only,
            held_payloads=self._held,
            # Frames are verified once, later: by the tasks that read a segment, or by
            # `verify_unread` for the rest (as `_reconcile` reads the delete flags).
            read_sealed=self._sealed,
        )
        self._check_closed()
        # Step 8 before step 9, as at startup: which segments are reused is decided by the
        # recovered heads, before forwarding appends copies to the dests.
        self._reused = {t.topic_id: self._reconcile(t) for t in self._kept() if t.persistent}
        self._forward()
        for t in self._rp.registry.all():  # forwarding was their last reader here
            if t.segments is not None:
                t.segments.store.close()

    @classmethod
    def open(
        cls,
        root: Path,
        cold_root: Path | None,
        now_ms: int,
        *,
        running: bool,
        fs: Fs | None = None,
        only: Callable[[str], bool] | None = None,
    ) -> OfflineDir:
        """Recover from the newest valid snapshot (with the WAL unless `running`). With
        `only`, just the topics it accepts (and the router sources feeding them) are
        recovered with their records, and only they are listed."""
        keep = None if only is None else TopicFilter(only)
        retries = _SNAPSHOT_RACE_RETRIES
        while True:
            newest = snapshot_ids(ReadOnlyFs(fs or RealFs()), root / "meta")[-1:]
            try:
                d = cls(root, cold_root, Point(None, not running, now_ms, keep), fs)
                break
            except _SourcesLeftOut as e:  # replay again with them: rare, and it converges
                assert keep is not None
                keep = TopicFilter(keep.match, keep.also | e.names)
            except SealedSegmentMissingError:
                # A running server that snapshotted twice since may have dropped a segment
                # the snapshot read here referenced: read its newer snapshot instead.
                again = snapshot_ids(ReadOnlyFs(fs or RealFs()), root / "meta")[-1:]
                if not running or again == newest or retries == 0:
                    raise
                retries -= 1
        snap = d._rp.snapshot
        d.point = Point(None if snap is None else snap.id, not running, now_ms, keep)
        return d

    def _kept(self) -> list[TopicState]:
        only = self.point.only
        return [t for t in self._rp.registry.all() if only is None or only(t.name)]

    def _check_closed(self) -> None:
        only = self.point.only
        if only is None:
            return
        missing = frozenset(
            r.spec.source
            for r in self._rp.routers.all()
            if only(r.spec.dest) and not only(r.spec.source)
        )
        if missing:
            raise _SourcesLeftOut(missing)

    def _segments(self, topic_id: int) -> list[SegmentInfo]:
        infos = self._listed.get(topic_id)
        if infos is None:
            infos = self._sealed.listed(topic_id)
            self._listed[topic_id] = infos
        return infos

    def _held(self, topic_id: int, head: int) -> list[tuple[int, int]]:
        """`replay`'s `held_payloads`: the sealed segments `_reconcile` reuses hold these
        seqs, and reads take them from there (`records` serves only the rest, forwarding
        reads them through the segments `_reconcile` attaches), so the snapshot's copies of
        their payloads are never needed."""
        return held_runs(self._segments(topic_id), head)

    @property
    def has_snapshot(self) -> bool:
        return self._rp.snapshot is not None

    def topics(self) -> list[TopicView]:
        """Every topic (that the filter keeps), by name, after §6 step 8 and a retention
        pass. An ephemeral topic holds no records after a restart (SEMANTICS §2.2): it is
        listed, empty."""
        return [self._view(t) for t in sorted(self._kept(), key=lambda t: t.name)]

    def seq_span(self, name: str, ts_lo: int | None, ts_hi: int | None) -> tuple[int, int]:
        """The seqs `[first, last]` (first > last: none) of topic `name` whose records can
        have `ts` in `[ts_lo, ts_hi]` (ms, None = unbounded): binary searches over the
        replayed timestamps, which never decrease with seq (SEMANTICS §2)."""
        t = self._rp.registry.get(name)
        if t is None:
            return 1, 0
        lo = t.front if ts_lo is None else t.ts_bisect(ts_lo)
        hi = t.slot_count if ts_hi is None else t.ts_bisect(ts_hi, right=True)
        return t.origin + lo, t.origin + hi - 1

    def underived(self) -> list[str]:
        """Routers still behind their source after the re-derivation (a `discard:"reject"`
        dest refusing copies, the pass bound): the server would keep forwarding those in
        the background after its start, so an online read may see more."""
        reg = self._rp.registry
        out = []
        for r in self._rp.routers.all():
            s = reg.get(r.spec.source)
            if s is not None and s.head > r.cursor:
                out.append(f"{r.spec.name} ({r.spec.source} -> {r.spec.dest})")
        return sorted(out)

    def records(
        self, name: str, topic_id: int, head: int, ranges: Ranges
    ) -> Iterator[OfflineRecord]:
        """The records of `ranges` (live at planning) from this replay's memory. Raises
        `DirectoryChangedError` if the topic or any of those records is not as planned."""
        if self.point.only is not None and not self.point.only(name):
            raise ValueError(f"topic {name!r} was left out of this replay")
        t = self._rp.registry.get(name)
        if t is None or t.topic_id != topic_id or t.head != head:
            raise DirectoryChangedError(
                f"topic {name!r} (id {topic_id}, head {head}) is not in {self.root} as planned"
            )
        for first, last in ranges:
            rows = t.rows(first, last)
            for k, seq in enumerate(range(first, last + 1)):
                data = rows.data[k]
                if rows.dead[k] or data is None:
                    raise DirectoryChangedError(
                        f"topic {name!r}: seq {seq} is no longer in {self.root} as planned"
                    )
                yield OfflineRecord(seq, rows.ts[k], rows.node[k], rows.tag[k], data, rows.meta[k])

    def verify_unread(self, read: set[Path]) -> None:
        """Verify every frame of the reused segments whose data file is not in `read` (the
        readers verify those they read): a corrupt segment fails an offline read as it
        stops the server's start, whether or not the read returns rows from it. Raises
        `SegmentCorruption` naming the file."""
        for t in self._kept():
            unread = [i for i in self._reused.get(t.topic_id, []) if i.data_path not in read]
            if not unread:
                continue
            store = SegmentStore(self.fs, self.root / "topics", self._cold_topics, t.topic_id)
            try:
                for info in unread:
                    try:
                        store.read_del_flags(info, verify=True)
                    except SegmentCorruption as e:
                        raise SegmentCorruption(f"{info.data_path}: {e}") from e
            finally:
                store.close()

    def _reconcile(self, t: TopicState) -> list[SegmentInfo]:
        """§6 step 8, read-only: the sealed segments recovery reuses, their delete flags
        applied to the live records they hold. Frames are verified later, once: by the
        tasks that read a segment, or by `verify_unread` for the rest."""
        reused = [i for i in self._segments(t.topic_id) if i.last_seq <= t.head]
        if not reused:
            return reused
        store = SegmentStore(self.fs, self.root / "topics", self._cold_topics, t.topic_id)
        flagged: list[int] = []
        for i in reused:
            try:
                seen = self._sealed.deleted(i)  # read by the restore already, if referenced
                deleted = store.read_del_flags(i, False) if seen is None else seen
                flagged += [s for s in deleted if t.is_live(s)]
            except SegmentCorruption as e:
                store.close()
                raise SegmentCorruption(f"{i.data_path}: {e}") from e
        if flagged:
            t.apply_delete(None, None, 0, flagged)
        # Forwarding (`_forward`) reads the payloads that live only in these files.
        segs = TopicSegments(store, SealPolicy(), t.head + 1)
        segs.set_sealed(reused)
        segs.payload_dropped_below = 1
        t.segments = segs
        return reused

    def _forward(self) -> None:
        """§6 step 9 in memory, as the server's recovery does it, and heads rise to durable
        floors."""
        self._derive_copies()
        pad_to_floors(self._rp.registry.all(), self.point.now_ms)

    def _derive_copies(self) -> None:
        """The live forwarding step over the recovered registry, with retention passes
        applied at once (the server logs their watermarks first)."""
        routers = self._rp.routers
        only = self.point.only
        for r in routers.all():
            if only is not None and not only(r.spec.dest):
                routers.remove(r.spec.name)  # feeds a topic nobody reads here
        if not routers.all():
            return
        clock = _FixedClock(self.point.now_ms)

        def retain(t: TopicState, now: int) -> None:
            cut = t.retention_cut(now)
            if cut is not None:
                t.apply_cut(cut)

        fwd = Forwarder(
            self._rp.registry,
            routers,
            Publisher(clock, retain),
            clock,
            lambda t: retain(t, clock.now_ms()),
        )
        for r in routers.all():
            fwd.rebuild_copies(r)
        fwd.forward_all()

    def _view(self, t: TopicState) -> TopicView:
        if not t.persistent:
            return TopicView(t.name, t.topic_id, t.head, t.head + 1, 0, (), (), ())
        cut = t.retention_cut(self.point.now_ms)  # what the online read's pass does first
        if cut is not None:
            t.apply_cut(cut)
        live = tuple(t.live_runs())
        reused = self._reused.get(t.topic_id, [])
        used = tuple(i for i in reused if _overlaps(live, i.first_seq, i.last_seq))
        tail = _minus(live, [(i.first_seq, i.last_seq) for i in used])
        return TopicView(t.name, t.topic_id, t.head, t.earliest(), t.count, live, used, tail)

    @property
    def _cold_topics(self) -> Path | None:
        return None if self.cold_root is None else self.cold_root / "topics"


def _overlaps(ranges: Ranges, first: int, last: int) -> bool:
    return any(a <= last and b >= first for a, b in ranges)


def _minus(ranges: Ranges, cover: list[tuple[int, int]]) -> Ranges:
    """`ranges` without the seqs of the (ascending, disjoint) `cover` runs."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        for c, d in cover:
            if d < a or c > b:
                continue
            if c > a:
                out.append((a, c - 1))
            a = d + 1
            if a > b:
                break
        if a <= b:
            out.append((a, b))
    return tuple(out)


def restrict(ranges: Ranges, first: int, last: int) -> Ranges:
    """The part of `ranges` within `[first, last]`."""
    return tuple((max(a, first), min(b, last)) for a, b in ranges if a <= last and b >= first)
