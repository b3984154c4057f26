"""Startup recovery (STORAGE §6): snapshot → WAL replay → torn tails cut, or a refusal on
corruption → head reservations → segment reconciliation. A function over the files that
returns the state it rebuilt (`Recovered`); it knows nothing of the engine that adopts it. Deterministic and idempotent: running it again over the same
files converges to the same state, because every frame is applied by rules that ignore
what is already reflected (`seq <= head`, ids, floors only rise).

Replay applies retention cuts in memory without logging them: they are re-derivable from
the replayed records and the clock, and the next live retention pass logs what it moves.
"""

from __future__ import annotations

import functools
import gc
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

import numpy as np

from seglog.clock import Clock
from seglog.core.frame_bodies import (
    DeleteBody,
    EvictWatermarkBody,
    HeadWatermarkBody,
    RouterCreateBody,
    RouterDeleteBody,
    TopicCreateBody,
    TopicDeleteBody,
)
from seglog.core.frame_runs import append_runs
from seglog.core.frame_scanner import RawFrame
from seglog.core.frames import FrameError, FrameType, WalFrame
from seglog.core.payload_blob import decode_blob, decode_blobs
from seglog.core.segment_format import SegmentCorruption
from seglog.core.segment_run import layout_coded_labels, layout_size_array
from seglog.engine.frozen_slots import HEAP, ColumnMemory, FrozenSlots
from seglog.engine.queues import replay_lease
from seglog.engine.registry import Registry
from seglog.engine.routers import RouterTable
from seglog.engine.snapshot_pins import SnapshotPins
from seglog.engine.snapshots import (
    HeldRuns,
    MissingRuns,
    ReadSealed,
    SealedRows,
    check_missing,
    restore_topic,
    snapshot_positions,
)
from seglog.engine.topic import TopicState
from seglog.model import TopicConfig
from seglog.storage.datadir import DataDir, list_topic_ids
from seglog.storage.fs import Fs
from seglog.storage.segment import (
    SegmentInfo,
    list_topic_segments,
    read_segment_layout,
    topic_dir_name,
)
from seglog.storage.snapshot import (
    RECORDS_SKIPPED,
    SegmentRef,
    SnapshotMark,
    SnapshotMissingError,
    TopicPredicate,
    kept_snapshot_segments,
    load_latest_snapshot,
    load_snapshot,
    referenced_segments,
    snapshot_name,
)
from seglog.storage.wal_files import WalGroup, discover_groups, group_key, replay_order
from seglog.storage.wal_submissions import Submissions
from seglog.storage.walscan import (
    GroupScan,
    GroupScanner,
    check_files_present,
    check_groups,
    seal_at,
    seal_torn_tails,
)

log = logging.getLogger("seglog.recovery")
_READ_THREADS = 2
_READ_AHEAD = 4  # segments read but not yet restored, at most (memory)

Position = tuple[int, int]
P = ParamSpec("P")
R = TypeVar("R")
AttachSegments = Callable[[TopicState], None]
HeldPayloads = Callable[[int, int], HeldRuns]  # (topic_id, snapshot head) -> runs


@dataclass(slots=True)
class Recovered:
    """What recovery rebuilt: the registry, where each current WAL shard continues, whether
    the shard layout changed (the caller snapshots before any write, §6 step 5), the
    snapshot it started from, and how many torn tails it cut."""

    registry: Registry
    tails: dict[str, Position]
    layout_changed: bool
    last_snapshot: SnapshotMark | None
    torn_tails: int
    routers: RouterTable
    # A topic that a kept snapshot references segments of is ephemeral now, and its files
    # are removed here: the caller must snapshot (twice) before any write, or a later
    # replay from a kept snapshot would meet the references without their files.
    stale_references: bool = False


@dataclass(slots=True)
class _Replay:
    registry: Registry
    routers: RouterTable
    attach_segments: AttachSegments
    now: int
    records_for: TopicPredicate | None = None
    memory: ColumnMemory = HEAP

    def skips(self, t: TopicState) -> bool:
        return self.records_for is not None and not self.records_for(t.name)


