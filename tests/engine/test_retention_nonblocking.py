"""A retention pass never waits for the disk on the caller's thread: the EvictWatermark of a
TTL or byte-cap cut is a pending op, applied after its commit (the floor is durable before it
is visible), so an event loop reading or writing a topic is never held by an fsync."""

from __future__ import annotations

import threading
from pathlib import Path

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from seglog.model import Durability, RecordIn, TopicConfig
from tests.support.faultfs import FaultFs


def _engine(fs: FaultFs, clock: ManualClock) -> Engine:
    e = Engine(EngineOptions(data_dir=Path("/data"), wal_shards=1), fs=fs, clock=clock)
    e.open()
    return e


def test_a_due_ttl_watermark_does_not_block_a_read() -> None:
    fs, clock = FaultFs(), ManualClock()
    e = _engine(fs, clock)
    e.put_topic("t", TopicConfig(durability=Durability.DISK, ttl_ms=1000))
    e.write("t", [RecordIn.of({"i": i}) for i in range(5)])
    clock.advance(5000)

    gate = threading.Event()
    fs.write_gate = gate  # the WAL writer now stalls inside its next write
    try:
        op = e.prepare_read("t")
        assert op is not None and not op.applied
        # The read returns at once: expired records are hidden by their ts already, and the
        # floor is not visible before its watermark is durable.
        res = e.read("t", 0, wait=False)
        assert res.records == [] and res.earliest_seq == 1
        assert e.prepare_read("t") is op  # one watermark in flight, not one per read
    finally:
        fs.write_gate = None
        gate.set()
    e.drain(op)
    assert op.applied and op.error is None
    res = e.read("t", 0)
    assert res.earliest_seq == 6 and res.tombstone is not None
    e.close(snapshot=False)


def test_a_failed_watermark_changes_nothing_and_is_retried() -> None:
    fs, clock = FaultFs(), ManualClock()
    e = _engine(fs, clock)
    e.put_topic("t", TopicConfig(durability=Durability.FSYNC, ttl_ms=1000))
    e.write("t", [RecordIn.of({"i": i}) for i in range(3)])
    clock.advance(5000)
    fs.fail_syncs = {fs.syncs + 1}
    op = e.prepare_read("t")
    assert op is not None
    e.drain(op)
    assert op.applied
    assert e.read("t", 0, wait=False).earliest_seq == 1  # the floor did not move
    info = e.get_topic("t")  # the next pass logs it again, and this time it lands
    assert info.earliest_seq == 4 and info.count == 0
    e.close(snapshot=False)
