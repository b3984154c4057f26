"""Startup recovery (STORAGE §6): snapshot → WAL replay → truncate → head reservations →
segment reconciliation. Deterministic and idempotent: running it again over the same
files converges to the same state, because every frame is applied by rules that ignore
what is already reflected (`seq <= head`, ids, floors only rise).

Replay applies retention cuts in memory without logging them: they are re-derivable from
the replayed records and the clock, and the next live retention pass logs what it moves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from seglog.core.framing import (
    DeleteBody,
    EvictWatermarkBody,
    FrameType,
    HeadWatermarkBody,
    RawFrame,
    TopicCreateBody,
    TopicDeleteBody,
    WalFrame,
    decode_blob,
)
from seglog.engine.snapshots import restore_topic, snapshot_positions
from seglog.engine.topic import TopicState
from seglog.model import TopicConfig
from seglog.storage.datadir import list_topic_ids
from seglog.storage.snapshot import SnapshotMark, load_latest_snapshot
from seglog.storage.wal import (
    WalGroup,
    discover_groups,
    read_group_raw,
    replay_order,
    truncate_tails,
)

if TYPE_CHECKING:
    from seglog.engine.engine import Engine

Position = tuple[int, int]


def recover(
    engine: Engine, on_progress: Callable[[float], None] | None = None
) -> tuple[dict[str, Position], bool]:
    """Returns the WAL tails to open the writers at, and whether the shard layout changed
    (the caller then snapshots before accepting any write, §6 step 5)."""
    dd = engine.datadir
    assert dd is not None
    fs = engine.fs
    starts: dict[str, Position] = {}
    snap = load_latest_snapshot(fs, dd.meta_dir)
    if snap is not None:
        engine.next_topic_id = max(engine.next_topic_id, int(snap.get("next_topic_id", 1)))
        for entry in snap.get("topics", []):
            t = restore_topic(entry)
            engine.register_topic(t)
        starts = snapshot_positions(snap)
        engine.last_snapshot = SnapshotMark(int(snap["id"]), starts)

    groups = discover_groups(fs, dd.wal_dir)
    shards = max(1, engine.options.wal_shards)
    ordered = replay_order(groups, shards)
    current = {_group_key(i, shards) for i in range(shards)}
    total_bytes = sum(_group_bytes(engine, g, starts) for g in ordered) or 1
    done_bytes = 0

    def progress(nbytes: int) -> None:
        nonlocal done_bytes
        done_bytes += nbytes
        engine.replay_progress = min(done_bytes / total_bytes, 0.999)
        if on_progress is not None:
            on_progress(engine.replay_progress)

    # Frames of one topic past the checkpoints are all in one group: every layout change
    # is followed by a snapshot before any write (below), so groups replay independently,
    # the old layout's first.
    ends: dict[str, Position] = {}
    for g in ordered:
        _apply_all(engine, _frames(engine, g, starts, progress, ends))
    layout_changed = bool(groups) and {g.key for g in groups} != current

    tails = truncate_tails(fs, groups, engine.options.wal_file_size, ends)
    now = engine.clock.now_ms()
    for t in list(engine.by_id.values()):
        if t.persistent and t.reservation > t.head:
            # Reserved-but-unwritten seqs become silent holes (§6 step 7): a disk write, or
            # a class change to a persistent class, may have acked seqs up to there.
            t.append_holes(t.reservation, now)
            t.pop_front()
        t.reserved = t.head
        t.reservation = t.reservation_durable = t.head
        _reconcile_segments(engine, t)
    known = set(engine.by_id)
    for root in (dd.topics_dir, dd.cold_topics_dir):
        if root is None:
            continue
        for tid in list_topic_ids(fs, root):
            if tid not in known:
                fs.rmtree(root / f"{tid:08X}")
    return {k: v for k, v in tails.items() if k in current}, layout_changed


def _group_key(shard: int, shards: int) -> str:
    return "" if shards == 1 else f"shard-{shard:02d}"


def _group_bytes(engine: Engine, g: WalGroup, starts: dict[str, Position]) -> int:
    start_idx, start_off = starts.get(g.key, (1, 0))
    total = 0
    for idx, path in g.files:
        if idx < start_idx:
            continue
        size = engine.fs.file_size(path)
        total += max(0, size - (start_off if idx == start_idx else 0))
    return total


def _frames(
    engine: Engine,
    g: WalGroup,
    starts: dict[str, Position],
    progress: Callable[[int], None],
    ends: dict[str, Position],
) -> Iterator[RawFrame]:
    start = starts.get(g.key, (1, 0))
    last_idx, last_end = start
    pending = 0
    for idx, raw in read_group_raw(engine.fs, g, start, ends):
        if idx != last_idx:
            last_idx, last_end = idx, 0
        pending += raw[0] - last_end
        last_end = raw[0]
        if pending >= 1 << 20:
            progress(pending)
            pending = 0
        yield raw
    progress(pending)


_APPEND = int(FrameType.APPEND)
# Only these frames can add, drop or re-class a topic (the persistent set changes).
_REGISTRY_FRAMES = frozenset(
    int(t) for t in (FrameType.TOPIC_CREATE, FrameType.CONFIG_UPDATE, FrameType.TOPIC_DELETE)
)


def _apply_all(engine: Engine, frames: Iterable[RawFrame]) -> None:
    """The replay hot loop: Append frames are applied inline; control frames go through
    `_apply_control`. The record cap is applied after every append, as the live write path
    does after every publish: it counts live records, so it is not derivable from the head
    alone once deletes interleave with writes (SEMANTICS §4.2)."""
    by_id = engine.by_id
    persistent, caps = _replayed_topics(engine)
    for _end, ftype, flags, tid, seq, ts, node, tag, data in frames:
        if ftype != _APPEND:
            frame = WalFrame(FrameType(ftype), flags, tid, seq, ts, node, tag, data)
            _apply_control(engine, frame)
            if ftype in _REGISTRY_FRAMES:
                persistent, caps = _replayed_topics(engine)
            continue
        if tid not in persistent:
            continue
        t = by_id[tid]
        if seq <= t.head:
            continue
        if seq != t.head + 1:
            # Seqs skipped in the WAL are holes: failed writes (SEMANTICS §3.1) or the
            # padding of an earlier crash's head reservation (§6 step 4).
            t.append_holes(seq - 1, ts)
        d, m = decode_blob(data)
        t.replay_slot(seq, ts, d, m, node, tag)
        cap = caps.get(tid)
        if cap is not None and t.count > cap:
            t.apply_record_cap()


def _replayed_topics(engine: Engine) -> tuple[set[int], dict[int, int]]:
    """Ids of the persistent topics, and the record caps among them."""
    persistent = {tid for tid, t in engine.by_id.items() if t.persistent}
    caps = {
        tid: t.config.cap_records
        for tid, t in engine.by_id.items()
        if tid in persistent and t.config.cap_records > 0
    }
    return persistent, caps


def _apply_control(engine: Engine, f: WalFrame) -> None:
    ft = f.type
    if ft in (FrameType.TOPIC_CREATE, FrameType.CONFIG_UPDATE):
        body = TopicCreateBody.decode(f.data)
        config = TopicConfig.from_json(body.config_json)
        engine.next_topic_id = max(engine.next_topic_id, f.topic_id + 1)
        existing = engine.topics.get(body.name)
        if existing is not None and existing.topic_id > f.topic_id:
            return
        if existing is not None and existing.topic_id == f.topic_id:
            engine.apply_config(existing, config)
            _retain_in_memory(engine, existing)
            return
        if existing is not None:
            engine.unregister_topic(existing)
        engine.register_topic(TopicState(body.name, f.topic_id, config))
        return
    if ft is FrameType.TOPIC_DELETE:
        name = TopicDeleteBody.decode(f.data).name
        t = engine.topics.get(name)
        if t is not None and t.topic_id == f.topic_id:
            engine.unregister_topic(t)
        return
    t = engine.by_id.get(f.topic_id)
    if t is None:
        return
    if ft is FrameType.DELETE:
        if not t.persistent:
            return
        d = DeleteBody.decode(f.data)
        bound = d.bound_head if d.bound_head is not None else t.head + 1
        t.apply_delete(d.before_seq, d.match, bound, d.seqs)
    elif ft is FrameType.EVICT_WATERMARK:
        w = EvictWatermarkBody.decode(f.data)
        t.evict_floor = max(t.evict_floor, w.evict_floor)
        t.expiry_floor = max(t.expiry_floor, w.expiry_floor)
        t.pop_front()
    elif ft is FrameType.HEAD_WATERMARK:
        t.reservation = max(t.reservation, HeadWatermarkBody.decode(f.data).reserved_head)


def _retain_in_memory(engine: Engine, t: TopicState) -> None:
    cut = t.retention_cut(engine.clock.now_ms())
    if cut is not None:
        t.apply_cut(cut)


def _reconcile_segments(engine: Engine, t: TopicState) -> None:
    """§6 step 8: reuse sealed segments within the head, drop the rest, re-apply flags."""
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
        flagged.extend(s for s in segs.store.read_del_flags(info) if t.is_live(s))
    if flagged:
        t.apply_delete(None, None, 0, flagged)
    segs.set_sealed(keep)
    segs.active_first = max((i.last_seq for i in keep), default=t.base_seq - 1) + 1
    segs.payload_dropped_below = 1
    segs.drop_cached_payloads(t)
    segs.drop_dead(t)