@dataclass(slots=True)
class Replayed:
    """What the read-only half of recovery rebuilt: the registry and routers as replay
    left them (head reservations padded, dead fronts popped, orphan routers dropped), the
    snapshot it started from, and each group's scan with its unfinished submissions
    (file idx → start offset, frames) for the writing half to cut."""

    registry: Registry
    routers: RouterTable
    snapshot: SnapshotMark | None
    scans: list[tuple[GroupScan, dict[int, tuple[int, int]]]]
    group_keys: set[str]


def _gc_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """Run `fn` with the cyclic garbage collector off. A replay builds millions of
    long-lived, acyclic objects (snapshot records, payloads, column lists), and each full
    collection on the way walks all of them again: ~20 % of a 10M-record replay."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return run


@_gc_paused
def replay(
    fs: Fs,
    meta_dir: Path,
    wal_dir: Path,
    *,
    wal_shards: int,
    clock: Clock,
    attach_segments: AttachSegments,
    on_progress: Callable[[float], None] | None = None,
    snapshot_id: int | None = None,
    use_wal: bool = True,
    records_for: TopicPredicate | None = None,
    held_payloads: HeldPayloads | None = None,
    read_sealed: ReadSealed | None = None,
    memory: ColumnMemory = HEAP,
) -> Replayed:
    """STORAGE §6 steps 2–4, the corruption check of step 6, step 7 and the first half of
    step 9, in memory only: it reads the files and never writes to them, so it also serves
    readers of a directory it does not own (`seglog.offline`). `snapshot_id` pins the
    snapshot to start from (`SnapshotMissingError` if it is gone or damaged) instead of the
    newest valid one; `use_wal=False` stops at the snapshot. With `records_for`, only the
    topics it accepts get their records and record frames (a reader that needs a few
    topics); the others are registered with their heads as of the snapshot and no records,
    and are not to be read. `held_payloads(topic_id, snapshot head)` names the seq runs whose
    payloads a sealed segment that step 8 reuses holds: they are restored without them.
    `read_sealed` reads the segments a format-2 snapshot references (`sealed_reader`).
    `memory` holds the topics' large index columns (`FrozenSlots`).
    Raises `WalCorruptionError` when a WAL group holds valid frames after an invalid one,
    `SealedSegmentMissingError` when a persistent topic lost records only a missing segment
    held."""
    registry = Registry()
    routers = RouterTable()
    rp = _Replay(registry, routers, attach_segments, clock.now_ms(), records_for, memory)
    starts: dict[str, Position] = {}
    last_snapshot = None
    missing: MissingRuns = []
    if snapshot_id is None:
        snap = load_latest_snapshot(fs, meta_dir, records_for)
    else:
        snap = load_snapshot(fs, meta_dir, snapshot_id, records_for)
        if snap is None:
            raise SnapshotMissingError(
                f"snapshot {meta_dir / snapshot_name(snapshot_id)} is gone or damaged"
            )
    if snap is not None:
        registry.note_id(int(snap.get("next_topic_id", 1)) - 1)
        for entry in snap.get("topics", []):
            held: HeldRuns = ()
            if held_payloads is not None and not entry.get(RECORDS_SKIPPED):
                held = held_payloads(int(entry["topic_id"]), int(entry["head_seq"]))
            t = restore_topic(entry, held, read_sealed, missing, memory)
            attach_segments(t)
            registry.add(t)
        routers.restore(snap.get("routers", []))
        starts = snapshot_positions(snap)
        last_snapshot = SnapshotMark(int(snap["id"]), starts, referenced_segments(snap))

    groups = discover_groups(fs, wal_dir) if use_wal else []
    ordered = replay_order(groups, max(1, wal_shards))
    total_bytes = sum(_group_bytes(fs, g, starts) for g in ordered) or 1
    done_bytes = 0

    def progress(nbytes: int) -> None:
        nonlocal done_bytes
        done_bytes += nbytes
        if on_progress is not None:
            on_progress(min(done_bytes / total_bytes, 0.999))

    # Frames of one topic past the checkpoints are all in one group: every layout change
    # is followed by a snapshot before any write (`recover`'s caller), so groups replay
    # independently, the old layout's first.
    scans: list[tuple[GroupScan, dict[int, tuple[int, int]]]] = []
    for g in ordered:
        check_files_present(g, starts.get(g.key, (1, 0)), g.key in starts)
    for g in ordered:
        scanner = GroupScanner(fs, g, starts.get(g.key, (1, 0)))
        whole = Submissions(scanner, progress)
        _apply_all(rp, whole.chunks())
        scans.append((scanner.result, whole.unfinished))
    check_groups(sc for sc, _ in scans)

    for t in registry.all():
        if rp.skips(t):
            continue
        if t.persistent and t.reservation > t.head:
            # Reserved-but-unwritten seqs become silent holes (§6 step 7): a disk write, or
            # a class change to a persistent class, may have acked seqs up to there.
            t.append_holes(t.reservation, rp.now)
        if not t.persistent:
            # An ephemeral topic keeps no records across a crash (SEMANTICS §2.2), also none
            # replayed from a persistent period before its class changed: only its head.
            t.delete_floor = max(t.delete_floor, t.head)
        # Replay leaves dead runs at the front (holes, deletes, capped records): pop them so
        # earliest_seq is where the live records start, never below what it was before.
        t.pop_front()
        t.reserved = t.head
        t.reservation = t.reservation_durable = t.head
    deleted_since = None
    if not use_wal and isinstance(read_sealed, SealedReader):
        deleted_since = read_sealed.topic_gone
    check_missing(registry, missing, deleted_since)
    _drop_orphan_routers(registry, routers)
    return Replayed(registry, routers, last_snapshot, scans, {g.key for g in groups})


def recover(
    fs: Fs,
    datadir: DataDir,
    *,
    wal_shards: int,
    clock: Clock,
    attach_segments: AttachSegments,
    on_progress: Callable[[float], None] | None = None,
    payload_cache: int | None = None,
    pins: SnapshotPins | None = None,
    memory: ColumnMemory = HEAP,
) -> Recovered:
    """STORAGE §6 steps 2–8 over the locked `datadir`: `replay`, then the writes it implies
    (torn tails and unfinished submissions cut, segments reconciled, orphan segment dirs
    removed). Raises `WalCorruptionError` (and changes nothing on disk) when a WAL group
    holds valid frames after an invalid one. With `payload_cache` (the number of newest
    sealed payloads step 8 keeps in memory), the older sealed payloads are never copied out
    of the snapshot (`held_by_segments`). `pins` gets the segments the snapshots on disk
    reference before any segment is dropped."""
    held = None
    sealed = SealedReader(fs, datadir.root, datadir.cold_root)
    if payload_cache is not None:
        held = held_by_segments(fs, datadir.root, datadir.cold_root, payload_cache)
    rp = replay(
        fs,
        datadir.meta_dir,
        datadir.wal_dir,
        wal_shards=wal_shards,
        clock=clock,
        attach_segments=attach_segments,
        on_progress=on_progress,
        held_payloads=held,
        read_sealed=sealed,
        memory=memory,
    )
    registry, routers = rp.registry, rp.routers
    kept = kept_snapshot_segments(fs, datadir.meta_dir)
    if pins is not None:
        pins.settle(kept)
    shards = max(1, wal_shards)
    current = {group_key(i, shards) for i in range(shards)}
    # Step 6: nothing on disk changed before every group was known sound (`replay`).
    torn = 0
    tails: dict[str, Position] = {}
    for sc, unfinished in rp.scans:
        cut = {path for path, _ in seal_torn_tails(fs, sc)}
        for path, offset in sc.torn_tails:
            log.warning("WAL %s: torn tail cut at offset %d", path, offset)
        for f in sc.files:
            if f.idx in unfinished:
                # A crash cut a batch's write short: its complete frames must not stay in
                # front of the writer's next batch, which replay would take for their end.
                offset, frames = unfinished[f.idx]
                seal_at(fs, f.path, offset)
                cut.add(f.path)
                log.warning(
                    "WAL %s: unfinished submission (%d frames) cut at offset %d",
                    f.path, frames, offset,
                )  # fmt: skip
        torn += len(cut)
        tail = sc.tail
        if sc.key in current and tail is not None:
            tails[sc.key] = (tail[0], unfinished[tail[0]][0]) if tail[0] in unfinished else tail
    layout_changed = bool(rp.group_keys) and rp.group_keys != current

    for t in registry.all():
        _reconcile_segments(t, sealed.deleted)
    # An ephemeral topic holds no records after recovery, so no segment of it is valid.
    known = {tid for tid, t in registry.by_id.items() if t.persistent}
    for root in (datadir.topics_dir, datadir.cold_topics_dir):
        if root is None:
            continue
        removed = False
        for tid in list_topic_ids(fs, root):
            if tid not in known:
                fs.rmtree(root / f"{tid:08X}")
                removed = True
        if removed:  # or a power cut brings the files back for a later start to reuse
            fs.fsync_dir(root)
    stale = any((r := registry.by_id.get(tid)) is not None and not r.persistent for tid, _ in kept)
    return Recovered(registry, tails, layout_changed, rp.snapshot, torn, routers, stale)


def held_by_segments(
    fs: Fs, root: Path, cold_root: Path | None, payload_cache: int = 0
) -> HeldPayloads:
    """`replay`'s `held_payloads` from the segment files: a complete sealed segment whose
    last seq is within the snapshot's head is reused by step 8 whatever the WAL adds (a
    head never goes down in replay), and step 8 drops every payload it holds but the
    newest `payload_cache` seqs' (`TopicSegments.drop_cached_payloads`)."""

    def held(topic_id: int, head: int) -> HeldRuns:
        return held_runs(list_topic_segments(root, topic_id, cold_root, fs), head, payload_cache)

    return held


