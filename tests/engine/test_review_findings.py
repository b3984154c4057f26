"""Defects found by a review of the issue-9 change, each with the scenario that showed it:
reject-mode topics starved by a pending eviction, a class change that trusted a reservation
that never became durable, falling back to the older snapshot across a shard-layout change,
a WAL group deleted and recreated under a kept snapshot's position, and segment files of an
ephemeral period reused after a crash."""

from __future__ import annotations

import pytest
import xxhash

from seglog.clock import ManualClock
from seglog.engine.maintenance import seal_topic
from seglog.errors import SeglogError
from seglog.model import Discard, Durability, RecordIn, TopicConfig
from seglog.storage.snapshot import snapshot_ids, snapshot_name
from tests.engine.oracle import ROOT, Hooks, abandon, open_engine, read_all
from tests.support.faultfs import FaultFs

FSYNC = TopicConfig(durability=Durability.FSYNC)


# ---- f1_reject_ttl ----------------------------------------


def test_reject_topic_with_expired_records_admits_write():
    fs = FaultFs()
    clock = ManualClock()
    e = open_engine(fs, clock=clock)
    try:
        cfg = TopicConfig(
            ttl_ms=1000, cap_records=3, discard=Discard.REJECT, durability=Durability.FSYNC
        )
        e.put_topic("t", cfg)
        e.write("t", [RecordIn.of({"i": i}) for i in range(3)])
        clock.advance(5000)  # all three expired
        # Admission must see the eviction its own retention pass makes due (the records
        # expired): the very next write is admitted, no read needed to unblock it.
        assert e.write("t", [RecordIn.of({"new": 1})]).seqs == [4]
        assert e.get_topic("t").count == 1
    finally:
        abandon(e, fs)


# ---- f2_class_change ----------------------------------------

DISK = TopicConfig(durability=Durability.DISK)
MEM = TopicConfig(durability=Durability.MEMORY)


def test_memory_to_disk_trusts_failed_reservation():
    fs = FaultFs()
    e = open_engine(fs)
    hooks = Hooks(fs)
    e.put_topic("t", DISK)
    hooks.fail_write(b'"A-1"')
    with pytest.raises(SeglogError):
        e.write("t", [RecordIn.of({"id": "A-1"})])  # seq 1 + HW(257): batch fails
    e.put_topic("t", MEM)
    e.put_topic("t", DISK)  # logs HW(1): only that is durable, not the failed HW(257)
    acked = []
    for i in range(5):
        r = e.write("t", [RecordIn.of({"id": f"B-{i}"})])  # buffered, no HeadWatermark
        acked += r.seqs
    # power cut before any fsync of those buffered frames
    img = fs.crash_image("none")
    abandon(e, fs)
    e2 = open_engine(img)
    try:
        r = e2.write("t", [RecordIn.of({"id": "C"})])
        assert r.first_seq > max(acked), f"acked disk seq reissued: {r.seqs} <= {max(acked)}"
    finally:
        abandon(e2, img)


# ---- f3_layout_fallback ----------------------------------------


def shard(tid, n):
    return 0 if n == 1 else xxhash.xxh3_64_intdigest(tid.to_bytes(8, "little")) % n


def damage_newest_snapshot(fs):
    meta = ROOT / "meta"
    ids = snapshot_ids(fs, meta)
    p = meta / snapshot_name(ids[-1])
    f = fs.open(p)
    f.write_at(b"\xff" * 16, 40)
    f.sync()
    return ids


def test_fallback_snapshot_across_shard_layout_change():
    fs = FaultFs()
    e = open_engine(fs, 2)
    for i in range(1, 13):
        e.put_topic(f"t{i}", FSYNC)
    # topic whose shard goes from 1 (of 2) to 0 (of 3): its new frames replay first
    y = next(
        f"t{i}"
        for i in range(1, 13)
        if shard(e.topics[f"t{i}"].topic_id, 2) == 1 and shard(e.topics[f"t{i}"].topic_id, 3) == 0
    )
    e.write(y, [RecordIn.of({"era": "a0"})])
    e.snapshot()  # S1
    acked = {}
    r = e.write(y, [RecordIn.of({"era": "a1"})])  # after S1, in shard-01 of 2
    acked[r.seqs[0]] = "a1"
    img = fs.process_crash_image()
    abandon(e, fs)
    fs = img
    e = open_engine(fs, 3)  # layout change -> S2 at open (S1 kept)
    r = e.write(y, [RecordIn.of({"era": "b1"})])  # in shard-00 of 3
    acked[r.seqs[0]] = "b1"
    img = fs.process_crash_image()
    abandon(e, fs)
    fs = img
    damage_newest_snapshot(fs)
    e = open_engine(fs, 3)  # falls back to S1
    try:
        got = {s: r.data_json for s, r in read_all(e, y).items()}
        for s, era in acked.items():
            assert s in got and era.encode() in got[s], f"acked seq {s} ({era}) lost: {got}"
    finally:
        abandon(e, fs)


# ---- f3b_group_recreated ----------------------------------------


def crash(e, fs):
    img = fs.process_crash_image()
    abandon(e, fs)
    return img


