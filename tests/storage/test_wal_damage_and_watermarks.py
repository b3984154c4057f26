"""A read whose eviction watermark cannot be logged fails instead of passing the expired
records without their tombstone (SEMANTICS §4.2 step 4), and a WAL start file shorter than
the snapshot's position is refused as corruption (STORAGE §3.1, §6 step 4). Engines run on
`tests.support.faultfs.FaultFs` (in-memory, fault-injecting)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from seglog.errors import ErrorCode, SeglogError
from seglog.model import Durability, RecordIn, TopicConfig
from tests.support.faultfs import Crash, FaultFs, WriteFault

ROOT = Path("/data")


def _engine(fs: FaultFs, clock: ManualClock) -> Engine:
    # The WAL writer thread writes every batch (no inline writes), so the injected fault
    # below hits exactly the retention pass's EvictWatermark submission.
    e = Engine(
        EngineOptions(data_dir=ROOT, wal_shards=1, wal_file_size=256 << 10,
                      wal_inline_writes=False),
        fs=fs,
        clock=clock,
    )  # fmt: skip
    e.open()
    return e


def _fail_next_wal_write(fs: FaultFs) -> None:
    """Fail the next WAL write once with EIO (nothing written); the shard's repair (zero
    the range, fsync) succeeds, so the shard stays writable."""
    state = {"armed": True}

    def fault(path: Path, _offset: int, data: bytes) -> WriteFault | None:
        if state["armed"] and "/wal/" in str(path) and data:
            state["armed"] = False
            return WriteFault(errno=errno.EIO)
        return None

    fs.write_fault = fault


def _fail_every_wal_write(fs: FaultFs) -> None:
    """Every WAL write and fsync fails: the repair fails too and the shard latches
    read-only (STORAGE §3.5), so later watermarks cannot even be submitted."""
    fs.write_fault = lambda p, _o, _d: WriteFault(errno=errno.EIO) if "/wal/" in str(p) else None
    fs.sync_fault = lambda p: errno.EIO if "/wal/" in str(p) else None


@pytest.mark.parametrize("fault", ["transient_eio", "read_only_shard"])
def test_a_read_whose_ttl_watermark_fails_fails_instead_of_skipping(fault: str) -> None:
    """SEMANTICS §4.2 step 4: "If step 1 or 3 advanced a floor on a non-ephemeral topic,
    durably log an eviction watermark (both floors) before applying it. If that fails,
    nothing changes and the triggering operation fails (500)." (also STORAGE §7: "An
    eviction watermark is durable before the floor it describes is visible").

    A read of an `fsync` topic whose records have all expired runs the retention pass;
    its EvictWatermark hits a WAL I/O error. The read must fail (`internal` = 500).

    The read used to succeed (the pass logged "watermark not queued", `apply_evict` only
    logged a failed commit, and the read carried on): no records, `next_from_seq` past
    the expired seqs and **no tombstone** (the same read with a working WAL reports the
    TTL tombstone 1..3) — a reader's cursor silently passed records it never saw."""
    fs = FaultFs()
    clock = ManualClock(1_000)
    e = _engine(fs, clock)
    try:
        e.put_topic("t", TopicConfig(durability=Durability.FSYNC, ttl_ms=100))
        e.write("t", [RecordIn.of({"i": i}) for i in range(3)])
        clock.advance(500)  # all three expired
        if fault == "transient_eio":
            _fail_next_wal_write(fs)
        else:
            _fail_every_wal_write(fs)
            with pytest.raises(SeglogError):  # a write fails; the shard latches read-only
                e.write("t", [RecordIn.of({"x": 1})])
            assert e.wal is not None and any(s.read_only for s in e.wal._shards)
            fs.write_fault = None
            fs.sync_fault = None
        with pytest.raises(SeglogError) as err:
            e.read("t", 0)  # not a page past the expired records without their tombstone
        assert err.value.code is ErrorCode.INTERNAL
    finally:
        fs.write_fault = None
        fs.sync_fault = None
        try:
            e.close(snapshot=False)
        except (Exception, Crash):
            pass


