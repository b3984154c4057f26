"""Snapshot framing (STORAGE §5.1): round trip, ids, newest-valid fallback, temp files."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import orjson
import pytest
import xxhash

from seglog.storage.fs import RealFs
from seglog.storage.snapshot import load_latest_snapshot, write_snapshot

BODY: dict[str, Any] = {
    "ts": 1748450000000,
    "next_topic_id": 12,
    "checkpoint": {
        "last_checkpoint_seq": 0,
        "groups": [{"key": "", "wal_idx": 3, "wal_offset": 9}],
    },
    "topics": [{"name": "jobs", "topic_id": 10, "records": [{"seq": 1, "data": {"x": "é"}}]}],
    "routers": [],
}


def names(meta: Path) -> list[str]:
    return sorted(p.name for p in meta.iterdir())


def test_round_trip_and_layout(tmp_path: Path) -> None:
    fs, meta = RealFs(), tmp_path / "meta"
    meta.mkdir()
    assert load_latest_snapshot(fs, meta) is None
    assert load_latest_snapshot(fs, tmp_path / "missing") is None
    body = dict(BODY)
    assert write_snapshot(fs, meta, body) == 1
    assert body["id"] == 1
    raw = (meta / "snapshot-0000000000000001.bin").read_bytes()
    payload = orjson.dumps(body)
    assert raw[:24] == b"SGSN" + struct.pack(
        "<IQQ", 2, len(payload), xxhash.xxh3_64_intdigest(payload)
    )
    assert raw[24:] == payload
    assert load_latest_snapshot(fs, meta) == {**BODY, "id": 1}


def test_ids_increase_and_older_files_are_removed(tmp_path: Path) -> None:
    fs, meta = RealFs(), tmp_path / "meta"
    meta.mkdir()
    for expected in (1, 2, 3):
        assert write_snapshot(fs, meta, {"n": expected}) == expected
    assert names(meta) == ["snapshot-0000000000000003.bin"]
    (meta / "snapshot-0000000000000041.bin").write_bytes(b"junk")  # invalid but highest
    assert write_snapshot(fs, meta, {"n": 4}) == 42
    assert load_latest_snapshot(fs, meta) == {"n": 4, "id": 42}


def test_tmp_files_are_ignored_and_cleaned(tmp_path: Path) -> None:
    fs, meta = RealFs(), tmp_path / "meta"
    meta.mkdir()
    write_snapshot(fs, meta, {"n": 1})
    newer = orjson.dumps({"n": 99, "id": 9})
    framed = b"SGSN" + struct.pack("<IQQ", 1, len(newer), xxhash.xxh3_64_intdigest(newer)) + newer
    (meta / "snapshot-0000000000000009.bin.tmp").write_bytes(framed)  # complete, never renamed
    (meta / "snapshot-0000000000000002.bin.tmp").write_bytes(b"SG")
    assert load_latest_snapshot(fs, meta) == {"n": 1, "id": 1}
    assert write_snapshot(fs, meta, {"n": 2}) == 2
    assert names(meta) == ["snapshot-0000000000000002.bin"]


def _two_snapshots(tmp_path: Path) -> tuple[RealFs, Path, Path]:
    """Snapshot 1 (kept, as if the cleanup after 2 never ran) and snapshot 2 (newest)."""
    fs, meta = RealFs(), tmp_path / "meta"
    meta.mkdir()
    write_snapshot(fs, meta, {"which": "old"})
    old = (meta / "snapshot-0000000000000001.bin").read_bytes()
    write_snapshot(fs, meta, {"which": "new", "pad": "x" * 40})
    (meta / "snapshot-0000000000000001.bin").write_bytes(old)
    newest = meta / "snapshot-0000000000000002.bin"
    assert load_latest_snapshot(fs, meta) == {"which": "new", "pad": "x" * 40, "id": 2}
    return fs, meta, newest


def test_corrupt_newest_falls_back_at_every_byte(tmp_path: Path) -> None:
    fs, meta, newest = _two_snapshots(tmp_path)
    good = newest.read_bytes()
    for pos in range(len(good)):
        bad = bytearray(good)
        bad[pos] ^= 0x20
        newest.write_bytes(bytes(bad))
        assert load_latest_snapshot(fs, meta) == {"which": "old", "id": 1}, pos


@pytest.mark.parametrize("keep", [0, 3, 4, 8, 16, 23, 24, 25, -1])
def test_truncated_newest_falls_back(tmp_path: Path, keep: int) -> None:
    fs, meta, newest = _two_snapshots(tmp_path)
    good = newest.read_bytes()
    newest.write_bytes(good[:keep] if keep >= 0 else good[:-1])
    assert load_latest_snapshot(fs, meta) == {"which": "old", "id": 1}


@pytest.mark.parametrize(
    ("magic", "version", "payload"),
    [
        (b"SGSN", 3, b'{"a":1}'),  # another version
        (b"SGSX", 1, b'{"a":1}'),  # bad magic
        (b"SGSN", 1, b'{"a":'),  # checksummed but unparsable
        (b"SGSN", 1, b"[1,2]"),  # not an object
        (b"SGSN", 1, b"\xff\xfe"),  # not UTF-8
    ],
)
def test_invalid_newest_is_skipped(
    tmp_path: Path, magic: bytes, version: int, payload: bytes
) -> None:
    fs, meta, newest = _two_snapshots(tmp_path)
    header = struct.pack("<4sIQQ", magic, version, len(payload), xxhash.xxh3_64_intdigest(payload))
    newest.write_bytes(header + payload)
    assert load_latest_snapshot(fs, meta) == {"which": "old", "id": 1}
    newest.unlink()
    (meta / "snapshot-0000000000000001.bin").write_bytes(header + payload)
    assert load_latest_snapshot(fs, meta) is None