def test_group_recreated_after_whole_delete():
    fs = FaultFs()
    e = open_engine(fs, 2)
    e.put_topic("y", FSYNC)
    for i in range(20):
        e.write("y", [RecordIn.of({"old": i, "pad": "x" * 50})])
    e.snapshot()  # S1
    for i in range(20):
        e.write("y", [RecordIn.of({"mid": i, "pad": "y" * 50})])
    fs = crash(e, fs)
    e = open_engine(fs, 1)  # layout change -> S2 at open
    e.snapshot()  # S3: prev S2 has shard groups at their end -> rmtree
    fs = crash(e, fs)
    e = open_engine(fs, 2)  # shard dirs recreated from wal-1; S4 at open (S3 kept)
    acked = {}
    for i in range(3):
        r = e.write("y", [RecordIn.of({"new": i})])
        acked[r.seqs[0]] = r
    fs = crash(e, fs)
    damage_newest_snapshot(fs)
    try:
        e = open_engine(fs, 2)  # falls back to S3
    except Exception as err:
        raise AssertionError(f"recovery refused after fallback: {err!r}") from err
    try:
        got = read_all(e, "y")
        assert all(s in got for s in acked), "acked records lost"
    finally:
        abandon(e, fs)


# ---- f6_ephemeral_stale_segments ----------------------------------------

DISK = TopicConfig(durability=Durability.DISK)
EPH = TopicConfig(durability=Durability.EPHEMERAL)
KW = dict(segment_max_events=4, segment_payload_cache=1)


def test_stale_ephemeral_segment_served_after_class_change():
    fs = FaultFs()
    e = open_engine(fs, **KW)
    e.put_topic("t", DISK)
    e.write("t", [RecordIn.of({"v": "d1"}), RecordIn.of({"v": "d2"})])
    e.put_topic("t", EPH)
    e.snapshot()
    e.write("t", [RecordIn.of({"v": f"eph{i}"}) for i in range(4)])  # 3..6
    assert seal_topic(e, e.topics["t"]) == 0  # ephemeral records never reach segment files
    fs = crash(e, fs)
    e = open_engine(fs, **KW)
    e.put_topic("t", DISK)
    r = e.write("t", [RecordIn.of({"v": f"new{i}"}) for i in range(3)])
    fs = crash(e, fs)
    e = open_engine(fs, **KW)
    try:
        got = {s: x.data_json for s, x in read_all(e, "t").items()}
        for i, s in enumerate(r.seqs):
            assert got.get(s) == RecordIn.of({"v": f"new{i}"}).data_json, f"seq {s}: {got.get(s)!r}"
    finally:
        abandon(e, fs)


# ---- found by the slow model profile --------------------------------------------------


@pytest.mark.parametrize("was", [Durability.MEMORY, Durability.FSYNC])
def test_an_ephemeral_topic_keeps_no_replayed_records_after_a_crash(was: Durability) -> None:
    """Records written while a topic was persistent are replayed from the WAL; if the topic
    is ephemeral by the end of replay it keeps none of them (SEMANTICS §2.2) — a delete on
    the ephemeral topic logged nothing, so keeping them would resurrect deleted records."""
    fs = FaultFs()
    e = open_engine(fs)
    e.put_topic("b", TopicConfig(durability=was))
    e.write("b", [RecordIn.of({"v": 1}, tag="x")])
    e.put_topic("b", TopicConfig(durability=Durability.EPHEMERAL))
    assert e.delete_records("b", before_seq=2).deleted == 1
    fs = crash(e, fs)
    e = open_engine(fs)
    try:
        assert read_all(e, "b") == {}
        assert e.get_topic("b").count == 0
        assert e.write("b", [RecordIn.of({"v": 2})]).first_seq == 2  # the seq is not reissued
    finally:
        abandon(e, fs)


# ---- missing WAL files ------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["middle", "start"])
def test_a_missing_wal_file_refuses_the_start(missing: str) -> None:
    """A WAL file that replay needs is gone (a bad copy, an operator's cleanup): recovery
    must refuse, naming the group, rather than replay around the gap and drop the acked
    records it held (or hand their seqs out again). Nothing on disk changes."""
    from seglog.storage.wal_files import discover_groups
    from seglog.storage.walscan import WalFilesMissingError

    fs = FaultFs()
    e = open_engine(fs, 1, wal_file_size=2048)
    e.put_topic("t", FSYNC)
    for i in range(6):
        e.write("t", [RecordIn.of({"i": i, "pad": "p" * 300})])
    start_idx = 0
    if missing == "start":
        e.snapshot()  # replay will start in the file its checkpoint mark went to
        assert e.last_snapshot is not None
        start_idx = e.last_snapshot.positions[""][0]
    for i in range(6, 12):
        e.write("t", [RecordIn.of({"i": i, "pad": "p" * 300})])
    fs = crash(e, fs)
    (group,) = discover_groups(fs, ROOT / "wal")
    assert len(group.files) >= 3, "the test needs rotated WAL files"
    files = dict(group.files)
    if missing == "middle":
        victim = group.files[1][1]
    else:
        assert max(files) > start_idx, "the test needs a file after the start file"
        victim = files[start_idx]
    fs.unlink(victim)
    before = {n: fs.read_file(ROOT / "wal" / n) for n in fs.listdir(ROOT / "wal")}
    with pytest.raises(WalFilesMissingError, match="replay needs"):
        open_engine(fs, 1, wal_file_size=2048)
    assert {n: fs.read_file(ROOT / "wal" / n) for n in fs.listdir(ROOT / "wal")} == before