class SealedReader:
    """`replay`'s `read_sealed` over the segment files of `root` (and `cold_root`): a
    referenced segment is found by its bounds and read whole, every frame verified
    (`SegmentCorruption` otherwise); None when no complete segment has those bounds. It
    remembers the delete flags it saw, so step 8 need not verify those files again.
    Without `checksums`, every check but the frames' checksums: for a reader that verifies
    every frame it later reads, and the rest (`seglog.offline`)."""

    def __init__(self, fs: Fs, root: Path, cold_root: Path | None, checksums: bool = True) -> None:
        self.fs, self.root, self.cold_root = fs, root, cold_root
        self.checksums = checksums
        self._listed: dict[int, dict[tuple[int, int], SegmentInfo]] = {}
        self._deleted: dict[Path, list[int]] = {}

    def __call__(self, topic_id: int, ref: SegmentRef) -> SealedRows | None:
        info = self._segments(topic_id).get((ref.segment, ref.segment_last))
        if info is None:
            return None
        try:
            data, lay = read_segment_layout(info, self.fs, self.checksums)
            sizes = layout_size_array(data, lay)
            node, tag = layout_coded_labels(data, lay)
        except FileNotFoundError:  # gone since it was listed (a running server dropped it)
            return None
        except (SegmentCorruption, FrameError) as e:
            if not self.checksums:  # a damaged frame, most likely: say which
                try:
                    read_segment_layout(info, self.fs)
                except SegmentCorruption as precise:
                    raise SegmentCorruption(f"{info.data_path}: {precise}") from precise
            raise SegmentCorruption(f"{info.data_path}: {e}") from e
        self._deleted[info.data_path] = (np.flatnonzero(lay.deleted) + info.first_seq).tolist()
        return SealedRows(lay.ts.astype(np.int64), sizes, node, tag)

    def read_many(self, topic_id: int, refs: Sequence[SegmentRef]) -> Iterator[SealedRows | None]:
        """`self(topic_id, ref)` for each of `refs`, in order, read a few ahead on two
        threads: reading a file and most of the numpy work release the GIL (10M records
        in 1,000 segments: 5.1 s -> 3.8 s with checksums, 3.0 s -> 2.2 s without)."""
        self._segments(topic_id)  # listed once, here
        with ThreadPoolExecutor(_READ_THREADS) as pool:
            ahead: deque[Future[SealedRows | None]] = deque()
            for ref in refs:
                ahead.append(pool.submit(self, topic_id, ref))
                if len(ahead) > _READ_AHEAD:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()

    def _segments(self, topic_id: int) -> dict[tuple[int, int], SegmentInfo]:
        infos = self._listed.get(topic_id)
        if infos is None:
            infos = {
                (i.first_seq, i.last_seq): i
                for i in list_topic_segments(self.root, topic_id, self.cold_root, self.fs)
            }
            self._listed[topic_id] = infos
        return infos

    def listed(self, topic_id: int) -> list[SegmentInfo]:
        """The topic's complete segments as first listed here, by first seq (a listing of
        thousands of files costs tens of ms: its other readers share this one)."""
        return list(self._segments(topic_id).values())

    def topic_gone(self, topic_id: int) -> bool:
        """Whether the topic has no segment directory in either tier (deleted)."""
        name = topic_dir_name(topic_id)
        dirs = [self.root / "topics" / name]
        if self.cold_root is not None:
            dirs.append(self.cold_root / "topics" / name)
        return not any(self.fs.exists(d) for d in dirs)

    def deleted(self, info: SegmentInfo) -> list[int] | None:
        """The seqs flagged deleted in `info`'s file when it was read, if it was."""
        return self._deleted.get(info.data_path)


