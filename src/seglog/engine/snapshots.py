"""Metadata snapshots (STORAGE §5): capture the engine into the §5.2 body and restore it.

A snapshot is taken by one thread at a time (the engine serializes `take`). Each topic is
captured under its lock after every already-submitted op has been applied, so the
captured head is exact and every frame after the recorded WAL positions is either already
reflected (and ignored on replay because `seq <= head`) or replayed idempotently.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import orjson

from seglog.core.jsonbytes import json_bytes
from seglog.core.segment_run import decoded_labels, shared_ints
from seglog.engine.frozen_slots import HEAP, CodedLabels, ColumnMemory, FrozenSlots
from seglog.engine.publisher import Publisher
from seglog.engine.registry import Registry
from seglog.engine.routers import RouterTable
from seglog.engine.snapshot_body import SealedPart, TopicRender, body_pieces
from seglog.engine.snapshot_pins import SnapshotPins
from seglog.engine.topic import Rows, TopicState
from seglog.model import TopicConfig
from seglog.storage.fs import Fs
from seglog.storage.snapshot import (
    RECORDS_SKIPPED,
    SealedSegmentMissingError,
    SegmentRef,
    SnapshotMark,
    SnapshotRecord,
    dead_flags,
    next_snapshot_id,
    segment_refs,
    write_snapshot_stream,
)
from seglog.storage.wal import Wal
from seglog.storage.wal_commit import WalError


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
        if data is None:  # only records in a sealed segment leave memory
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


def capture_topic(t: TopicState, pins: SnapshotPins) -> TopicRender:
    """Under `t.lock` with no pending ops: the §5.2 topic entry without its `records`, and
    what renders them once the lock is released: the retained range's dead flags, the
    sealed segments overlapping it (held in `pins` from here on) and copies of the rows no
    sealed segment holds. Copies only the rows that are rendered (the unsealed tail,
    mostly), so the lock is held for the tail's size, not the topic's."""
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
        return TopicRender(t.topic_id, entry)
    start = max(t.front, t.earliest() - t.origin)
    end = t.slot_count
    first, last = t.origin + start, t.origin + end - 1
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
    parts: list[Rows | SealedPart] = []
    at = first
    sealed = t.segments.overlapping(first, last) if t.segments is not None and end > start else []
    for info in sealed:
        lo, hi = max(info.first_seq, at), min(info.last_seq, last)
        if hi < lo:
            continue
        if lo > at:  # rows before this segment that no sealed segment holds
            parts.append(t.rows(at, lo - 1))
        parts.append(SealedPart(info.first_seq, info.last_seq, lo, hi))
        at = hi + 1
    if at <= last:
        parts.append(t.rows(at, last))
    pins.hold((t.topic_id, info.first_seq) for info in sealed)
    return TopicRender(t.topic_id, entry, first, bytearray(t.dead[start:end]), parts, _render)


HeldRuns = Sequence[tuple[int, int]]  # inclusive seq runs whose payloads a sealed segment holds


@dataclass(slots=True)
class SealedRows:
    """`ts`, record size, node and tag of every seq of a sealed segment, from its file
    (labels as a table and codes, `FrozenSlots`' form)."""

    ts: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]
    node: CodedLabels
    tag: CodedLabels


# (topic_id, reference) -> the referenced segment's rows, or None when its files are gone
ReadSealed = Callable[[int, SegmentRef], SealedRows | None]
MissingRuns = list[tuple[int, int, int]]  # (topic_id, first seq, last seq)


# A restore of many referenced segments lets its index columns leave the process (scratch
# memory) this often, so its peak is not the whole index.
RELEASE_EVERY_SEGMENTS = 256


