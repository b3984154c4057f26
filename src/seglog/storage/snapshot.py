"""Snapshot files (STORAGE §5.1): framing, atomic replacement and newest-valid loading.

    meta/snapshot-<id:016>.bin
    off size field
      0   4  magic     "SGSN"
      4   4  version   u32 = 2 (1 is still read)
      8   8  body_len  u64
     16   8  xxh3      u64   XXH3-64 (seed 0) of the body
     24   …  body      UTF-8 JSON object (§5.2, assembled by the engine)

Crash safety: a snapshot is written to `….bin.tmp`, fsynced, renamed, and `meta/` is fsynced
before any older snapshot is deleted, so at every instant at least one valid snapshot exists
once one ever did. The previous snapshot is kept beside the newest (with the WAL it replays
from), so a damaged newest snapshot falls back to it. Readers ignore `.tmp` files and skip invalid ones, newest first.
"""

from __future__ import annotations

import base64
import logging
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import xxhash

from seglog.storage.fs import Fs, write_all_at

MAGIC = b"SGSN"
log = logging.getLogger("seglog.snapshot")
VERSION = 2  # written; 2 = sealed records referenced by `segments` (docs/storage.md)
READABLE_VERSIONS = (1, 2)
_HEADER = struct.Struct("<4sIQQ")
_NAME = re.compile(r"snapshot-(\d{16})\.bin")
_TMP = re.compile(r"snapshot-\d{16}\.bin\.tmp")
_WRITE_CHUNK = 4 << 20  # bytes gathered per write while streaming a body


def snapshot_name(snap_id: int) -> str:
    return f"snapshot-{snap_id:016d}.bin"


def encode_snapshot(body: dict[str, Any]) -> bytes:
    """A whole snapshot file's bytes for `body` (tests and tools; the engine streams)."""
    raw = orjson.dumps(body)
    return _HEADER.pack(MAGIC, VERSION, len(raw), xxhash.xxh3_64_intdigest(raw)) + raw