def held_runs(
    infos: Iterable[SegmentInfo], head: int, payload_cache: int = 0
) -> list[tuple[int, int]]:
    """The seq runs of the segments in `infos` that step 8 reuses at any head from `head`
    on (last seq within it), without the newest `payload_cache` seqs, ascending."""
    reused = [i for i in infos if i.last_seq <= head]
    if not reused:
        return []
    keep_from = max(i.last_seq for i in reused) + 1 - payload_cache
    return sorted(
        (i.first_seq, min(i.last_seq, keep_from - 1)) for i in reused if i.first_seq < keep_from
    )


def _drop_orphan_routers(registry: Registry, routers: RouterTable) -> None:
    """§6 step 9, first half: a router never outlives its endpoints. (The second half,
    re-deriving the copies, runs once the WAL is open: the forwarding step is the live one.)
    A cursor above its source's recovered head (a `memory` or `ephemeral` source lost its
    unsnapshotted tail) comes back down, so the records reissued at those seqs are
    forwarded."""
    for r in routers.all():
        s, d = registry.get(r.spec.source), registry.get(r.spec.dest)
        if s is None or d is None:
            routers.remove(r.spec.name)
            continue
        r.cursor = min(r.cursor, s.head)


def _group_bytes(fs: Fs, g: WalGroup, starts: dict[str, Position]) -> int:
    start_idx, start_off = starts.get(g.key, (1, 0))
    total = 0
    for idx, path in g.files:
        if idx < start_idx:
            continue
        total += max(0, fs.file_size(path) - (start_off if idx == start_idx else 0))
    return total