# ---- a WAL file cut short at a frame boundary, with a later file after it -------------------


def _wal_dir_with_three_files(root: Path) -> dict[int, bytes]:
    """A data dir whose only WAL group holds three files (4 KiB each): 150 `fsync` records,
    each acknowledged (one write per record), no snapshot. Returns seq -> data JSON."""
    e = Engine(EngineOptions(data_dir=root, wal_shards=1, wal_file_size=4096), clock=ManualClock())
    e.open()
    acked: dict[int, bytes] = {}
    try:
        e.put_topic("a", TopicConfig(durability=Durability.FSYNC))
        for i in range(150):
            rec = RecordIn.of({"i": i})
            acked[e.write("a", [rec]).seqs[0]] = rec.data_json
    finally:
        e.close(snapshot=False)
    assert len(sorted((root / "wal").glob("wal-*.log"))) >= 3
    return acked


def _cut_second_file_at_a_frame_boundary(root: Path) -> int:
    """Truncate the group's second (not last) file right after one of its middle frames,
    as a bad copy or a lost tail of the file would; returns the frames dropped."""
    from seglog.core.frame_scanner import iter_raw

    files = sorted((root / "wal").glob("wal-*.log"))
    victim = files[1]
    buf = victim.read_bytes()
    ends = [raw[0] for raw in iter_raw(buf)]
    cut = ends[len(ends) // 2]
    victim.write_bytes(buf[:cut])
    return len(ends) - len(ends) // 2 - 1


def test_a_wal_start_file_shorter_than_the_snapshot_position_is_refused(
    tmp_path: Path,
) -> None:
    """The snapshot recorded its group's
    position `(wal_idx, wal_offset)` right after its CheckpointMark (STORAGE §5.2, §5.3
    step 2), so the start file held at least `wal_offset` bytes of frames, and the
    Appends after the mark were acknowledged (`fsync`). §6 step 4 replays "in the start
    file ... frames ending [after] the start offset"; §3.1 forbids dropping valid later
    frames silently, and `check_files_present` already refuses a *missing* start file
    ("acknowledged records may be lost"). Cut the start file 100 bytes short of the
    recorded offset: the server used to start (the scan of that file began past its end
    and found nothing; replay went on with the next file) and served 119 of 150 acked
    records — seqs 31..61, written after the snapshot, silently became holes."""
    from seglog.storage.fs import RealFs
    from seglog.storage.snapshot import load_latest_snapshot
    from seglog.storage.wal_files import wal_file_name
    from seglog.storage.walscan import WalCorruptionError, WalFilesMissingError

    root = tmp_path / "data"

    def engine() -> Engine:
        return Engine(
            EngineOptions(data_dir=root, wal_shards=1, wal_file_size=4096), clock=ManualClock()
        )

    e = engine()
    e.open()
    acked: dict[int, bytes] = {}
    try:
        e.put_topic("a", TopicConfig(durability=Durability.FSYNC))
        for i in range(150):
            rec = RecordIn.of({"i": i})
            acked[e.write("a", [rec]).seqs[0]] = rec.data_json
            if i == 29:
                e.snapshot()
    finally:
        e.close(snapshot=False)
    snap = load_latest_snapshot(RealFs(), root / "meta")
    assert snap is not None
    (group,) = snap["checkpoint"]["groups"]
    start = root / "wal" / wal_file_name(group["wal_idx"])
    assert len(sorted((root / "wal").glob("wal-*.log"))) > group["wal_idx"]  # a later file
    start.write_bytes(start.read_bytes()[: group["wal_offset"] - 100])
    e = engine()
    try:
        e.open()
    except (WalCorruptionError, WalFilesMissingError):
        return  # refused loudly: what §3.1 asks for
    try:
        got = {r.seq for r in e.read("a", 0, limit=1000).records}
    finally:
        e.close(snapshot=False)
    missing = sorted(set(acked) - got)
    assert not missing, (
        f"the server started and silently dropped {len(missing)} acknowledged fsync records "
        f"(seqs {missing[0]}..{missing[-1]}) behind a start file shorter than the snapshot's "
        "recorded position"
    )
