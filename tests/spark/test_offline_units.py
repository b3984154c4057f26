"""The offline reader without Spark, over directories written by a real in-process engine:
offline = what an engine opened on a copy of the directory reads (online after restart),
after a clean stop and after a stop without the final snapshot; torn tails cut in memory;
mid-WAL and segment corruption fail loudly; a running engine's directory reads as of its
newest snapshot; the reader never changes a byte, an mtime or a file name."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import relocate_cold, seal_topic
from seglog.model import Durability, RecordIn, Selector, TopicConfig
from seglog.router_model import Guarantee, RouterSpec
from seglog.spark import files
from seglog.spark.errors import SeglogCorruptionError
from seglog.spark.files import (
    SegmentPartition,
    TailPartition,
    TailRows,
    plan,
    read_segment,
    read_tail,
    read_tail_rows,
)
from seglog.spark.options import SeglogOptionError, parse_files_options
from seglog.spark.schema import arrow_schema
from seglog.storage.fs import RealFs
from seglog.storage.segment import list_topic_segments
from seglog.storage.snapshot import load_latest_snapshot
from seglog.storage.wal_files import discover_groups
from seglog.storage.walscan import scan_group
from tests.spark.test_logic import SPARK_SCHEMA

Row = tuple[str, int, int, str | None, str | None, Any, Any]


def options(root: Path) -> EngineOptions:
    return EngineOptions(
        data_dir=root / "data",
        cold_dir=root / "cold",
        wal_shards=2,
        segment_max_events=50,
        hot_retain_segments=1,
    )


def recs(n: int, offset: int) -> list[RecordIn]:
    return [
        RecordIn.of(
            {"i": i},
            meta={"m": i} if i % 3 == 0 else None,
            node="n1" if i % 4 == 0 else None,
            tag=f"t{i % 5}",
        )
        for i in range(offset, offset + n)
    ]


def seal_all(e: Engine) -> None:
    for t in list(e.topics.values()):
        seal_topic(e, t)
        relocate_cold(e, t)


def build(root: Path, *, final_snapshot: bool) -> Engine:
    """Two topics, one created after the last snapshot; sealed segments in both tiers;
    tag, before_seq and explicit deletes on sealed and unsealed records; a record cap;
    records only in the WAL; a dropped topic. Returns the closed engine."""
    e = Engine(options(root))
    e.open()
    e.put_topic("a", TopicConfig(cap_records=400))
    e.put_topic("gone", TopicConfig())
    for k in range(6):
        e.write("a", recs(100, k * 100))
    e.write("gone", recs(10, 0))
    seal_all(e)
    e.delete_records("a", match=Selector("Eq", "t1"))  # flags in sealed segments
    e.snapshot()
    e.write("a", recs(130, 600))  # only in the WAL (and partly sealed below)
    e.put_topic("b", TopicConfig(durability=Durability.FSYNC))
    e.write("b", recs(75, 5000))
    seal_all(e)
    e.delete_records("a", seqs=[330, 331, 700])  # a sealed flag flip and the WAL only
    e.delete_records("b", before_seq=4)
    e.delete_records("b", match=Selector("Glob", "t2"))
    e.drop_topic("gone")
    e.write("b", recs(3, 6000))  # the active tail
    e.close(snapshot=final_snapshot)
    return e


def engine_rows(e: Engine, name: str) -> list[Row]:
    out: list[Row] = []
    cursor = 0
    while True:
        r = e.read(name, cursor, limit=1000)
        assert r.tombstone is None or name == "a"  # the cap evicts from "a"
        for x in r.records:
            meta = None if x.meta_json is None else orjson.loads(x.meta_json)
            out.append((name, x.seq, x.ts, x.tag, x.node, orjson.loads(x.data_json), meta))
        if r.caught_up or r.next_from_seq <= cursor:
            return out
        cursor = r.next_from_seq


def online_after_restart(root: Path, tmp: Path) -> list[Row]:
    """What the server reads after a restart, on a copy (recovery writes to its dir)."""
    copy = tmp / "online-copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".seglog.lock"))
    e = Engine(options(copy))
    e.open()
    try:
        return [r for name in sorted(e.topics) for r in engine_rows(e, name)]
    finally:
        e.close(snapshot=False)


def offline(root: Path, **extra: str) -> list[Row]:
    """The offline read, with the tails shipped in the partitions and with them re-derived
    by a replay: both must give the same rows."""
    now = _now()  # one planning time: re-derived router copies are stamped with it
    embedded = _offline(root, now, **extra)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(files, "EMBED_TAIL_RECORDS", 0)
        replayed = _offline(root, now, **extra)
    assert embedded == replayed
    return embedded


def _offline(root: Path, now: int, pushed: Any = None, **extra: str) -> list[Row]:
    opts = parse_files_options(
        {"path": str(root / "data"), "coldPath": str(root / "cold"), **extra}
    )
    schema = arrow_schema(SPARK_SCHEMA)
    out: list[Row] = []
    for p in plan(opts, now, pushed):
        if isinstance(p, SegmentPartition):
            batches = read_segment(opts, schema, p)
        elif isinstance(p, TailRows):
            batches = read_tail_rows(opts, schema, p)
        else:
            assert isinstance(p, TailPartition)
            batches = read_tail(opts, schema, p)
        for b in batches:
            for r in b.to_pylist():
                ts = int(r["ts"].timestamp() * 1000 + 0.5)
                meta = None if r["meta"] is None else orjson.loads(r["meta"])
                out.append(
                    (r["topic"], r["seq"], ts, r["tag"], r["node"], orjson.loads(r["data"]), meta)
                )
    return sorted(out, key=lambda r: (r[0], r[1]))


def _now() -> int:
    import time

    return int(time.time() * 1000)


def fingerprint(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and directory under `root`: content hash, size and mtime."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.stat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (digest, st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("final_snapshot", [True, False], ids=["clean-stop", "no-final-snapshot"])
def test_offline_equals_online_after_restart(tmp_path: Path, final_snapshot: bool) -> None:
    root = tmp_path / "dir"
    build(root, final_snapshot=final_snapshot)
    before = fingerprint(root)
    got = offline(root)
    assert fingerprint(root) == before  # read-only: no byte, mtime or name changed
    want = online_after_restart(root, tmp_path)
    assert got == want
    names = {r[0] for r in got}
    assert names == {"a", "b"}  # "gone" was dropped
    a = [r[1] for r in got if r[0] == "a"]
    assert len(a) < 400 and 330 not in a and 700 not in a and max(a) == 730
    b = [r[1] for r in got if r[0] == "b"]
    assert b[0] == 4 and b[-1] == 78
    assert all(r[3] != "t2" for r in got if r[0] == "b" and r[1] <= 75)
    cold = list((root / "cold" / "topics").rglob("*.data"))
    assert cold, "the fixture must put segments in the cold tier"


def test_torn_wal_tail_is_cut_in_memory_only(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    build(root, final_snapshot=False)
    fs = RealFs()
    torn = 0
    for g in discover_groups(fs, root / "data" / "wal"):
        scan = scan_group(fs, g)
        if scan.files:
            f = scan.files[-1]
            with open(f.path, "r+b") as fh:  # a half-written frame: nonzero, not valid
                fh.seek(f.end)
                fh.write(b"\x50\x00\x00\x00\x01\x07\x07" + b"\xab" * 40)
            torn += 1
    assert torn
    before = fingerprint(root)
    got = offline(root)
    assert fingerprint(root) == before
    assert got == online_after_restart(root, tmp_path)


def test_mid_wal_corruption_fails_loudly_with_file_and_offset(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    build(root, final_snapshot=False)
    fs = RealFs()
    snap = load_latest_snapshot(fs, root / "data" / "meta")
    assert snap is not None
    starts = {g["key"]: (g["wal_idx"], g["wal_offset"]) for g in snap["checkpoint"]["groups"]}
    scans = [scan_group(fs, g, starts[g.key]) for g in discover_groups(fs, root / "data" / "wal")]
    scan = max(scans, key=lambda sc: sc.valid_frames)
    assert scan.valid_frames >= 2  # frames after the damaged one may hold acked records
    first = scan.files[0]
    path = first.path
    raw = bytearray(path.read_bytes())
    raw[first.start + 20] ^= 0xFF  # inside the first replayed frame's header
    path.write_bytes(bytes(raw))
    with pytest.raises(SeglogCorruptionError, match=rf"{path.name} at offset {first.start}"):
        offline(root)


def test_corrupt_segment_fails_loudly(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    build(root, final_snapshot=True)
    seg = sorted((root / "cold" / "topics").rglob("*.data"))[-1]
    raw = bytearray(seg.read_bytes())
    raw[60] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with pytest.raises(SeglogCorruptionError, match=rf"{seg.name}.*offset"):
        offline(root)


def test_a_missing_referenced_segment_fails_loudly(tmp_path: Path) -> None:
    """The snapshot references its sealed segments (format 2): one gone means records that
    exist nowhere else, and the read says so instead of returning the rest."""
    root = tmp_path / "dir"
    build(root, final_snapshot=True)
    seg = sorted((root / "cold" / "topics").rglob("*.data"))[-1]
    seg.unlink()
    with pytest.raises(SeglogCorruptionError, match="is missing, and nothing else holds them"):
        offline(root)


def test_running_engine_reads_as_of_its_newest_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    e = Engine(options(root))
    e.open()
    try:
        e.put_topic("r", TopicConfig())
        e.write("r", recs(120, 0))
        seal_all(e)
        e.snapshot()
        at_snapshot = engine_rows(e, "r")
        e.write("r", recs(80, 200))  # after the snapshot: WAL and segments only
        seal_all(e)
        before = fingerprint(root)
        got = offline(root)
        assert fingerprint(root) == before
        assert got == at_snapshot and len(got) == 120
        with pytest.raises(SeglogOptionError, match="requireStopped"):
            offline(root, requireStopped="true")
    finally:
        e.close(snapshot=False)
    assert len(offline(root)) == 200  # stopped: the WAL is replayed


@pytest.mark.parametrize("guarantee", [Guarantee.AT_LEAST_ONCE, Guarantee.EXACTLY_ONCE])
def test_router_copies_since_the_snapshot_are_re_derived(
    tmp_path: Path, guarantee: Guarantee
) -> None:
    """Copies are in no file (SEMANTICS §8.4): the reader re-derives them as the server
    does at startup — same dest seqs, data, node, tag and meta; only `ts` is the read's
    planning time instead of the server's start time."""
    root = tmp_path / "dir"
    e = Engine(options(root))
    e.open()
    e.put_topic("src", TopicConfig())
    e.put_router(RouterSpec("r", "src", "dst", filter=Selector("Glob", "t"), guarantee=guarantee))
    e.write("src", recs(60, 0))
    e.read("dst")  # read-your-writes: forwards, so the snapshot holds copies
    e.snapshot()
    e.write("src", recs(40, 100))  # forwarded after the snapshot: copies in no file
    e.read("dst")
    e.close(snapshot=False)
    got = offline(root)
    want = online_after_restart(root, tmp_path)

    def no_ts(rows: list[Row]) -> list[tuple[Any, ...]]:
        return [r[:2] + r[3:] for r in rows]

    assert no_ts(got) == no_ts(want)
    assert [r[1] for r in got if r[0] == "dst"] == list(range(1, 101))
    assert [r for r in got if r[0] == "dst" and r[1] <= 60] == [
        r for r in want if r[0] == "dst" and r[1] <= 60
    ]  # copies in the snapshot keep their ts