_APPEND = int(FrameType.APPEND)
# Only these frames can add, drop or re-class a topic (the persistent set changes).
_REGISTRY_FRAMES = frozenset(
    int(t) for t in (FrameType.TOPIC_CREATE, FrameType.CONFIG_UPDATE, FrameType.TOPIC_DELETE)
)


def _apply_all(rp: _Replay, chunks: Iterable[list[RawFrame]]) -> None:
    """The replay hot loop: consecutive Append frames of one topic are gathered into
    columns and applied as one run (`replay_rows`); control frames go through
    `_apply_control`, after the run before them. The record cap is applied after every
    append, as the live write path does after every publish: it counts live records, so it
    is not derivable from the head alone once deletes interleave with writes (SEMANTICS
    §4.2) — capped topics take the per-record path.

    Each chunk is cut into `append_runs`: the first frame of a run is applied frame by
    frame; when it started or extended the column run, the rest of the run can only
    extend it too, and goes in as column slices (payloads decoded together)."""
    by_id = rp.registry.by_id
    persistent, caps = _replayed_topics(rp)
    run = _AppendRun()
    add_ts, add_data, add_meta = run.ts.append, run.data.append, run.meta.append
    add_node, add_tag = run.node.append, run.tag.append
    blob = decode_blob

    def apply_frames(frames: Iterable[RawFrame]) -> None:
        nonlocal persistent, caps
        for _end, ftype, flags, tid, seq, ts, node, tag, data in frames:
            if ftype != _APPEND:
                run.flush()
                frame = WalFrame(FrameType(ftype), flags, tid, seq, ts, node, tag, data)
                _apply_control(rp, frame)
                if ftype in _REGISTRY_FRAMES:
                    persistent, caps = _replayed_topics(rp)
                continue
            if run.topic_id == tid and seq == run.next_seq:
                d, m = blob(data)
                add_ts(ts)
                add_data(d)
                add_meta(m)
                add_node(node)
                add_tag(tag)
                run.next_seq = seq + 1
                continue
            if tid not in persistent:
                continue
            run.flush()
            t = by_id[tid]
            if seq <= t.head:
                continue
            if seq != t.head + 1:
                # Seqs skipped in the WAL are holes: failed writes (SEMANTICS §3.1) or the
                # padding of an earlier crash's head reservation (§6 step 4).
                t.append_holes(seq - 1, ts)
            d, m = blob(data)
            cap = caps.get(tid)
            if cap is not None:
                t.replay_slot(seq, ts, d, m, node, tag)
                if t.count > cap:
                    t.apply_record_cap()
                continue
            run.start(t, seq)
            add_ts(ts)
            add_data(d)
            add_meta(m)
            add_node(node)
            add_tag(tag)

    for chunk in chunks:
        if not chunk:
            continue
        _, ftypes, _, tids, seqs, tss, nodes, tags, blobs = zip(*chunk, strict=True)
        for a, b in append_runs(ftypes, tids, seqs):
            if b - a == 1:
                apply_frames(chunk[a:b])
                continue
            tid, seq = tids[a], seqs[a]
            if tid not in persistent:
                continue  # appends of a topic not replayed here (as frame by frame)
            apply_frames(chunk[a : a + 1])
            if run.topic_id != tid or run.next_seq != seq + 1:
                apply_frames(chunk[a + 1 : b])  # skipped or capped: frame by frame
                continue
            data, meta = decode_blobs(blobs[a + 1 : b])
            run.extend(tss[a + 1 : b], data, meta, nodes[a + 1 : b], tags[a + 1 : b])
            run.next_seq = seqs[b - 1] + 1
    run.flush()


