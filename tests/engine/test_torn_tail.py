"""Torn WAL tails: truncate or garble the tail at every byte offset of the last frames;
recovery must stop at the last valid frame, truncate there, open, and keep every record
before the damage — and new writes must continue and survive another restart. A garbled
byte with valid frames after it is corruption: recovery refuses and touches nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from seglog.core.frame_scanner import iter_raw
from seglog.engine.engine import Engine, EngineOptions
from seglog.model import Durability, RecordIn, TopicConfig
from seglog.storage.wal_files import wal_file_name
from seglog.storage.walscan import WalCorruptionError


def _build(root: Path) -> tuple[Path, list[int], list[int]]:
    """A data dir whose WAL ends with 3 record frames; returns (wal file, frame ends, seqs)."""
    e = Engine(EngineOptions(data_dir=root, wal_shards=1, wal_file_size=1 << 20))
    e.open()
    e.put_topic("t", TopicConfig(durability=Durability.FSYNC))
    for i in range(5):
        e.write("t", [RecordIn.of({"i": i}, tag=f"k{i}")])
    e.close(snapshot=False)
    wal = root / "wal" / wal_file_name(1)
    ends = [raw[0] for raw in iter_raw(wal.read_bytes())]
    return wal, ends, [1, 2, 3, 4, 5]


def _recover(root: Path) -> tuple[list[int], int]:
    e = Engine(EngineOptions(data_dir=root, wal_shards=1, wal_file_size=1 << 20))
    e.open()
    try:
        torn = e.stats().wal_torn_tails_total
        seqs = [r.seq for r in e.read("t", 0, limit=100).records]
        head = e.topics["t"].head
        w = e.write("t", [RecordIn.of("after")])
        assert w.seqs == [head + 1]
    finally:
        e.close(snapshot=False)
    e = Engine(EngineOptions(data_dir=root, wal_shards=1, wal_file_size=1 << 20))
    e.open()
    try:
        again = [r.seq for r in e.read("t", 0, limit=100).records]
        assert again == [*seqs, head + 1], "recovery is not idempotent"
        assert e.stats().wal_torn_tails_total == 0, "the torn tail was not cut for good"
    finally:
        e.close(snapshot=False)
    return seqs, torn


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_every_byte_of_the_last_frames(tmp_path: Path, damage: str) -> None:
    pristine = tmp_path / "pristine"
    wal, ends, seqs = _build(pristine)
    first_damaged = ends[-4]  # start of the third-to-last record frame region
    work = tmp_path / "work"
    for cut in range(first_damaged, ends[-1]):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work)
        target = work / "wal" / wal.name
        buf = bytearray(target.read_bytes())
        if damage == "truncate":
            del buf[cut:]
        else:
            buf[cut] ^= 0x5A
        target.write_bytes(bytes(buf))
        intact = sum(1 for end in ends if end <= cut) - 1  # minus the TopicCreate frame
        frame_start = max([0, *(end for end in ends if end <= cut)])
        if damage == "garble" and cut < ends[-2]:
            # Valid frames follow the damage: that is corruption, not a torn tail (STORAGE
            # §3.1). The server refuses to start, names file and offset, changes nothing.
            with pytest.raises(WalCorruptionError) as info:
                _recover(work)
            assert info.value.corruption.path == target
            assert info.value.corruption.offset == frame_start
            assert info.value.corruption.valid_frames_after == sum(1 for e in ends if e > cut) - 1
            assert target.read_bytes() == bytes(buf), "a refused recovery changed the WAL"
            continue
        got, torn = _recover(work)
        assert got == seqs[:intact], (cut, got)
        # A cut exactly at a frame end leaves only zeros (a clean end); anything else is a
        # torn tail, cut and counted (STORAGE §3.1, `topics_wal_torn_tails_total`).
        assert torn == (0 if damage == "truncate" and cut in ends else 1), (cut, torn)