def test_a_router_reading_sealed_records_gets_their_payloads(tmp_path: Path) -> None:
    """Records of reused sealed segments are replayed without their payloads (reads take
    those from the segments). A router still behind its source, whose copies the reader
    re-derives from sealed source records, reads them through the segments."""
    from seglog.offline import OfflineDir

    root = tmp_path / "dir"
    e = Engine(options(root))
    e.open()
    e.put_topic("src", TopicConfig())
    e.put_topic("plain", TopicConfig())
    e.put_router(RouterSpec("r", "src", "dst"))
    e.write("src", recs(120, 0))  # never forwarded before the stop: no read of dst
    e.write("plain", recs(120, 0))
    seal_all(e)
    e.snapshot()
    e.close(snapshot=False)
    got = offline(root)
    want = online_after_restart(root, tmp_path)
    # Re-derived copies are stamped with the read's planning time, not the server's start.
    assert [r[:2] + r[3:] for r in got] == [r[:2] + r[3:] for r in want]
    assert [r[1] for r in got if r[0] == "dst"] == list(range(1, 121))
    now = _now()
    d = OfflineDir.open(root / "data", root / "cold", now, running=False)
    for name in ("src", "plain"):  # no sealed payload was copied into memory
        t = d._rp.registry.get(name)
        assert t is not None
        assert sum(not t.has_payload(s) for s in range(t.origin, t.end_seq)) >= 100