class _AppendRun:
    """Appends to one topic with consecutive seqs from its head + 1, gathered into columns
    (filled by `_apply_all`, which holds their `append`s) and not applied yet."""

    __slots__ = ("data", "first_seq", "meta", "next_seq", "node", "tag", "topic", "topic_id", "ts")

    def __init__(self) -> None:
        self.topic: TopicState | None = None
        self.topic_id = -1  # no topic has it: nothing is being gathered
        self.first_seq = self.next_seq = 0
        self.ts: list[int] = []
        self.data: list[bytes | None] = []
        self.meta: list[bytes | None] = []
        self.node: list[str | None] = []
        self.tag: list[str | None] = []

    def start(self, t: TopicState, seq: int) -> None:
        self.topic, self.topic_id = t, t.topic_id
        self.first_seq, self.next_seq = seq, seq + 1

    def extend(
        self,
        ts: Sequence[int],
        data: list[bytes],
        meta: list[bytes | None],
        node: Sequence[str | None],
        tag: Sequence[str | None],
    ) -> None:
        self.ts.extend(ts)
        self.data.extend(data)
        self.meta.extend(meta)
        self.node.extend(node)
        self.tag.extend(tag)

    def flush(self) -> None:
        t = self.topic
        if t is None:
            return
        t.replay_rows(self.first_seq, self.ts, self.data, self.meta, self.node, self.tag)
        self.topic, self.topic_id = None, -1
        for column in (self.ts, self.data, self.meta, self.node, self.tag):
            column.clear()  # cleared, not replaced: `_apply_all` holds their `append`s


def _replayed_topics(rp: _Replay) -> tuple[set[int], dict[int, int]]:
    """Ids of the persistent topics whose records are replayed, and their record caps."""
    registry = rp.registry
    persistent = {tid for tid, t in registry.by_id.items() if t.persistent and not rp.skips(t)}
    caps = {
        tid: t.config.cap_records
        for tid, t in registry.by_id.items()
        if tid in persistent and t.config.cap_records > 0
    }
    return persistent, caps