class SnapshotRecord(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One record of a §5.2 `records` array. `data` and `meta` are the JSON text exactly as
    the snapshot holds it (the engine wrote them from the compact text it stores); an
    absent `meta` is an empty `Raw`. Not tracked by the garbage collector (`gc=False`: it
    holds no containers, so it can be in no cycle): a snapshot decodes to millions of
    them, and every full collection during the decode would walk them all again."""

    seq: int
    ts: int
    data: msgspec.Raw
    meta: msgspec.Raw = msgspec.Raw()
    node: str | None = None
    tag: str | None = None
    bytes: int = 0


class SegmentRef(msgspec.Struct, forbid_unknown_fields=True):
    """Format 2: the live records of seqs `[first, last]` are those of the sealed segment
    spanning `[segment, segment_last]` (its files are named by `segment`), less the seqs
    whose bits are set in `dead` (base64 of the little-endian bit-packed flags of
    `first ..= last`; empty when none is dead). The segment is the only copy of those
    records, so no segment a kept snapshot references is ever unlinked while its topic
    lives (`SnapshotPins`; a topic delete, or recovery emptying a topic that became
    ephemeral, removes its files, and replay or the snapshots taken at the start account
    for that)."""

    segment: int
    segment_last: int
    first: int
    last: int
    dead: str = ""


class _TopicEntry(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    topic_id: int
    config: dict[str, Any]
    base_seq: int
    head_seq: int
    epoch: int = 1
    evict_floor: int = 0
    expiry_floor: int = 0
    delete_floor: int = 0
    source_trim_floor: int = 0
    delete_below: int = 0
    bytes_retained: int = 0
    live_count: int = 0
    records: list[SnapshotRecord] = []
    segments: list[SegmentRef] = []


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    id: int
    ts: int
    next_topic_id: int
    checkpoint: dict[str, Any]
    topics: list[_TopicEntry]
    routers: list[dict[str, Any]] = []


_decode_body = msgspec.json.Decoder(_Body).decode


class _LazyTopicEntry(_TopicEntry, forbid_unknown_fields=True):
    records: msgspec.Raw = msgspec.Raw(b"[]")  # type: ignore[assignment]


class _LazyBody(_Body, forbid_unknown_fields=True):
    topics: list[_LazyTopicEntry]  # type: ignore[assignment]


_decode_lazy_body = msgspec.json.Decoder(_LazyBody).decode
_decode_records = msgspec.json.Decoder(list[SnapshotRecord]).decode

# Marks a topic entry whose records were left undecoded (`decode_snapshot`'s `records_for`).
RECORDS_SKIPPED = "records_skipped"
TopicPredicate = Callable[[str], bool]


def _decode_typed(
    body: bytes | memoryview, records_for: TopicPredicate | None
) -> dict[str, Any] | None:
    """The body with each topic's `records` as `SnapshotRecord`s (no dict, no parsed data
    value per record), or None when the body does not have exactly the §5.2 shape the
    engine writes (the caller then parses it generically). The records of topics that
    `records_for` refuses are skipped over, not built, and their entries marked
    `RECORDS_SKIPPED`."""
    try:
        if records_for is None:
            doc = _decode_body(body)
            out = msgspec.structs.asdict(doc)
            out["topics"] = [msgspec.structs.asdict(t) for t in doc.topics]
            return out
        lazy = _decode_lazy_body(body)
        out = msgspec.structs.asdict(lazy)
        out["topics"] = [_lazy_entry(t, records_for) for t in lazy.topics]
        return out
    except msgspec.ValidationError:
        return None


def _lazy_entry(t: _LazyTopicEntry, records_for: TopicPredicate) -> dict[str, Any]:
    entry = msgspec.structs.asdict(t)
    if records_for(t.name):
        entry["records"] = _decode_records(t.records)
    else:
        entry["records"] = []
        entry[RECORDS_SKIPPED] = True
    return entry


def decode_snapshot(buf: bytes, records_for: TopicPredicate | None = None) -> dict[str, Any] | None:
    """The body of a valid snapshot file, or None when any check fails. Records of the
    engine's own bodies come back as `SnapshotRecord`s, others as dicts. With
    `records_for`, only the topics it accepts get their records (the others none, and
    `RECORDS_SKIPPED` set)."""
    if len(buf) < _HEADER.size:
        return None
    magic, version, body_len, checksum = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC or version not in READABLE_VERSIONS:
        return None
    # A view, not a copy: a body can be a gigabyte (msgspec and orjson read views).
    body = memoryview(buf)[_HEADER.size : _HEADER.size + body_len]
    if len(body) != body_len or xxhash.xxh3_64_intdigest(body) != checksum:
        return None
    try:
        typed = _decode_typed(body, records_for)
    except msgspec.DecodeError:
        return None
    if typed is not None:
        return typed
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    if records_for is not None:
        for entry in doc.get("topics", []):
            if isinstance(entry, dict) and not records_for(str(entry.get("name"))):
                entry["records"] = []
                entry[RECORDS_SKIPPED] = True
    return doc


def dead_bitmap(dead: bytes | bytearray) -> str:
    """The `dead` field of a segment reference: base64 of the flags packed little-endian,
    "" when none is set."""
    flags = np.frombuffer(bytes(dead), np.uint8) != 0
    if not flags.any():
        return ""
    return base64.b64encode(np.packbits(flags, bitorder="little").tobytes()).decode("ascii")


def dead_flags(bitmap: str, n: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Inverse of `dead_bitmap` for `n` seqs; raises ValueError on a malformed bitmap."""
    if not bitmap:
        return np.zeros(n, np.bool_)
    packed = np.frombuffer(base64.b64decode(bitmap, validate=True), np.uint8)
    if len(packed) != (n + 7) // 8:
        raise ValueError(f"dead bitmap of {len(packed)} bytes for {n} seqs")
    return np.unpackbits(packed, count=n, bitorder="little").astype(np.bool_)


def segment_refs(entry: dict[str, Any]) -> list[SegmentRef]:
    """A topic entry's format-2 `segments` (structs, also from a generically parsed body)."""
    refs = entry.get("segments") or []
    if refs and not isinstance(refs[0], SegmentRef):
        return msgspec.convert(refs, list[SegmentRef])
    return list(refs)


def referenced_segments(body: dict[str, Any]) -> frozenset[tuple[int, int]]:
    """`(topic_id, segment first seq)` of every sealed segment the body references."""
    return frozenset(
        (int(entry["topic_id"]), ref.segment)
        for entry in body.get("topics", [])
        for ref in segment_refs(entry)
    )


def snapshot_ids(fs: Fs, meta_dir: Path) -> list[int]:
    """Ids of the final (non-tmp) snapshot files, ascending."""
    ids = []
    for name in fs.listdir(meta_dir):
        m = _NAME.fullmatch(name)
        if m:
            ids.append(int(m.group(1)))
    return sorted(ids)


@dataclass(frozen=True, slots=True)
class SnapshotMark:
    """A snapshot on disk: its id, the WAL position per group its replay starts from, and
    the sealed segments it references (`(topic_id, segment first seq)`)."""

    id: int
    positions: dict[str, tuple[int, int]]
    segments: frozenset[tuple[int, int]] = frozenset()


def next_snapshot_id(fs: Fs, meta_dir: Path) -> int:
    existing = snapshot_ids(fs, meta_dir)
    return (existing[-1] if existing else 0) + 1