def test_no_snapshot_yet_and_an_ephemeral_topic(tmp_path: Path) -> None:
    """A crash before the first snapshot: the whole WAL is replayed. An ephemeral topic is
    listed (it exists after a restart) but holds nothing."""
    root = tmp_path / "dir"
    e = Engine(options(root))
    e.open()
    e.put_topic("w", TopicConfig(durability=Durability.MEMORY))
    e.put_topic("eph", TopicConfig(durability=Durability.EPHEMERAL))
    e.write("w", recs(70, 0))
    e.write("eph", recs(5, 0))
    e.close(snapshot=False)
    assert not list((root / "data" / "meta").glob("snapshot-*"))
    got = offline(root)
    assert got == online_after_restart(root, tmp_path) and len(got) == 70
    assert offline(root, topics="eph") == []


def test_unfinished_submission_is_not_returned(tmp_path: Path) -> None:
    """Complete frames of a submission whose last frame never reached the file (a crash
    mid-write, never acked) are dropped in memory, as recovery drops them."""
    import xxhash

    from seglog.core.frames import encode_append

    root = tmp_path / "dir"
    e = build(root, final_snapshot=False)
    b = e.topics["b"]
    shard = xxhash.xxh3_64_intdigest(b.topic_id.to_bytes(8, "little")) % 2
    fs = RealFs()
    (g,) = [g for g in discover_groups(fs, root / "data" / "wal") if g.key == f"shard-{shard:02d}"]
    end = scan_group(fs, g).files[-1]
    frames = b"".join(
        encode_append(b.topic_id, b.head + k, 1, None, "t0", b'{"d":1}', True, more=True)
        for k in (1, 2)
    )
    with open(end.path, "r+b") as fh:
        fh.seek(end.end)
        fh.write(frames)
    got = offline(root)
    assert got == online_after_restart(root, tmp_path)
    assert max(r[1] for r in got if r[0] == "b") == b.head