def restore_topic(
    entry: dict[str, Any],
    held: HeldRuns = (),
    read_sealed: ReadSealed | None = None,
    missing: MissingRuns | None = None,
    memory: ColumnMemory = HEAP,
) -> TopicState:
    """Inverse of `capture_topic`: seqs in `[base_seq, head_seq]` missing from `records`
    and from the referenced segments (`segments`, read with `read_sealed`) become deleted
    slots. Records in the `held` runs (inclusive, ascending) are restored without their
    payloads: the caller knows a sealed segment that recovery reuses holds them (STORAGE
    §6 step 8 drops those payloads from memory anyway, and copying millions of them out of
    the snapshot first is most of a restore's time); so are all referenced records. A
    referenced segment whose files are gone restores placeholders: the caller lists their
    live runs in `missing` and must see them dead after replay (a topic delete replayed),
    or fail (`check_missing`). `memory` holds its large index columns (`FrozenSlots`)."""
    config = TopicConfig.from_dict(entry["config"])
    t = TopicState(
        str(entry["name"]),
        int(entry["topic_id"]),
        config,
        epoch=int(entry.get("epoch", 1)),
        frozen=FrozenSlots(mem=memory),
    )
    head = int(entry["head_seq"])
    # A topic whose records a reader left undecoded comes back empty at its head.
    skipped = bool(entry.get(RECORDS_SKIPPED))
    base = head + 1 if skipped else min(int(entry["base_seq"]), head + 1)
    t.origin = max(base, 1)
    t.head = t.origin - 1
    t.reserved = t.head
    records = entry.get("records", [])
    refs = [] if skipped else segment_refs(entry)
    at = 0
    if refs and read_sealed is None:
        raise ValueError(f"snapshot of {t.name!r} references sealed segments: no reader")
    t.flags.reserve(max(head - t.origin + 1, 0))  # a flag for every slot up to the head
    if refs and not records:  # every slot up to the last reference goes to `frozen`
        t.frozen.reserve(max(min(refs[-1].last, head) - t.origin + 1, 0))
    for n, (ref, rows) in enumerate(
        zip(refs, _read_all(read_sealed, t.topic_id, refs), strict=True)
    ):
        if n % RELEASE_EVERY_SEGMENTS == RELEASE_EVERY_SEGMENTS - 1:
            memory.release_resident()  # the columns written so far leave the process
        k = bisect.bisect_left(records, ref.first, at, key=_record_seq)
        _restore_records(t, records[at:k], head, held)
        at = k
        if rows is None:
            if missing is None:
                raise SealedSegmentMissingError(_missing_text(t, ref))
            rows = _placeholders(t, ref, missing)
        _restore_ref(t, ref, rows, head)
    _restore_records(t, records[at:], head, held)
    if t.head < head:
        t.append_holes(head, t.last_ts())
    t.head = head
    t.reserved = head
    t.reservation = t.reservation_durable = head
    t.evict_floor = int(entry.get("evict_floor", 0))
    t.expiry_floor = int(entry.get("expiry_floor", 0))
    t.delete_floor = int(entry.get("delete_floor", 0))
    t.source_trim_floor = int(entry.get("source_trim_floor", 0))
    t.pop_front()
    return t


def _read_all(
    read_sealed: ReadSealed | None, topic_id: int, refs: list[SegmentRef]
) -> Iterator[SealedRows | None]:
    """The rows of each reference in order (read ahead when the reader can)."""
    if read_sealed is None or not refs:
        return iter(())
    many = getattr(read_sealed, "read_many", None)
    if many is not None:
        return cast("Iterator[SealedRows | None]", many(topic_id, refs))
    return (read_sealed(topic_id, ref) for ref in refs)


def _record_seq(rec: SnapshotRecord | dict[str, Any]) -> int:
    return rec.seq if isinstance(rec, SnapshotRecord) else int(rec["seq"])


def _restore_records(t: TopicState, records: list[Any], head: int, held: HeldRuns) -> None:
    if not records:
        return
    if isinstance(records[0], SnapshotRecord):
        _restore_raw(t, records, head, held)
    else:
        _restore_parsed(t, records, head)


def _missing_text(t: TopicState, ref: SegmentRef) -> str:
    return (
        f"snapshot of {t.name!r} (topic id {t.topic_id}) references the sealed segment of "
        f"seqs {ref.segment}..{ref.segment_last}, whose files are missing; it holds the "
        f"only copy of records {ref.first}..{ref.last}"
    )