def _apply_control(rp: _Replay, f: WalFrame) -> None:
    registry = rp.registry
    ft = f.type
    if ft in (FrameType.TOPIC_CREATE, FrameType.CONFIG_UPDATE):
        body = TopicCreateBody.decode(f.data)
        config = TopicConfig.from_json(body.config_json)
        registry.note_id(f.topic_id)
        existing = registry.get(body.name)
        if existing is not None and existing.topic_id > f.topic_id:
            return
        if existing is not None and existing.topic_id == f.topic_id:
            existing.config = config
            rp.attach_segments(existing)
            # The pass runs when the frame was committed, as the live one did: against the
            # restart's clock, a TTL that a later frame lifted or raised would expire
            # records that never expired live. What live passes cut later came with their
            # own EvictWatermark frames (STORAGE §6 step 4, §7).
            cut = existing.retention_cut(f.ts)
            if cut is not None:
                existing.apply_cut(cut)
            return
        if existing is not None:
            registry.remove(existing)
        t = TopicState(body.name, f.topic_id, config, frozen=FrozenSlots(mem=rp.memory))
        rp.attach_segments(t)
        registry.add(t)
        return
    if ft is FrameType.ROUTER_CREATE:
        rp.routers.replay_create(RouterCreateBody.decode(f.data))
        return
    if ft is FrameType.ROUTER_DELETE:
        rp.routers.replay_delete(RouterDeleteBody.decode(f.data).name)
        return
    if ft is FrameType.TOPIC_DELETE:
        name = TopicDeleteBody.decode(f.data).name
        gone = registry.get(name)
        if gone is not None and gone.topic_id == f.topic_id:
            registry.remove(gone)
        return
    target = registry.by_id.get(f.topic_id)
    if target is not None and not rp.skips(target):
        _apply_topic_frame(target, f)


def _apply_topic_frame(t: TopicState, f: WalFrame) -> None:
    ft = f.type
    if ft is FrameType.DELETE:
        if not t.persistent:
            return
        d = DeleteBody.decode(f.data)
        bound = d.bound_head if d.bound_head is not None else t.head + 1
        # The live head included any reservation padding of an earlier crash; replay pads
        # only at the end (step 7), so the clamp uses the reservation seen so far.
        ceiling = max(t.head, t.reservation)
        # Seqs past the ceiling were router copies (never logged): re-derived at step 9,
        # maybe elsewhere, so a delete by seq must not meet them. A delete whose promise
        # covers copies settled them in a snapshot first (`Engine.delete_records`).
        t.apply_delete(d.before_seq, d.match, bound, d.seqs, ceiling=ceiling)
    elif ft is FrameType.EVICT_WATERMARK:
        w = EvictWatermarkBody.decode(f.data)
        t.evict_floor = max(t.evict_floor, w.evict_floor)
        t.expiry_floor = max(t.expiry_floor, w.expiry_floor)
        t.pop_front()
    elif ft is FrameType.LEASE:
        replay_lease(t, f)
    elif ft is FrameType.HEAD_WATERMARK:
        t.reservation = max(t.reservation, HeadWatermarkBody.decode(f.data).reserved_head)


def pad_to_floors(topics: Iterable[TopicState], now: int) -> None:
    """Seqs up to each topic's highest durable floor become holes, once every router
    re-derived what it could (after STORAGE §6 step 9). A floor above the replayed head
    covers records that no replay brings back — router copies whose router was deleted, or
    whose source lost them (ephemeral) — and seqs below it handed out again would be new
    acked writes invisible at once (SEMANTICS §12 invariants 1 and 3)."""
    for t in topics:
        top = max(t.evict_floor, t.expiry_floor, t.source_trim_floor, t.delete_floor)
        if top > t.head:
            t.append_holes(top, now)
            t.pop_front()
            t.reserved = t.head
            t.reservation = t.reservation_durable = t.head


def _reconcile_segments(
    t: TopicState, known: Callable[[SegmentInfo], list[int] | None] = lambda _i: None
) -> None:
    """§6 step 8: reuse sealed segments within the head, drop the rest, re-apply flags
    (`known`: the flags of files already verified and read, e.g. by the restore)."""
    segs = t.segments
    if segs is None:
        return
    keep = []
    for info in segs.store.list():
        if info.last_seq > t.head:
            segs.store.drop(info)
        else:
            keep.append(info)
    flagged: list[int] = []
    for info in keep:
        seen = known(info)
        deleted = segs.store.read_del_flags(info) if seen is None else seen
        flagged.extend(s for s in deleted if t.is_live(s))
    if flagged:
        t.apply_delete(None, None, 0, flagged)
    segs.set_sealed(keep)
    segs.active_first = max((i.last_seq for i in keep), default=t.base_seq - 1) + 1
    segs.payload_dropped_below = 1
    segs.drop_cached_payloads(t)
    segs.drop_dead(t)