def test_segments_with_nothing_live_get_no_partition(tmp_path: Path) -> None:
    """Sealed segments whose records all passed their TTL by the planning time (the server,
    stopped, never got to remove the files) are not tasks: a task per dead segment would read
    and verify it only to drop every row."""
    root = tmp_path / "dir"
    t0 = 1_700_000_000_000
    clock = ManualClock(t0)
    e = Engine(options(root), clock=clock)
    e.open()
    e.put_topic("a", TopicConfig(ttl_ms=15_000))
    e.write("a", recs(100, 0))
    clock.advance(10_000)
    e.write("a", recs(100, 100))
    seal_all(e)
    e.close(snapshot=True)
    opts = parse_files_options({"path": str(root / "data"), "coldPath": str(root / "cold")})
    parts = plan(opts, t0 + 20_000)
    segs = [p for p in parts if isinstance(p, SegmentPartition)]
    on_disk = {
        (s.first_seq, s.last_seq)
        for s in list_topic_segments(root / "data", segs[0].topic_id, root / "cold")
    }
    assert {(1, 50), (51, 100)} <= on_disk  # still there: the test needs dead segments
    slices = [s for p in segs for s in p.slices]
    assert [(s.first_seq, s.last_seq) for s in slices] == [(101, 150), (151, 200)]
    assert all(s.live for s in slices) and len(parts) == 1  # both in one task


@pytest.mark.parametrize("final_snapshot", [True, False], ids=["clean-stop", "no-final-snapshot"])
def test_a_topic_subset_reads_as_the_whole_directory_does(
    tmp_path: Path, final_snapshot: bool
) -> None:
    """Reading some topics replays only their records (the others' snapshot records are
    skipped over, their record frames not applied), and returns exactly those topics' rows
    of a read of every topic."""
    from seglog.offline import OfflineDir

    root = tmp_path / "dir"
    build(root, final_snapshot=final_snapshot)
    whole = offline(root)
    for name in ("a", "b"):
        assert offline(root, topics=name) == [r for r in whole if r[0] == name]
    d = OfflineDir.open(
        root / "data", root / "cold", _now(), running=False, only={"b"}.__contains__
    )
    assert [v.name for v in d.topics()] == ["b"]
    assert d._rp.registry.get("a").count == 0  # its records were never loaded
    with pytest.raises(ValueError, match="left out"):
        list(d.records("a", 1, 730, ((1, 2),)))


