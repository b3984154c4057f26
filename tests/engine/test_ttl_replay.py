"""A replayed config change runs its retention pass at the frame's commit time (STORAGE §6
step 4, §7): a TTL that a later change lifted or raised must not expire, at recovery,
records that never expired live (SEMANTICS §2.2, §4.2) — against the restart's clock it
would. Both crash images, both persistent classes (a power cut keeps only what was
fsynced: `disk` writes are covered by the process-crash image)."""

from __future__ import annotations

import pytest

from seglog.clock import ManualClock
from seglog.model import Durability, RecordIn, TopicConfig
from seglog.storage.snapshot import load_latest_snapshot
from tests.engine.oracle import ROOT, ImageKind, abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs

CASES = [
    (Durability.FSYNC, "power"),
    (Durability.FSYNC, "process"),
    (Durability.DISK, "process"),
]


def _recovered(fs: FaultFs, clock: ManualClock, kind: ImageKind) -> list[int]:
    img = image(fs, kind)
    e2 = open_engine(img, clock=clock)
    try:
        return sorted(read_all(e2, "t"))
    finally:
        e2.close(snapshot=False)


# Config changes at t = 0 (with the writes), 1 s and 2 s; the records are 12 s old at the
# crash. Each TTL that ever held was lifted or raised before the records reached it.
CHANGES = {
    "lifted": [{}, {"ttl_ms": 5_000}, {}],
    "raised": [{"ttl_ms": 5_000}, {"ttl_ms": 5_000, "priority": 5}, {"ttl_ms": 3_600_000}],
}


@pytest.mark.parametrize("changes", CHANGES)
@pytest.mark.parametrize(("cls", "kind"), CASES)
def test_a_ttl_lifted_or_raised_before_it_applied_expires_nothing_on_replay(
    cls: Durability, kind: ImageKind, changes: str
) -> None:
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    first, *later = CHANGES[changes]
    e.put_topic("t", TopicConfig(durability=cls, **first))  # type: ignore[arg-type]
    acked = e.write("t", [RecordIn.of({"i": i}) for i in range(3)]).seqs
    for cfg in later:
        clock.advance(1_000)
        e.put_topic("t", TopicConfig(durability=cls, **cfg))  # type: ignore[arg-type]
    clock.advance(10_000)
    assert sorted(read_all(e, "t")) == acked
    try:
        assert _recovered(fs, clock, kind) == acked
    finally:
        abandon(e, fs)


@pytest.mark.parametrize(("cls", "kind"), CASES)
def test_what_expired_live_stays_expired_after_replay(cls: Durability, kind: ImageKind) -> None:
    """The other side: records a live pass expired (its EvictWatermark logged) stay gone,
    and records due under the final config expire at the first pass after recovery."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    e.put_topic("t", TopicConfig(durability=cls, ttl_ms=5_000))
    old = e.write("t", [RecordIn.of({"i": i}) for i in range(2)]).seqs
    clock.advance(6_000)
    assert old and sorted(read_all(e, "t")) == []  # the read's pass expired them, durably
    young = e.write("t", [RecordIn.of({"i": 9})]).seqs
    clock.advance(1_000)
    e.put_topic("t", TopicConfig(durability=cls, ttl_ms=5_000, priority=3))
    assert sorted(read_all(e, "t")) == young
    try:
        assert _recovered(fs, clock, kind) == young
        clock.advance(5_000)  # the young record is now due as well
        assert _recovered(fs, clock, kind) == []
    finally:
        abandon(e, fs)


@pytest.mark.parametrize("cls", [Durability.FSYNC, Durability.DISK])
def test_a_snapshot_runs_the_retention_pass_before_it_captures(cls: Durability) -> None:
    """STORAGE §5.3 step 4: records due to expire are not carried by the snapshot (nor
    resurrected by it: the floor it raises is logged after the checkpoint)."""
    fs, clock = FaultFs(), ManualClock()
    e = open_engine(fs, clock=clock)
    e.put_topic("t", TopicConfig(durability=cls, ttl_ms=5_000))
    e.write("t", [RecordIn.of({"i": i}) for i in range(3)])
    clock.advance(3_000)
    e.write("t", [RecordIn.of({"i": 9})])
    clock.advance(3_000)  # the first three are due; nothing wrote or read since
    e.snapshot()
    assert e.topics["t"].expiry_floor == 3  # the pass ran at the capture
    body = load_latest_snapshot(fs, ROOT / "meta")
    assert body is not None
    (topic,) = body["topics"]
    assert topic["expiry_floor"] == 3
    abandon(e, fs)