def _placeholders(t: TopicState, ref: SegmentRef, missing: MissingRuns) -> SealedRows:
    """Stand-ins for the rows of a segment whose files are gone (noted in `missing`)."""
    n = ref.segment_last - ref.segment + 1
    missing.append((t.topic_id, ref.first, ref.last))
    none = np.zeros(n, np.uint32)
    return SealedRows(
        np.full(n, t.last_ts(), np.int64), np.zeros(n, np.int64), ([], none), ([], none)
    )


def _restore_ref(t: TopicState, ref: SegmentRef, rows: SealedRows, head: int) -> None:
    """The live records of one segment reference, without their payloads (in the file)."""
    if not ref.segment <= ref.first <= ref.last <= ref.segment_last:
        raise ValueError(f"snapshot of {t.name!r}: bad segment reference {ref}")
    if len(rows.ts) != ref.segment_last - ref.segment + 1:
        raise ValueError(f"snapshot of {t.name!r}: segment {ref.segment} has another length")
    n = ref.last - ref.first + 1
    dead = dead_flags(ref.dead, n) if ref.dead else None
    lo = max(t.origin - ref.first, 0)
    hi = min(head - ref.first + 1, n)
    if hi <= lo:
        return
    if ref.first + lo <= t.head:
        raise ValueError(f"snapshot of {t.name!r}: records out of order at seq {ref.first + lo}")
    shift = ref.first - ref.segment
    if dead is None:  # nothing deleted: one run (the common case, without the numpy)
        edges = [lo, hi]
    else:
        live = np.concatenate(([False], ~dead[lo:hi], [False]))
        edges = (np.flatnonzero(live[1:] != live[:-1]) + lo).tolist()
    frozen = t.slot_count == t.frozen.n  # nothing in the list columns yet: no payloads
    if frozen:
        node, tag = t.frozen.recode(rows.node), t.frozen.recode(rows.tag)
    else:
        nodes, tags = decoded_labels(rows.node), decoded_labels(rows.tag)
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        first = ref.first + a
        i, j = shift + a, shift + b
        if frozen:
            t.replay_frozen(first, rows.ts[i:j], rows.size[i:j], node[i:j], tag[i:j])
            continue
        if first != t.head + 1:
            t.append_holes(first - 1, int(rows.ts[i]))
        k = b - a
        t.replay_rows(
            first, shared_ints(rows.ts[i:j]), [None] * k, [None] * k,
            nodes[i:j], tags[i:j],
            rows.size[i:j].tolist(),
        )  # fmt: skip


