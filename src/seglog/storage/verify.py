"""Offline integrity check and repair of a data directory (`seglog verify` / `seglog repair`).

`verify_data_dir` only reads (every call goes through the `Fs` seam and none of them
mutates): every WAL frame checksum of every group (STORAGE §3.1, classified by
`walscan`), every sealed segment's `.data` frames and its `.idx` entries (§4.2–§4.3), every
snapshot file (§5.1). It reports what recovery would see: the WAL is judged from the
positions of the newest valid snapshot, exactly as recovery starts replay; damage in WAL
bytes that snapshot already absorbed is only a warning (it matters if that snapshot is
lost and recovery falls back to the previous one).

Severity (what `Report.corrupt` means, i.e. `seglog verify` exit status 1):
- WAL corruption (an invalid frame with valid frames after it) — the server refuses to start;
- a sealed segment whose frames or index fail validation — reads of it fail;
- a snapshot file that fails validation — it was renamed into place only after an fsync,
  so it is damaged media; recovery skips it, but it still occupies a slot of the two kept.
Warnings (exit 0): torn WAL tails (recovery truncates them), damage before the recovery
start, crash leftovers (`.tmp` files, half segment pairs) that startup removes.

`plan_repairs`/`apply_repairs` turn a report into actions (the operator chooses the loss):
corrupt WAL groups are quarantined and truncated (`walscan.repair_group`), torn tails
sealed, damaged segment pairs and snapshot files moved to a `quarantine/` directory beside
them (`topics/quarantine/<ID>/`, `meta/quarantine/`). A snapshot file is rebuilt from the
WAL and the other snapshot. A segment that no kept snapshot references is too (§4.1), so
moving it loses at most a best-effort delete flag; one that a kept snapshot references
(format 2, docs/storage.md) holds the only copy of its records: it is salvaged instead
(originals copied to quarantine, then rewritten with every intact frame as it was and every
damaged one a deleted hole, so exactly the damaged records are lost, and named).
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from mmap import mmap
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import xxhash

from seglog.core.frame_bodies import TopicCreateBody
from seglog.core.frames import FrameError, FrameType
from seglog.core.segment_format import (
    FLAG_NODE,
    FLAG_TAG,
    IDX_ENTRY_SIZE,
    SegmentCorruption,
    SegmentRecord,
    decode_frame,
    encode_segment,
    idx_view,
)
from seglog.storage.datadir import list_topic_ids, make_dirs_durably
from seglog.storage.fs import Fs, write_file_durably
from seglog.storage.segment import Tier, segment_base, topic_dir_name
from seglog.storage.snapshot import (
    MAGIC,
    READABLE_VERSIONS,
    SegmentRef,
    dead_flags,
    segment_refs,
    snapshot_ids,
    snapshot_name,
)
from seglog.storage.wal_files import WalGroup, discover_groups
from seglog.storage.walscan import (
    QUARANTINE_DIR,
    Corruption,
    GroupScan,
    GroupScanner,
    Position,
    WalFilesMissingError,
    WalRepair,
    check_files_present,
    execute_repair,
    plan_repair,
    scan_group,
    seal_at,
)

_SNAP_HEADER = struct.Struct("<4sIQQ")
_SEG_NAME = re.compile(r"seg-(\d{16})\.(data|idx)")
_APPEND = int(FrameType.APPEND)
_NAMING = (int(FrameType.TOPIC_CREATE), int(FrameType.CONFIG_UPDATE))
_DELETE_TOPIC = int(FrameType.TOPIC_DELETE)


@dataclass(frozen=True, slots=True)
class SnapshotCheck:
    snap_id: int
    path: Path
    problem: str | None  # None: valid
    topics: int = 0
    positions: dict[str, Position] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SegmentCheck:
    topic_id: int
    tier: Tier
    first_seq: int
    data_path: Path
    idx_path: Path
    records: int
    deleted: int
    problem: str | None  # None: every frame and index entry verified


@dataclass(frozen=True, slots=True)
class GroupCheck:
    group: WalGroup
    scan: GroupScan  # from the recovery start: what decides
    absorbed_damage: list[tuple[Path, int]]  # invalid bytes before the recovery start
    missing_files: str | None = None  # why recovery would refuse: a file replay needs is gone


@dataclass(slots=True)
class TopicCounts:
    topic_id: int
    name: str | None = None
    head_seq: int | None = None  # from the recovery snapshot
    snapshot_records: int = 0
    wal_appends: int = 0  # Append frames after the recovery start
    segments: int = 0
    segment_records: int = 0  # live records in sealed segments (both tiers)
    # deleted, or ephemeral by its last config, after the recovery start (WAL order within
    # each group): its records may be gone
    ended: bool = False


@dataclass(frozen=True, slots=True)
class Report:
    root: Path
    snapshots: list[SnapshotCheck]
    recovery_snapshot: int | None  # the snapshot recovery would load
    groups: list[GroupCheck]
    segments: list[SegmentCheck]
    topics: list[TopicCounts]
    leftovers: list[Path]  # crash leftovers startup removes
    vanished: list[Path]  # files removed while verify ran (a live server)
    lost: list[str] = field(default_factory=list)  # referenced segments that are missing
    # segments a valid snapshot references: (topic_id, first seq) -> their last seq
    referenced_last: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def wal_corruption(self) -> list[Corruption]:
        return [g.scan.corruption for g in self.groups if g.scan.corruption is not None]

    @property
    def torn_tails(self) -> list[tuple[Path, int]]:
        return [t for g in self.groups for t in g.scan.torn_tails]

    @property
    def corrupt(self) -> bool:
        return bool(
            self.wal_corruption
            or any(g.missing_files for g in self.groups)
            or any(s.problem for s in self.segments)
            or any(s.problem for s in self.snapshots)
            or self.lost
        )


# ---- snapshots -------------------------------------------------------------------------


def snapshot_problem(buf: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """`(why it is invalid, None)` or `(None, body)`, by the checks of §5.1."""
    if len(buf) < _SNAP_HEADER.size:
        return f"shorter ({len(buf)} bytes) than its {_SNAP_HEADER.size}-byte header", None
    magic, version, body_len, checksum = _SNAP_HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        return f"bad magic {magic!r}", None
    if version not in READABLE_VERSIONS:
        return f"unsupported version {version}", None
    body = buf[_SNAP_HEADER.size :]
    if len(body) < body_len:
        return f"body is {len(body)} bytes, the header says {body_len}", None
    body = body[:body_len]
    if xxhash.xxh3_64_intdigest(body) != checksum:
        return "checksum mismatch", None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "body is not JSON", None
    if not isinstance(doc, dict):
        return "body is not a JSON object", None
    return None, doc


def _positions(doc: dict[str, Any]) -> dict[str, Position]:
    groups = doc.get("checkpoint", {}).get("groups", [])
    return {str(g["key"]): (int(g["wal_idx"]), int(g["wal_offset"])) for g in groups}


def _live(ref: SegmentRef) -> int:
    n = ref.last - ref.first + 1
    return n - int(dead_flags(ref.dead, n).sum())


def _check_snapshots(
    fs: Fs,
    meta_dir: Path,
    topics: dict[int, TopicCounts],
    vanished: list[Path],
    newest_refs: list[tuple[int, SegmentRef]],
    referenced_last: dict[tuple[int, int], int],
) -> tuple[list[SnapshotCheck], dict[str, Any] | None]:
    """Every snapshot file checked; fills `referenced_last` with the segments the valid ones
    reference, and `newest_refs` with those of the newest valid one."""
    checks: list[SnapshotCheck] = []
    newest: dict[str, Any] | None = None
    for snap_id in reversed(snapshot_ids(fs, meta_dir)):
        path = meta_dir / snapshot_name(snap_id)
        try:
            problem, doc = snapshot_problem(fs.read_file(path))
        except FileNotFoundError:
            vanished.append(path)
            continue
        if doc is None:
            checks.append(SnapshotCheck(snap_id, path, problem))
            continue
        try:
            positions = _positions(doc)
            entries = [
                (
                    int(t["topic_id"]),
                    str(t["name"]),
                    int(t.get("head_seq", 0)),
                    len(t.get("records", [])) + sum(map(_live, segment_refs(t))),
                )
                for t in doc.get("topics", [])
            ]
            for t in doc.get("topics", []):
                for ref in segment_refs(t):
                    key = (int(t["topic_id"]), ref.segment)
                    referenced_last[key] = ref.segment_last
                    if newest is None:
                        newest_refs.append((int(t["topic_id"]), ref))
        except (KeyError, TypeError, ValueError, AttributeError, msgspec.ValidationError):
            checks.append(SnapshotCheck(snap_id, path, "body does not parse as a snapshot"))
            continue
        checks.append(SnapshotCheck(snap_id, path, None, len(entries), positions))
        if newest is None:
            newest = doc
            for tid, name, head, records in entries:
                c = topics.setdefault(tid, TopicCounts(tid))
                c.name, c.head_seq, c.snapshot_records = name, head, records
    return checks, newest


# ---- WAL -------------------------------------------------------------------------------


def _check_group(
    fs: Fs, group: WalGroup, start: Position, topics: dict[int, TopicCounts]
) -> GroupCheck:
    scanner = GroupScanner(fs, group, start)
    appends: Counter[int] = Counter()
    for _idx, raw in scanner:
        ftype, tid = raw[1], raw[3]
        if ftype == _APPEND:
            appends[tid] += 1
        elif ftype == _DELETE_TOPIC:
            topics.setdefault(tid, TopicCounts(tid)).ended = True
        elif ftype in _NAMING:
            try:
                body = TopicCreateBody.decode(raw[8])
                config = orjson.loads(body.config_json)
            except (FrameError, orjson.JSONDecodeError):  # a report never fails on it
                continue
            counts = topics.setdefault(tid, TopicCounts(tid))
            counts.name = body.name
            # The topic's last config decides (recovery judges it at the end of replay);
            # no frame follows a delete (ids are never reused).
            counts.ended = isinstance(config, dict) and config.get("durability") == "ephemeral"
    for tid, n in appends.items():
        topics.setdefault(tid, TopicCounts(tid)).wal_appends += n
    absorbed: list[tuple[Path, int]] = []
    start_idx, start_off = start
    if start != (1, 0):
        before = [(i, p) for i, p in group.files if i <= start_idx]
        if before:
            prefix = WalGroup(group.key, group.shard_no, group.dir, before)
            for f in scan_group(fs, prefix).files:
                if f.garbage and (f.idx < start_idx or f.end < start_off):
                    absorbed.append((f.path, f.end))
    try:
        check_files_present(group, start, start != (1, 0))
        missing = None
    except WalFilesMissingError as e:
        missing = str(e)
    return GroupCheck(group, scanner.result, absorbed, missing)


# ---- segments --------------------------------------------------------------------------


_Frames = tuple[list[int], list[int], list[int], list[int], int, str | None]


def _segment_frames(buf: bytes | mmap, first_seq: int) -> _Frames:
    """Columns `(offsets, framed lengths, ts, flags)` of the verified frames, the deleted
    count and the first problem (decoding stops there)."""
    offsets: list[int] = []
    lengths: list[int] = []
    ts: list[int] = []
    flags: list[int] = []
    deleted = 0
    off, seq = 0, first_seq
    try:
        while off < len(buf):
            rec, end = decode_frame(buf, off, seq)
            offsets.append(off)
            lengths.append(end - off)
            ts.append(rec.ts)
            flags.append(
                (FLAG_TAG if rec.tag is not None else 0)
                | (FLAG_NODE if rec.node is not None else 0)
            )
            deleted += rec.deleted
            off, seq = end, seq + 1
    except SegmentCorruption as e:
        return offsets, lengths, ts, flags, deleted, str(e)
    return offsets, lengths, ts, flags, deleted, None


def check_segment(
    fs: Fs, data_path: Path, idx_path: Path, first_seq: int
) -> tuple[int, int, str | None]:
    """`(records, deleted, problem)`: every `.data` frame verified (lengths, checksum, seq
    contiguity, flags, UTF-8) and every `.idx` entry matched against its frame."""
    idx_bytes = fs.read_file(idx_path)
    if not idx_bytes or len(idx_bytes) % IDX_ENTRY_SIZE:
        return 0, 0, f"{idx_path.name}: length {len(idx_bytes)} is not a positive multiple of 20"
    idx = idx_view(idx_bytes)
    buf = fs.map_file(data_path)
    try:
        frames = _segment_frames(buf, first_seq)
    finally:
        close = getattr(buf, "close", None)
        if close is not None:
            close()
    offsets, lengths, ts, flags, deleted, problem = frames
    if problem is not None:
        return len(offsets), deleted, f"{data_path.name}: {problem}"
    n = len(offsets)
    if n != len(idx):
        return n, deleted, f"{data_path.name} holds {n} frames, {idx_path.name} {len(idx)} entries"
    for name, want in (("offset", offsets), ("len", lengths), ("ts", ts), ("flags", flags)):
        bad = np.flatnonzero(idx[name].astype(np.uint64) != np.asarray(want, dtype=np.uint64))
        if len(bad):
            i = int(bad[0])
            return (
                n,
                deleted,
                (
                    f"{idx_path.name}: entry {i} (seq {first_seq + i}) has {name} "
                    f"{int(idx[name][i])}, the frame says {want[i]}"
                ),
            )
    return n, deleted, None


def _check_tier(
    fs: Fs, topics_dir: Path, tier: Tier, topics: dict[int, TopicCounts],
    leftovers: list[Path], vanished: list[Path],
) -> list[SegmentCheck]:  # fmt: skip
    out: list[SegmentCheck] = []
    for tid in list_topic_ids(fs, topics_dir):
        d = topics_dir / topic_dir_name(tid)
        kinds: dict[int, set[str]] = {}
        for name in sorted(fs.listdir(d)):
            m = _SEG_NAME.fullmatch(name)
            if m:
                kinds.setdefault(int(m.group(1)), set()).add(m.group(2))
            elif name.endswith(".tmp"):
                leftovers.append(d / name)
        counts = topics.setdefault(tid, TopicCounts(tid))
        for first, have in sorted(kinds.items()):
            base = d / segment_base(first)
            data_path, idx_path = base.with_suffix(".data"), base.with_suffix(".idx")
            if have != {"data", "idx"}:
                leftovers.append(data_path if "data" in have else idx_path)
                continue
            try:
                n, dead, problem = check_segment(fs, data_path, idx_path, first)
            except FileNotFoundError:
                vanished.append(data_path)
                continue
            out.append(SegmentCheck(tid, tier, first, data_path, idx_path, n, dead, problem))
            counts.segments += 1
            counts.segment_records += n - dead
    return out


# ---- the whole directory ---------------------------------------------------------------


def verify_data_dir(fs: Fs, root: Path, cold_root: Path | None = None) -> Report:
    """Check everything under `root` (and the cold tier); never writes."""
    topics: dict[int, TopicCounts] = {}
    leftovers: list[Path] = []
    vanished: list[Path] = []
    meta_dir = root / "meta"
    newest_refs: list[tuple[int, SegmentRef]] = []
    referenced_last: dict[tuple[int, int], int] = {}
    snapshots, newest = _check_snapshots(
        fs, meta_dir, topics, vanished, newest_refs, referenced_last
    )
    leftovers.extend(meta_dir / n for n in sorted(fs.listdir(meta_dir)) if n.endswith(".bin.tmp"))
    starts = _positions(newest) if newest is not None else {}
    groups: list[GroupCheck] = []
    for g in discover_groups(fs, root / "wal"):
        try:
            groups.append(_check_group(fs, g, starts.get(g.key, (1, 0)), topics))
        except FileNotFoundError as e:
            vanished.append(Path(e.filename) if e.filename else g.dir)
    segments = _check_tier(fs, root / "topics", "hot", topics, leftovers, vanished)
    if cold_root is not None:
        segments += _check_tier(fs, cold_root / "topics", "cold", topics, leftovers, vanished)
    return Report(
        root,
        snapshots,
        None if newest is None else int(newest.get("id", 0)),
        groups,
        segments,
        [topics[k] for k in sorted(topics)],
        leftovers,
        vanished,
        _lost(topics, newest_refs, segments),
        referenced_last,
    )


def _lost(
    topics: dict[int, TopicCounts],
    refs: list[tuple[int, SegmentRef]],
    segments: list[SegmentCheck],
) -> list[str]:
    """The segments the recovery snapshot references that are not there whole, unless the
    WAL replayed after it deletes their topic or makes it ephemeral (then recovery does not
    need them either)."""
    have = {(s.topic_id, s.first_seq): s for s in segments}
    out = []
    for tid, ref in refs:
        seg = have.get((tid, ref.segment))
        n = None if seg is None else seg.records
        if seg is not None and (seg.problem or n == ref.segment_last - ref.segment + 1):
            continue  # whole, or damaged (reported as such, and repair salvages it)
        counts = topics.get(tid)
        if counts is not None and counts.ended:
            continue
        what = "is missing" if n is None else f"holds {n} records"
        out.append(
            f"topic {tid:08X}: the sealed segment of seqs {ref.segment}..{ref.segment_last}, "
            f"the only copy of live records in {ref.first}..{ref.last}, {what}"
        )
    return out


# ---- repair ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RepairPlan:
    wal: list[tuple[WalGroup, Corruption, WalRepair]]
    seal: list[tuple[Path, int]]  # torn tails of groups that are not corrupt
    moves: list[tuple[Path, Path]]  # damaged segment files and snapshots → quarantine
    # damaged segments a kept snapshot references: rewritten with their damaged records as
    # deleted holes (the originals copied to quarantine first)
    salvage: list[Salvage] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.wal or self.seal or self.moves or self.salvage)


@dataclass(frozen=True, slots=True)
class Salvage:
    data_path: Path
    idx_path: Path
    copies: tuple[Path, Path]  # where the originals go
    lost: list[int]  # seqs whose frames were damaged: holes now
    data: bytes
    idx: bytes


_HOLE = b'{"d":null}'


def salvage_frames(
    data: bytes, idx_bytes: bytes, first_seq: int, count: int
) -> tuple[list[SegmentRecord], list[int]]:
    """The `count` records of a damaged segment from `first_seq`: every frame that passes
    every check as it is, every other one a deleted hole (its seq in the second list).
    Frames are read in a row; after a bad one, the index (when it has one entry per
    record) locates the next. Without a usable index, all records after the first bad
    frame are holes: nothing locates them. Reading in a row first also salvages a `.data`
    already rewritten next to its stale index (a repair cut short)."""
    entries = None
    if len(idx_bytes) == count * IDX_ENTRY_SIZE:
        entries = idx_view(idx_bytes)["offset"].tolist()
    out: list[SegmentRecord] = []
    lost: list[int] = []
    at: int | None = 0  # where the next frame starts, while frames chain
    ts = 0
    for i in range(count):
        seq = first_seq + i
        rec = None
        for start in (at, None if entries is None else entries[i]):
            if start is None:
                continue
            try:
                rec, at = decode_frame(data, start, seq)
                break
            except SegmentCorruption:
                at = None
        if rec is None:  # `ts` never decreases with seq: a hole takes its predecessor's
            rec = SegmentRecord(seq, ts, None, None, _HOLE, True)
            lost.append(seq)
        ts = rec.ts
        out.append(rec)
    return out, lost


def _quarantine_path(fs: Fs, src: Path, qdir: Path, taken: set[Path]) -> Path:
    dst = qdir / src.name
    n = 1
    while dst in taken or fs.exists(dst):
        dst = qdir / f"{src.name}.{n}"
        n += 1
    taken.add(dst)
    return dst


def plan_repairs(fs: Fs, report: Report) -> RepairPlan:
    wal: list[tuple[WalGroup, Corruption, WalRepair]] = []
    seal: list[tuple[Path, int]] = []
    for g in report.groups:
        c = g.scan.corruption
        if c is not None:
            qdir = group_quarantine_root(g.group)
            wal.append((g.group, c, plan_repair(fs, g.group, c, qdir)))
        else:
            seal.extend(g.scan.torn_tails)
    taken: set[Path] = set()
    moves: list[tuple[Path, Path]] = []
    salvage: list[Salvage] = []
    for s in report.segments:
        last = report.referenced_last.get((s.topic_id, s.first_seq))
        if s.problem and last is not None:
            salvage.append(_salvage(fs, s, last - s.first_seq + 1, taken))
        elif s.problem:
            qdir = s.data_path.parent.parent / QUARANTINE_DIR / s.data_path.parent.name
            moves += [(p, _quarantine_path(fs, p, qdir, taken)) for p in (s.data_path, s.idx_path)]
    for snap in report.snapshots:
        if snap.problem:
            qdir = snap.path.parent / QUARANTINE_DIR
            moves.append((snap.path, _quarantine_path(fs, snap.path, qdir, taken)))
    return RepairPlan(wal, seal, moves, salvage)


def _salvage(fs: Fs, s: SegmentCheck, count: int, taken: set[Path]) -> Salvage:
    records, lost = salvage_frames(
        bytes(fs.read_file(s.data_path)), bytes(fs.read_file(s.idx_path)), s.first_seq, count
    )
    data, idx = encode_segment(records, s.first_seq)
    qdir = s.data_path.parent.parent / QUARANTINE_DIR / s.data_path.parent.name
    copies = (
        _quarantine_path(fs, s.data_path, qdir, taken),
        _quarantine_path(fs, s.idx_path, qdir, taken),
    )
    return Salvage(s.data_path, s.idx_path, copies, lost, data, idx)


def apply_repairs(fs: Fs, plan: RepairPlan) -> None:
    """Carry out `plan` (the caller holds the data-dir lock). Each step is durable before the
    next: a crash leaves a directory that `verify` reports and `repair` finishes."""
    for group, _corruption, planned in plan.wal:
        execute_repair(fs, group, planned)
    for path, offset in plan.seal:
        seal_at(fs, path, offset)
    for src, dst in plan.moves:
        make_dirs_durably(fs, dst.parent)
        fs.rename(src, dst)
        fs.fsync_dir(dst.parent)
        fs.fsync_dir(src.parent)
    for sv in plan.salvage:
        make_dirs_durably(fs, sv.copies[0].parent)
        for src, dst in zip((sv.data_path, sv.idx_path), sv.copies, strict=True):
            write_file_durably(fs, dst, fs.read_file(src))
        # .data first: a crash between the two leaves a pair verify reports and a re-run
        # salvages again (the new .data's frames are all intact)
        write_file_durably(fs, sv.data_path, sv.data)
        write_file_durably(fs, sv.idx_path, sv.idx)


def group_quarantine_root(group: WalGroup) -> Path:
    """`wal/quarantine` for a group in `wal/` or `wal/shard-NN/`."""
    wal_dir = group.dir.parent if group.key else group.dir
    return wal_dir / QUARANTINE_DIR