def write_snapshot(fs: Fs, meta_dir: Path, body: dict[str, Any], keep: int | None = None) -> int:
    """Frame `body` (its `id` is set here) as the next snapshot and make it durable, then
    delete every other snapshot but `keep` (the previous valid one, STORAGE §5.3 step 6)
    and stale temp files. Returns the new id."""
    snap_id = next_snapshot_id(fs, meta_dir)
    body["id"] = snap_id
    write_snapshot_stream(fs, meta_dir, snap_id, [orjson.dumps(body)], keep)
    return snap_id


def _delete_others(fs: Fs, meta_dir: Path, snap_id: int, keep: int | None) -> None:
    # Cleanup needs no fsync: a resurrected old snapshot or tmp file is harmless (the newest
    # valid one wins, tmp files are ignored) and is removed again by the next snapshot.
    for name in fs.listdir(meta_dir):
        m = _NAME.fullmatch(name)
        if (m is not None and int(m.group(1)) not in (snap_id, keep)) or _TMP.fullmatch(name):
            fs.unlink(meta_dir / name)


def write_snapshot_stream(
    fs: Fs, meta_dir: Path, snap_id: int, pieces: Iterable[bytes], keep: int | None = None
) -> Path:
    """Write snapshot `snap_id` from its body given as pieces (streamed to `….bin.tmp`,
    hashed on the way, the header written last, fsynced, renamed, `meta/` fsynced), then
    delete every other snapshot but `keep` and stale temp files. Memory stays at a few MiB
    however big the body. Returns the file's path."""
    path = meta_dir / snapshot_name(snap_id)
    tmp = path.with_name(path.name + ".tmp")
    f = fs.open(tmp, create=True)
    try:
        f.truncate(0)
        digest = xxhash.xxh3_64()
        offset = _HEADER.size
        pending: list[bytes] = []
        pending_size = 0
        for piece in pieces:
            digest.update(piece)
            pending.append(piece)
            pending_size += len(piece)
            if pending_size >= _WRITE_CHUNK:
                write_all_at(f, b"".join(pending), offset)
                offset += pending_size
                pending, pending_size = [], 0
        if pending:
            write_all_at(f, b"".join(pending), offset)
            offset += pending_size
        header = _HEADER.pack(MAGIC, VERSION, offset - _HEADER.size, digest.intdigest())
        write_all_at(f, header, 0)
        f.sync()
    finally:
        f.close()
    fs.rename(tmp, path)
    fs.fsync_dir(meta_dir)
    _delete_others(fs, meta_dir, snap_id, keep)
    return path


def kept_snapshot_segments(fs: Fs, meta_dir: Path) -> frozenset[tuple[int, int]]:
    """The segments every valid snapshot file in `meta_dir` references (records skipped)."""
    out: set[tuple[int, int]] = set()
    for snap_id in snapshot_ids(fs, meta_dir):
        try:
            buf = fs.read_file(meta_dir / snapshot_name(snap_id))
        except FileNotFoundError:
            continue
        if len(buf) < _HEADER.size or _HEADER.unpack_from(buf, 0)[1] < 2:
            continue  # format 1 references nothing
        doc = decode_snapshot(buf, lambda _name: False)
        if doc is not None:
            out |= referenced_segments(doc)
    return frozenset(out)


class SealedSegmentMissingError(Exception):
    """A snapshot references a sealed segment whose files are gone, and records it held
    are still live after replay: they exist nowhere else (docs/storage.md, format 2)."""


class SnapshotMissingError(Exception):
    """A reader pinned to one snapshot found it gone (replaced by newer ones) or damaged."""


def load_snapshot(
    fs: Fs, meta_dir: Path, snap_id: int, records_for: TopicPredicate | None = None
) -> dict[str, Any] | None:
    """The body of snapshot `snap_id` if its file exists and is valid, else None (`records_for`:
    see `decode_snapshot`)."""
    try:
        buf = fs.read_file(meta_dir / snapshot_name(snap_id))
    except FileNotFoundError:
        return None
    return decode_snapshot(buf, records_for)


def load_latest_snapshot(
    fs: Fs, meta_dir: Path, records_for: TopicPredicate | None = None
) -> dict[str, Any] | None:
    """The body of the newest valid snapshot, trying newest to oldest; None if none is.
    A damaged snapshot is skipped with a warning (the previous one is kept for this)."""
    for snap_id in reversed(snapshot_ids(fs, meta_dir)):
        try:
            buf = fs.read_file(meta_dir / snapshot_name(snap_id))
        except FileNotFoundError:
            continue
        doc = decode_snapshot(buf, records_for)
        if doc is not None:
            return doc
        log.warning(
            "snapshot %s is damaged (bad header, checksum or body); skipped",
            meta_dir / snapshot_name(snap_id),
        )
    return None
