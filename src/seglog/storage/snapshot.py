"""Snapshot files (STORAGE §5.1): framing, atomic replacement and newest-valid loading.

    meta/snapshot-<id:016>.bin
    off size field
      0   4  magic     "SGSN"
      4   4  version   u32 = 1
      8   8  body_len  u64
     16   8  xxh3      u64   XXH3-64 (seed 0) of the body
     24   …  body      UTF-8 JSON object (§5.2, assembled by the engine)

Crash safety: a snapshot is written to `….bin.tmp`, fsynced, renamed, and `meta/` is fsynced
before any older snapshot is deleted, so at every instant at least one valid snapshot exists
once one ever did. Readers ignore `.tmp` files and skip invalid ones, newest first.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import orjson
import xxhash

from seglog.storage.fs import Fs, write_all_at

MAGIC = b"SGSN"
VERSION = 1
_HEADER = struct.Struct("<4sIQQ")
_NAME = re.compile(r"snapshot-(\d{16})\.bin")
_TMP = re.compile(r"snapshot-\d{16}\.bin\.tmp")


def snapshot_name(snap_id: int) -> str:
    return f"snapshot-{snap_id:016d}.bin"


def encode_snapshot(body: dict[str, Any]) -> bytes:
    raw = orjson.dumps(body)
    return _HEADER.pack(MAGIC, VERSION, len(raw), xxhash.xxh3_64_intdigest(raw)) + raw


def decode_snapshot(buf: bytes) -> dict[str, Any] | None:
    """The body of a valid snapshot file, or None when any check fails."""
    if len(buf) < _HEADER.size:
        return None
    magic, version, body_len, checksum = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC or version != VERSION:
        return None
    body = buf[_HEADER.size : _HEADER.size + body_len]
    if len(body) != body_len or xxhash.xxh3_64_intdigest(body) != checksum:
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def snapshot_ids(fs: Fs, meta_dir: Path) -> list[int]:
    """Ids of the final (non-tmp) snapshot files, ascending."""
    ids = []
    for name in fs.listdir(meta_dir):
        m = _NAME.fullmatch(name)
        if m:
            ids.append(int(m.group(1)))
    return sorted(ids)


def write_snapshot(fs: Fs, meta_dir: Path, body: dict[str, Any]) -> int:
    """Frame `body` (its `id` is set here) as the next snapshot and make it durable, then
    delete older snapshots and stale temp files. Returns the new id."""
    existing = snapshot_ids(fs, meta_dir)
    snap_id = (existing[-1] if existing else 0) + 1
    body["id"] = snap_id
    data = encode_snapshot(body)
    final = meta_dir / snapshot_name(snap_id)
    tmp = final.with_name(final.name + ".tmp")
    f = fs.open(tmp, create=True)
    try:
        f.truncate(0)
        write_all_at(f, data, 0)
        f.sync()
    finally:
        f.close()
    fs.rename(tmp, final)
    fs.fsync_dir(meta_dir)
    # Cleanup needs no fsync: a resurrected old snapshot or tmp file is harmless (the newest
    # valid one wins, tmp files are ignored) and is removed again by the next snapshot.
    for name in fs.listdir(meta_dir):
        m = _NAME.fullmatch(name)
        if (m is not None and int(m.group(1)) < snap_id) or _TMP.fullmatch(name):
            fs.unlink(meta_dir / name)
    return snap_id


def load_latest_snapshot(fs: Fs, meta_dir: Path) -> dict[str, Any] | None:
    """The body of the newest valid snapshot, trying newest to oldest; None if none is."""
    for snap_id in reversed(snapshot_ids(fs, meta_dir)):
        try:
            buf = fs.read_file(meta_dir / snapshot_name(snap_id))
        except FileNotFoundError:
            continue
        doc = decode_snapshot(buf)
        if doc is not None:
            return doc
    return None