def test_a_subset_replays_the_router_sources_feeding_it(tmp_path: Path) -> None:
    """A router chain src -> mid -> dst, reading only dst: its copies since the snapshot
    are re-derived from mid's, and mid's from src's, so both sources are replayed too
    (found one hop at a time); rows equal those of a read of every topic."""
    from seglog.offline import OfflineDir

    root = tmp_path / "dir"
    e = Engine(options(root))
    e.open()
    e.put_topic("src", TopicConfig())
    e.put_topic("other", TopicConfig())
    e.put_router(RouterSpec("r1", "src", "mid"))
    e.put_router(RouterSpec("r2", "mid", "dst"))
    e.write("src", recs(60, 0))
    e.write("other", recs(5, 0))
    e.read("dst")
    e.snapshot()
    e.write("src", recs(40, 100))  # forwarded after the snapshot: copies in no file
    e.read("dst")
    e.close(snapshot=False)
    now = _now()
    whole = _offline(root, now)
    only_dst = _offline(root, now, topics="dst")
    assert only_dst == [r for r in whole if r[0] == "dst"]
    assert [r[1] for r in only_dst] == list(range(1, 101))
    d = OfflineDir.open(root / "data", root / "cold", now, running=False, only={"dst"}.__contains__)
    assert d.point.only is not None and d.point.only.also == frozenset({"src", "mid"})
    assert d._rp.registry.get("other").count == 0


def test_pushed_filters_narrow_the_plan_and_keep_exactly_the_rows(tmp_path: Path) -> None:
    """Pushed `seq`, `ts` and `topic` bounds (after `register(spark)`): the plan reads only
    the segments and tail seqs they allow, and the rows equal the full read filtered by
    them (Spark re-applies `ts` filters; seq and topic bounds are exact)."""
    from seglog.spark.filters import Pushed

    root = tmp_path / "dir"
    t0 = 1_700_000_000_000
    clock = ManualClock(t0)
    e = Engine(options(root), clock=clock)
    e.open()
    for name in ("a", "b"):
        e.put_topic(name, TopicConfig())
    for k in range(8):  # 100 records a step, ts t0 + k s: segments of 50, a tail of 30
        e.write("a", recs(100, k * 100))
        e.write("b", recs(10, k * 10))
        clock.advance(1_000)
    seal_all(e)
    e.write("a", recs(30, 800))
    e.delete_records("a", seqs=[120, 640])
    e.close(snapshot=False)
    now = t0 + 10_000
    whole = _offline(root, now)

    def keep(p: Pushed, r: Row) -> bool:
        return (
            (p.topics is None or r[0] in p.topics)
            and p.lo <= r[1] <= p.hi
            and (p.ts_lo is None or r[2] >= p.ts_lo)
            and (p.ts_hi is None or r[2] <= p.ts_hi)
        )

    cases = [
        Pushed(topics=frozenset({"b"})),
        Pushed(lo=150, hi=420),
        Pushed(ts_lo=t0 + 2_000, ts_hi=t0 + 4_000),
        Pushed(lo=300, ts_lo=t0 + 1_000, topics=frozenset({"a"})),
        Pushed(ts_lo=t0 + 7_500),  # only a's last step and tail
        Pushed(ts_hi=t0 - 1),  # nothing
    ]
    for p in cases:
        got = [r for r in _offline(root, now, p) if keep(p, r)]  # Spark re-applies ts filters
        assert got == [r for r in whole if keep(p, r)], p
    explicit = parse_files_options(
        {"path": str(root / "data"), "coldPath": str(root / "cold"), "topics": "a,b"}
    )
    only_b = plan(explicit, now, Pushed(topics=frozenset({"b"})))  # "a" pushed out, not absent
    assert {p.topic for p in only_b} == {"b"}
    with pytest.raises(SeglogOptionError, match="not found"):
        plan(
            parse_files_options({"path": str(root / "data"), "topics": "a,nope"}),
            now,
            Pushed(topics=frozenset({"a", "nope"})),
        )
    narrow = plan(
        parse_files_options({"path": str(root / "data"), "coldPath": str(root / "cold")}),
        now,
        Pushed(ts_lo=t0 + 2_000, ts_hi=t0 + 2_999, topics=frozenset({"a"})),
    )
    slices = [s for p in narrow if isinstance(p, SegmentPartition) for s in p.slices]
    assert [(s.first_seq, s.last_seq) for s in slices] == [(201, 250), (251, 300)]
    assert not [p for p in narrow if not isinstance(p, SegmentPartition)]  # no tail read