def check_missing(
    registry: Registry, missing: MissingRuns, deleted_since: Callable[[int], bool] | None = None
) -> None:
    """After replay: a run restored from a missing segment is harmless only if its topic is
    gone (a replayed delete) or ephemeral (it keeps no records across a restart). A
    persistent topic lost records that exist nowhere else: refuse
    (`SealedSegmentMissingError`), whatever replay did to the stand-ins since (a TTL or cap
    would expire them, but not because the records were really gone). `deleted_since`
    (a reader that replays no WAL): whether the topic's files are all gone, i.e. it was
    deleted after the snapshot; such a topic is left out."""
    for topic_id, first, last in missing:
        t = registry.by_id.get(topic_id)
        if t is None or not t.persistent:
            continue
        if deleted_since is not None and deleted_since(topic_id):
            registry.remove(t)
            continue
        raise SealedSegmentMissingError(
            f"topic {t.name!r} (id {topic_id}): the sealed segment holding its records "
            f"{first}..{last} is missing, and nothing else holds them. Restore the segment "
            f"files (and the cold tier's directory, if one was configured), or run "
            f"`seglog verify` to see what is damaged."
        )


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
    pins: SnapshotPins | None = None,
    retain: Callable[[TopicState, int], object] | None = None,
) -> tuple[SnapshotMark, frozenset[tuple[int, int]]]:
    """STORAGE §5.3 (the caller serializes snapshots). Returns the new snapshot's mark;
    raises on failure (then nothing is deleted). `previous` is the newest snapshot on disk,
    kept beside the new one. Router advancement is blocked from the checkpoint until the
    routers are captured (steps 3–5), so each captured cursor matches its captured dest.
    `pins` (the engine's) keeps the referenced segments from being unlinked; also returns
    the segments it no longer holds (their drop may have been put off). `retain` (the
    engine's retention pass, under the topic's lock) runs on each topic before it is
    captured (step 4), so a snapshot holds no record a pass would have expired."""
    table = routers if routers is not None else RouterTable()
    pins = pins if pins is not None else SnapshotPins()
    kept_before = previous.segments if previous else frozenset()
    # Control-plane changes commit their frame and apply it under the registry lock.
    # Holding it across the checkpoint puts each change wholly before the marks (and in
    # this capture) or wholly after them (and in the replayed WAL), never between.
    # The router table is taken before the registry is let go: a router created (and its
    # dest with it) between the listing and the capture would be captured with copies in
    # a dest the snapshot does not hold, and replay would never re-derive them.
    with contextlib.ExitStack() as holding_table:
        with registry.lock:
            positions = wal.checkpoint(now)
            listed = registry.all()
            next_topic_id = registry.next_topic_id
            holding_table.enter_context(table.lock)
        try:
            topics = _capture_topics(listed, publisher, now, pins, retain)
            captured_routers = table.capture()
        except BaseException:
            pins.abandon()
            raise
    try:
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
        referenced: set[tuple[int, int]] = set()
        pieces = body_pieces(snap_id, head, topics, captured_routers, referenced)
        write_snapshot_stream(fs, meta_dir, snap_id, pieces, previous.id if previous else None)
        table.captured()
    except BaseException:
        pins.abandon()
        raise
    mark = SnapshotMark(snap_id, positions, frozenset(referenced))
    released = pins.settle(kept_before | mark.segments)
    # Two snapshots stay: the WAL the older one replays from must stay too, so that a
    # damaged newest snapshot falls back to it without losing anything.
    wal.delete_absorbed(previous.positions if previous else None)
    return mark, released


def _capture_topics(
    listed: list[TopicState],
    publisher: Publisher,
    now: int,
    pins: SnapshotPins,
    retain: Callable[[TopicState, int], object] | None = None,
) -> list[TopicRender]:
    """Step 4 for every listed topic still registered: its §5.2 entry and what renders
    its records once the lock is released; its sealed segments are held from here on."""
    topics: list[TopicRender] = []
    for t in listed:
        head = None
        with t.lock:
            if t.deleted:
                continue  # dropped after the marks: replay applies its TopicDelete
            if retain is not None:
                # A watermark it logs comes after the checkpoint (replay raises the floor
                # again); it is pending here, so the loop below applies it before capture.
                # One that fails changes nothing: the records stay, as they would live.
                retain(t, now)
            while t.pending:
                try:
                    t.pending[0].commit.wait()
                except WalError:
                    pass
                head = publisher.apply_ready(t, now)
            captured = capture_topic(t, pins)
            # Every HeadWatermark logged so far sits before the checkpoint and will be
            # skipped by replay, so the next disk write — also after a later class change
            # back to disk — must log a fresh reservation after it.
            t.reservation = t.reservation_durable = t.head
            t.pre_reservation = None  # submitted before the checkpoint, maybe: not trusted
        if head is not None:
            publisher.notify(t.name, head)
        topics.append(captured)
    return topics


def _render(rows: Rows) -> bytes:
    """A part in no sealed segment: its payloads are in memory."""
    text = records_text(rows, 0, len(rows.ts))
    # Let go of the payloads now, or the capture holds every payload it rendered until the
    # whole snapshot is written (the rows are a copy, used once).
    n = len(rows.ts)
    rows.data[:] = [None] * n
    rows.meta[:] = [None] * n
    return text


def snapshot_positions(body: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """The per-group WAL positions a snapshot body records (where its replay starts)."""
    return {
        str(g["key"]): (int(g["wal_idx"]), int(g["wal_offset"]))
        for g in body.get("checkpoint", {}).get("groups", [])
    }
