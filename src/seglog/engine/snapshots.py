"""Metadata snapshots (STORAGE §5): capture the engine into the §5.2 body and restore it.

A snapshot is taken by one thread at a time (the engine serializes `take`). Each topic is
captured under its lock after every already-submitted op has been applied, so the
captured head is exact and every frame after the recorded WAL positions is either already
reflected (and ignored on replay because `seq <= head`) or replayed idempotently.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from seglog.core.jsonbytes import json_bytes
from seglog.core.payload_blob import decode_blob
from seglog.engine.publisher import Publisher
from seglog.engine.registry import Registry
from seglog.engine.routers import RouterTable
from seglog.engine.snapshot_body import Chunk, ChunkKey, RenderCache, TopicRender, body_pieces
from seglog.engine.topic import Rows, TopicState
from seglog.model import TopicConfig
from seglog.storage.fs import Fs
from seglog.storage.segment import PinnedSegment, SegmentStore
from seglog.storage.snapshot import (
    RECORDS_SKIPPED,
    SnapshotMark,
    SnapshotRecord,
    next_snapshot_id,
    write_snapshot_stream,
)
from seglog.storage.wal import Wal
from seglog.storage.wal_commit import WalError


def load_payloads(
    rows: Rows, store: SegmentStore, pins: list[PinnedSegment], start: int = 0, end: int = -1
) -> None:
    """Fill in the live payloads of `rows[start:end]` that left memory, a segment run at a
    time, from segments pinned under the lock (no lock needed now: sealed payloads never
    change)."""
    data, meta, dead = rows.data, rows.meta, rows.dead
    first, n = rows.first_seq, len(rows.data) if end < 0 else end
    for pin in pins:
        lo = max(pin.info.first_seq - first, start)
        hi = min(pin.info.last_seq - first + 1, n)
        if hi <= lo:
            continue
        if not any(data[k] is None and not dead[k] for k in range(lo, hi)):
            continue
        for k, blob in enumerate(store.read_run(pin, first + lo, first + hi - 1), lo):
            if data[k] is None and not dead[k]:
                data[k], meta[k] = decode_blob(blob)


def records_json(rows: Rows) -> bytes:
    """The §5.2 `records` array of the live rows."""
    return b"[" + records_text(rows, 0, len(rows.ts)) + b"]"


def records_text(rows: Rows, start: int, end: int) -> bytes:
    """The live records of `rows[start:end]` as comma-separated §5.2 record objects."""
    parts: list[bytes] = []
    add = parts.append
    seq = rows.first_seq + start - 1
    s = slice(start, end)
    for dead, ts, node, tag, data, meta, size in zip(
        rows.dead[s],
        rows.ts[s],
        rows.node[s],
        rows.tag[s],
        rows.data[s],
        rows.meta[s],
        rows.size[s],
        strict=True,
    ):
        seq += 1
        if dead:
            continue
        if data is None:  # load_payloads fills every live payload
            raise RuntimeError(f"snapshot capture lost the payload of seq {seq}")
        if node is None and tag is None and meta is None:
            add(b'{"seq":%d,"ts":%d,"data":%b,"bytes":%d}' % (seq, ts, data, size))
            continue
        rec: dict[str, Any] = {"seq": seq, "ts": ts}
        if node is not None:
            rec["node"] = node
        if tag is not None:
            rec["tag"] = tag
        rec["data"] = orjson.Fragment(data)
        if meta is not None:
            rec["meta"] = orjson.Fragment(meta)
        rec["bytes"] = size
        add(orjson.dumps(rec))
    return b",".join(parts)


def capture_topic(t: TopicState) -> tuple[dict[str, Any], Rows | None, list[PinnedSegment]]:
    """Under `t.lock` with no pending ops: the §5.2 topic entry without its `records`, the
    rows to render them from once the lock is released (None for ephemeral topics), and the
    sealed segments holding payloads that left memory, pinned. Only list copies here."""
    entry: dict[str, Any] = {
        "name": t.name,
        "topic_id": t.topic_id,
        "epoch": t.epoch,
        "config": t.config.to_dict(),
    }
    if not t.persistent:
        entry.update(
            base_seq=t.head + 1,
            head_seq=t.head,
            evict_floor=0,
            expiry_floor=0,
            delete_floor=0,
            source_trim_floor=0,
            delete_below=0,
            bytes_retained=0,
            live_count=0,
            records=[],
        )
        return entry, None, []
    start = max(t.front, t.earliest() - t.origin)
    end = len(t.ts)
    rows = t.rows(t.origin + start, t.origin + end - 1)
    segs = t.segments
    pins: list[PinnedSegment] = []
    if segs is not None and end > start:
        # Payloads leave memory oldest first, so only rows below this bound can lack one.
        dropped_end = min(segs.payload_dropped_below, rows.first_seq + end - start)
        if dropped_end > rows.first_seq:
            pins = segs.pin_range(rows.first_seq, dropped_end - 1)
    entry.update(
        base_seq=t.base_seq,
        head_seq=t.head,
        evict_floor=t.evict_floor,
        expiry_floor=t.expiry_floor,
        delete_floor=t.delete_floor,
        source_trim_floor=t.source_trim_floor,
        delete_below=0,
        bytes_retained=t.bytes,
        live_count=t.count,
    )
    return entry, rows, pins


HeldRuns = Sequence[tuple[int, int]]  # inclusive seq runs whose payloads a sealed segment holds


def restore_topic(entry: dict[str, Any], held: HeldRuns = ()) -> TopicState:
    """Inverse of `capture_topic`: seqs in `[base_seq, head_seq]` missing from `records`
    become deleted slots. Records in the `held` runs (inclusive, ascending) are restored
    without their payloads: the caller knows a sealed segment that recovery reuses holds
    them (STORAGE §6 step 8 drops those payloads from memory anyway, and copying millions
    of them out of the snapshot first is most of a restore's time)."""
    config = TopicConfig.from_dict(entry["config"])
    t = TopicState(
        str(entry["name"]), int(entry["topic_id"]), config, epoch=int(entry.get("epoch", 1))
    )
    head = int(entry["head_seq"])
    # A topic whose records a reader left undecoded comes back empty at its head.
    base = head + 1 if entry.get(RECORDS_SKIPPED) else min(int(entry["base_seq"]), head + 1)
    t.origin = max(base, 1)
    t.head = t.origin - 1
    t.reserved = t.head
    records = entry.get("records", [])
    if records and isinstance(records[0], SnapshotRecord):
        _restore_raw(t, records, head, held)
    else:
        _restore_parsed(t, records, head)
    if t.head < head:
        t.append_holes(head, t.ts[-1] if t.ts else 0)
    t.head = head
    t.reserved = head
    t.reservation = t.reservation_durable = head
    t.evict_floor = int(entry.get("evict_floor", 0))
    t.expiry_floor = int(entry.get("expiry_floor", 0))
    t.delete_floor = int(entry.get("delete_floor", 0))
    t.source_trim_floor = int(entry.get("source_trim_floor", 0))
    t.pop_front()
    return t


def _restore_parsed(t: TopicState, records: list[dict[str, Any]], head: int) -> None:
    """Records of a body parsed generically (dicts holding parsed JSON values)."""
    replay, dumps, origin = t.replay_slot, json_bytes, t.origin
    for rec in records:
        seq = int(rec["seq"])
        if seq < origin or seq > head:
            continue
        ts = int(rec["ts"])
        if seq != t.head + 1:
            if seq <= t.head:
                raise ValueError(f"snapshot of {t.name!r}: records out of order at seq {seq}")
            t.append_holes(seq - 1, ts)
        meta = rec.get("meta")
        meta_json = None if meta is None else dumps(meta)
        replay(seq, ts, dumps(rec["data"]), meta_json, rec.get("node"), rec.get("tag"))


def _restore_raw(
    t: TopicState, records: list[SnapshotRecord], head: int, held: HeldRuns = ()
) -> None:
    """Records decoded with their JSON text kept (the engine wrote it compact), restored a
    run of consecutive seqs at a time."""
    origin = t.origin
    if records[0].seq < origin or records[-1].seq > head:
        records = [r for r in records if origin <= r.seq <= head]
        if not records:
            return
    seqs = np.fromiter((r.seq for r in records), np.int64, len(records))
    steps = np.diff(seqs)
    if seqs[0] <= t.head or (steps <= 0).any():
        at = int(seqs[0]) if seqs[0] <= t.head else int(seqs[1:][steps <= 0][0])
        raise ValueError(f"snapshot of {t.name!r}: records out of order at seq {at}")
    ts = [r.ts for r in records]
    spans = _unheld_spans(seqs, held)
    sizes: list[int] | None = None
    if spans == [(0, len(records))]:
        data: list[bytes | None] = [bytes(r.data) for r in records]
        meta: list[bytes | None] = [bytes(r.meta) if len(r.meta) else None for r in records]
    else:
        data = [None] * len(records)
        meta = [None] * len(records)
        for a, b in spans:
            data[a:b] = [bytes(r.data) for r in records[a:b]]
            meta[a:b] = [bytes(r.meta) if len(r.meta) else None for r in records[a:b]]
        data_lens = [len(r.data) for r in records]
        meta_lens = [len(r.meta) for r in records]
        sizes = list(map(operator.add, data_lens, meta_lens)) if any(meta_lens) else data_lens
        if 4 in meta_lens:
            for k, n in enumerate(meta_lens):
                if n == 4 and bytes(records[k].meta) == b"null":
                    sizes[k] -= 4  # counted as no meta, as below
    if b"null" in meta:  # a JSON null meta is no meta, as in a parsed body
        meta = [None if m == b"null" else m for m in meta]
    node = [r.node for r in records]
    tag = [r.tag for r in records]
    starts = [0, *(np.flatnonzero(steps != 1) + 1).tolist(), len(records)]
    for a, b in itertools.pairwise(starts):
        first = int(seqs[a])
        if first != t.head + 1:
            t.append_holes(first - 1, ts[a])
        t.replay_rows(
            first,
            ts[a:b],
            data[a:b],
            meta[a:b],
            node[a:b],
            tag[a:b],
            None if sizes is None else sizes[a:b],
        )


def _unheld_spans(seqs: npt.NDArray[np.int64], held: HeldRuns) -> list[tuple[int, int]]:
    """Index spans `[a, b)` of the ascending `seqs` that no `held` run covers."""
    out: list[tuple[int, int]] = []
    at = 0
    for first, last in held:
        a = int(np.searchsorted(seqs, first, "left"))
        b = int(np.searchsorted(seqs, last, "right"))
        if a >= b:
            continue
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < len(seqs):
        out.append((at, len(seqs)))
    return out


def take(
    registry: Registry,
    wal: Wal,
    publisher: Publisher,
    fs: Fs,
    meta_dir: Path,
    now: int,
    previous: SnapshotMark | None,
    routers: RouterTable | None = None,
    cache: RenderCache | None = None,
) -> SnapshotMark:
    """STORAGE §5.3 (the caller serializes snapshots). Returns the new snapshot's mark;
    raises on failure (then nothing is deleted). `previous` is the newest snapshot on disk,
    kept beside the new one. Router advancement is blocked from the checkpoint until the
    routers are captured (steps 3–5), so each captured cursor matches its captured dest.
    `cache` (the engine's) lets unchanged sealed chunks be copied from the previous file."""
    table = routers if routers is not None else RouterTable()
    cache = cache if cache is not None else RenderCache()
    # Control-plane changes commit their frame and apply it under the registry lock.
    # Holding it across the checkpoint puts each change wholly before the marks (and in
    # this capture) or wholly after them (and in the replayed WAL), never between.
    with registry.lock:
        positions = wal.checkpoint(now)
        listed = registry.all()
        next_topic_id = registry.next_topic_id
    with table.lock:
        topics = _capture_topics(listed, publisher, now)
        captured_routers = table.capture()
    head: dict[str, Any] = {
        "ts": now,
        "next_topic_id": next_topic_id,
        "checkpoint": {
            "last_checkpoint_seq": 0,
            "groups": [
                {"key": key, "wal_idx": idx, "wal_offset": off}
                for key, (idx, off) in sorted(positions.items())
            ],
        },
    }
    snap_id = next_snapshot_id(fs, meta_dir)
    chunks: dict[ChunkKey, Chunk] = {}
    pieces = body_pieces(fs, snap_id, head, topics, captured_routers, cache, chunks)
    keep = previous.id if previous else None
    try:
        path = write_snapshot_stream(fs, meta_dir, snap_id, pieces, keep)
    except BaseException:
        cache.forget()
        raise
    cache.path, cache.chunks = path, chunks
    # Two snapshots stay: the WAL the older one replays from must stay too, so that a
    # damaged newest snapshot falls back to it without losing anything.
    wal.delete_absorbed(previous.positions if previous else None)
    return SnapshotMark(snap_id, positions)


def _capture_topics(listed: list[TopicState], publisher: Publisher, now: int) -> list[TopicRender]:
    """Step 4 for every listed topic still registered: its §5.2 entry and what renders
    its records once the lock is released."""
    topics: list[TopicRender] = []
    for t in listed:
        head = None
        with t.lock:
            if t.deleted:
                continue  # dropped after the marks: replay applies its TopicDelete
            while t.pending:
                try:
                    t.pending[0].commit.wait()
                except WalError:
                    pass
                head = publisher.apply_ready(t, now)
            entry, rows, pins = capture_topic(t)
            sealed: list[tuple[int, int]] = []
            if rows is not None and t.segments is not None and rows.ts:
                last = rows.first_seq + len(rows.ts) - 1
                sealed = [
                    (i.first_seq, i.last_seq) for i in t.segments.overlapping(rows.first_seq, last)
                ]
            # Every HeadWatermark logged so far sits before the checkpoint and will be
            # skipped by replay, so the next disk write — also after a later class change
            # back to disk — must log a fresh reservation after it.
            t.reservation = t.reservation_durable = t.head
            t.pre_reservation = None  # submitted before the checkpoint, maybe: not trusted
        if head is not None:
            publisher.notify(t.name, head)
        topics.append(TopicRender(t.topic_id, entry, rows, sealed, _renderer(t, pins)))
    return topics


def _renderer(t: TopicState, pins: list[PinnedSegment]) -> Callable[[Rows, int, int], bytes]:
    def render(rows: Rows, start: int, end: int) -> bytes:
        if pins:
            assert t.segments is not None
            load_payloads(rows, t.segments.store, pins, start, end)
        text = records_text(rows, start, end)
        # Rendered: let go of the payloads now, or the capture holds every payload it read
        # back until the whole snapshot is written (the rows are a copy, used once).
        n = end - start
        rows.data[start:end] = [None] * n
        rows.meta[start:end] = [None] * n
        return text

    return render


def snapshot_positions(body: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """The per-group WAL positions a snapshot body records (where its replay starts)."""
    return {
        str(g["key"]): (int(g["wal_idx"]), int(g["wal_offset"]))
        for g in body.get("checkpoint", {}).get("groups", [])
    }