def test_a_corrupt_segment_no_task_reads_still_fails_the_read(tmp_path: Path) -> None:
    """Tasks verify the segments they read; the planner verifies the reused segments no
    task reads (here: excluded by a pushed seq bound), so corruption fails the read as it
    stops the server's start."""
    from seglog.spark.filters import Pushed

    root = tmp_path / "dir"
    build(root, final_snapshot=True)
    opts = parse_files_options({"path": str(root / "data"), "coldPath": str(root / "cold")})
    now = _now()
    parts = plan(opts, now, Pushed(topics=frozenset({"a"})))
    first = min(
        (s for p in parts if isinstance(p, SegmentPartition) for s in p.slices),
        key=lambda s: s.first_seq,
    )
    seg = Path(first.segment.data_path)
    raw = bytearray(seg.read_bytes())
    raw[60] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with pytest.raises(SeglogCorruptionError, match=rf"{seg.name}.*offset"):
        plan(opts, now, Pushed(topics=frozenset({"a"}), lo=first.last_seq + 1))
    with pytest.raises(SeglogCorruptionError, match=rf"{seg.name}"):
        list(
            read_segment(
                opts,
                arrow_schema(SPARK_SCHEMA),
                next(p for p in parts if isinstance(p, SegmentPartition) and first in p.slices),
            )
        )


@pytest.mark.parametrize("max_rows, max_bytes", [(120, 1 << 30), (1 << 20, 1), (30, 1 << 30)])
def test_segments_travel_joined_in_batches_of_about_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_rows: int, max_bytes: int
) -> None:
    e = Engine(options(tmp_path))
    e.open()
    e.put_topic("s", TopicConfig())
    for k in range(8):  # 8 segments of 50; the odd ones carry meta (decoded record by record)
        e.write("s", [RecordIn.of({"i": i}, meta={"k": k} if k % 2 else None, tag="t")
                      for i in range(50 * k, 50 * k + 50)])  # fmt: skip
    seal_all(e)
    e.delete_records("s", seqs=[7, 160])
    e.close()
    monkeypatch.setattr(files, "ARROW_BATCH_ROWS", max_rows)
    monkeypatch.setattr(files, "ARROW_BATCH_BYTES", max_bytes)
    opts = parse_files_options(
        {"path": str(tmp_path / "data"), "coldPath": str(tmp_path / "cold"), "topics": "s"}
    )
    schema = arrow_schema(SPARK_SCHEMA)
    parts = plan(opts, _now())
    assert [type(p) for p in parts] == [SegmentPartition]
    batches = list(read_segment(opts, schema, parts[0]))
    assert all(b.schema.equals(schema) and len(b) <= min(max_rows, 50 * 8) for b in batches)
    seqs = [s for b in batches for s in b.column("seq").to_pylist()]
    assert seqs == [s for s in range(1, 401) if s not in (7, 160)]
    metas = [m for b in batches for m in b.column("meta").to_pylist()]
    assert metas == [f'{{"k":{(s - 1) // 50}}}' if (s - 1) // 50 % 2 else None for s in seqs]
    datas = [d for b in batches for d in b.column("data").to_pylist()]
    assert datas == [f'{{"i":{s - 1}}}' for s in seqs]
    assert [t for b in batches for t in b.column("tag").to_pylist()] == ["t"] * len(seqs)
    if max_bytes == 1:  # gathered texts in pieces of one row; a decoded segment alone
        ones = [1] * 50
        assert [len(b) for b in batches] == [*ones[:49], 50, *ones, 49, *ones, 50, *ones, 50]
    elif max_rows == 30:  # a segment over the row limit alone is cut at it
        assert [len(b) for b in batches] == [30, 19, 30, 20, 30, 20, 30, 19] + [30, 20] * 4
    else:  # whole segments joined up to the row limit, gathered or decoded alike
        assert [len(b) for b in batches] == [99, 99, 100, 100]
