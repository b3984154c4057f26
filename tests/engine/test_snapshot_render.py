"""Snapshot bodies (STORAGE §5.2, format 2 of docs/storage.md): restored from each record's
raw JSON text (msgspec) they build the same topic, slot for slot, as the generic parse of
the same body; sealed records are referenced, not rendered, restore as their rendered
records would, and their segments outlive every kept snapshot that needs them."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
import pytest
import xxhash
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from seglog.clock import ManualClock
from seglog.core.jsonbytes import json_bytes
from seglog.core.segment_format import idx_view
from seglog.core.segment_run import layout_coded_labels, layout_size_array, segment_layout
from seglog.engine.engine import Engine
from seglog.engine.maintenance import seal_topic
from seglog.engine.segments import encode_rows
from seglog.engine.snapshots import (
    SealedRows,
    records_json,
    restore_topic,
)
from seglog.engine.topic import Rows
from seglog.model import Durability, RecordIn, Selector, TopicConfig
from seglog.storage.fs import write_file_durably
from seglog.storage.snapshot import (
    SealedSegmentMissingError,
    SegmentRef,
    SnapshotRecord,
    dead_bitmap,
    dead_flags,
    decode_snapshot,
    encode_snapshot,
    snapshot_name,
)
from tests.conftest import EngineFactory
from tests.engine.oracle import (
    IMAGES,
    ROOT,
    ImageKind,
    abandon,
    image,
    open_engine,
    options,
    read_all,
)
from tests.support.faultfs import FaultFs

LABEL = st.none() | st.sampled_from(["n", "é-ü", 'q"', "b\\s", "t\tab", "x" * 20])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)


@st.composite
def row_sets(draw: st.DrawFn) -> Rows:
    n = draw(st.integers(0, 12))
    first = draw(st.integers(1, 2**40))
    dead = [draw(st.booleans()) for _ in range(n)]
    data = [None if d else json_bytes(draw(JSON)) for d in dead]
    meta = [None if d or not draw(st.booleans()) else json_bytes(draw(JSON)) for d in dead]
    return Rows(
        first,
        [draw(st.integers(0, 2**53)) for _ in range(n)],
        [draw(LABEL) for _ in range(n)],
        [None if d else draw(LABEL) for d in dead],
        data,
        meta,
        [
            0 if d else len(x or b"") + len(m or b"")
            for d, x, m in zip(dead, data, meta, strict=True)
        ],
        bytearray(dead),
    )


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(row_sets())
def test_raw_and_parsed_restores_build_the_same_topic(rows: Rows) -> None:
    head = rows.first_seq + len(rows.ts) - 1 if rows.ts else rows.first_seq - 1
    entry = {
        "name": "t",
        "topic_id": 3,
        "epoch": 1,
        "config": TopicConfig().to_dict(),
        "base_seq": rows.first_seq,
        "head_seq": head,
    }
    body = {"id": 1, "ts": 0, "next_topic_id": 4, "checkpoint": {"groups": []}, "routers": []}
    raw = encode_snapshot(
        {**body, "topics": [{**entry, "records": orjson.Fragment(records_json(rows))}]}
    )
    typed = decode_snapshot(raw)
    assert typed is not None
    records = typed["topics"][0]["records"]
    assert all(isinstance(r, SnapshotRecord) for r in records)
    parsed = {**entry, "records": orjson.loads(records_json(rows))}
    a, b = restore_topic(typed["topics"][0]), restore_topic(parsed)
    for attr in ("origin", "head", "front", "count", "bytes", "dead", "tags"):
        assert getattr(a, attr) == getattr(b, attr), attr
    assert a.columns(0, a.slot_count) == b.columns(0, b.slot_count)


def test_an_unexpected_body_shape_is_parsed_generically() -> None:
    body = {"id": 1, "ts": 0, "next_topic_id": 1, "checkpoint": {}, "topics": [], "future": 1}
    doc = decode_snapshot(encode_snapshot(body))
    assert doc is not None and doc["future"] == 1


# ---- format 2: sealed records referenced, not rendered -----------------------------------


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(row_sets(), st.data())
def test_a_segment_reference_restores_what_its_records_restore(
    rows: Rows, data: st.DataObject
) -> None:
    """The same rows restored from rendered records and from a sealed segment of them
    referenced with the same dead flags (with the retained range starting anywhere in the
    segment, and a rendered record after it or none): every column but the payloads (left
    in the file) and every count agree; with none, the frozen columns are no larger than the
    reference (not grown by doubling)."""
    n = len(rows.ts)
    assume(n > 0)  # a segment holds at least one record
    rows.ts.sort()  # ts never decrease with seq
    seg_data, seg_idx = encode_rows(rows)
    idx = idx_view(seg_idx)
    lay = segment_layout(seg_data, rows.first_seq, idx["offset"], idx["len"])
    node, tag = layout_coded_labels(seg_data, lay)
    sealed = SealedRows(lay.ts.astype(np.int64), layout_size_array(seg_data, lay), node, tag)
    # the snapshot may know more deaths than the file's flags (deleted after sealing)
    later = [data.draw(st.booleans()) for _ in range(n)]
    dead = bytearray(d or x for d, x in zip(rows.dead, later, strict=True))
    for k in range(n):
        if dead[k] and not rows.dead[k]:
            rows.dead[k] = 1
            rows.data[k] = rows.meta[k] = None
            rows.size[k] = 0
    last = rows.first_seq + n - 1
    entry = {
        "name": "t",
        "topic_id": 3,
        "epoch": 1,
        "config": TopicConfig().to_dict(),
        "base_seq": rows.first_seq + data.draw(st.integers(0, n)),  # clamps the reference
        "head_seq": last + 3,  # a hole, a rendered record, a hole
    }
    after = {"seq": last + 2, "ts": max(rows.ts), "tag": "z", "data": {"x": 1}, "bytes": 7}
    rendered = [after] if data.draw(st.booleans()) else []
    plain = restore_topic({**entry, "records": [*orjson.loads(records_json(rows)), *rendered]})
    refs = [SegmentRef(rows.first_seq, last, rows.first_seq, last, dead_bitmap(dead))]
    reads: list[tuple[int, SegmentRef]] = []

    def read(topic_id: int, ref: SegmentRef) -> SealedRows:
        reads.append((topic_id, ref))
        return sealed

    referenced = restore_topic({**entry, "records": rendered, "segments": refs}, (), read)
    assert reads == [(3, r) for r in refs]
    for attr in ("origin", "head", "front", "count", "bytes", "dead"):
        assert getattr(referenced, attr) == getattr(plain, attr), attr
    got, want = referenced.columns(0, referenced.slot_count), plain.columns(0, plain.slot_count)
    for k in (0, 1, 2, 5):  # ts, node, tag, size
        assert got[k] == want[k], k
    live = [k for k in range(plain.slot_count) if not plain.dead[k]]
    in_file = [k for k in live if referenced.origin + k <= last]
    assert not any(referenced.has_payload(referenced.origin + k) for k in in_file)
    if rendered:
        assert referenced.slot(last + 2)[1] == b'{"x":1}'
    elif referenced.frozen.n:  # the frozen columns were sized once, for the reference's span
        span = last - referenced.origin + 1
        ts_bytes = 8  # 4 unless a block's ts span 2**32 ms or more
        assert referenced.frozen.nbytes <= span * (ts_bytes + 4 + 1 + 1) + 8 * (span // 4096 + 1)


def test_dead_bitmaps_round_trip() -> None:
    for flags in ([], [0], [1], [0, 1, 0, 0, 0, 0, 0, 0, 1], [1] * 17):
        text = dead_bitmap(bytes(flags))
        assert (text == "") == (not any(flags))
        assert dead_flags(text, len(flags)).tolist() == [bool(f) for f in flags]
    with pytest.raises(ValueError):
        dead_flags(dead_bitmap(b"\x01"), 9)  # one byte for nine seqs


def _snapshot_doc(e: Engine) -> dict[str, Any]:
    assert e.datadir is not None and e.last_snapshot is not None
    path = e.datadir.meta_dir / snapshot_name(e.last_snapshot.id)
    raw = e.fs.read_file(path)
    assert struct.unpack_from("<I", raw, 4)[0] == 2  # format 2
    out = orjson.loads(raw[24:])
    assert isinstance(out, dict)
    return out


def _state(e: Engine, name: str) -> list[tuple[Any, ...]]:
    recs = e.read(name, 0, limit=10_000).records
    return [(r.seq, r.ts, r.data, r.meta, r.node, r.tag) for r in recs]


def test_sealed_records_are_referenced_and_come_back_after_a_restart(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine(segment_max_events=50, segment_payload_cache=0)
    e.put_topic("a", TopicConfig(cap_records=900))
    e.put_topic("b", TopicConfig(ttl_ms=60_000))
    e.put_topic("eph", TopicConfig(durability=Durability.EPHEMERAL))
    for k in range(10):
        e.write("a", [RecordIn.of({"k": k, "i": i}, tag=f"t{i % 3}", node="n" if i % 7 else None,
                                  meta={"m": i} if i % 5 == 0 else None) for i in range(100)])  # fmt: skip
        e.write("b", [RecordIn.of(i) for i in range(30)])
        clock.advance(5_000)
    e.write("eph", [RecordIn.of(1)])
    for t in list(e.topics.values()):
        seal_topic(e, t)
    e.delete_records("a", seqs=[555])
    e.write("a", [RecordIn.of(i) for i in range(20)])  # an unsealed tail
    e.snapshot()
    a = next(t for t in _snapshot_doc(e)["topics"] if t["name"] == "a")
    assert [r["seq"] for r in a["records"]] == list(range(1001, 1021))
    refs = a["segments"]
    assert refs[0]["first"] == e.topics["a"].earliest() > 100  # from the cap's front
    assert refs[-1]["last"] == 1000
    holding_555 = next(r for r in refs if r["first"] <= 555 <= r["last"])
    assert dead_flags(holding_555["dead"], 50).tolist().index(True) == 555 - holding_555["first"]
    before = {name: _state(e, name) for name in ("a", "b")}
    stats = {name: (e.topics[name].count, e.topics[name].bytes) for name in ("a", "b")}
    e.close(snapshot=False)
    # A power cut may lose a sealed record's delete flag (it is not fsynced): the
    # snapshot's bitmap still knows the record is dead.
    seg = next((e.options.data_dir / "topics").glob(f"{e.topics['a'].topic_id:08X}/seg-*0551.data"))
    raw = bytearray(seg.read_bytes())
    idx = idx_view(seg.with_suffix(".idx").read_bytes())
    flags = (idx["offset"] + idx["len"] - 1).tolist()
    assert raw[flags[555 - 551]] == 0xD5
    for i in flags:
        raw[i] = 0
    seg.write_bytes(bytes(raw))
    e2 = make_engine()
    assert {name: _state(e2, name) for name in ("a", "b")} == before
    assert {name: (e2.topics[name].count, e2.topics[name].bytes) for name in ("a", "b")} == stats


def test_a_referenced_segment_outlives_its_records_until_no_kept_snapshot_names_it(
    make_engine: EngineFactory,
) -> None:
    e = make_engine(segment_max_events=50)
    e.write("a", [RecordIn.of({"i": i}, tag="x" if i < 50 else None) for i in range(120)])
    seal_topic(e, e.topics["a"])
    e.snapshot()
    e.close(snapshot=False)
    e = make_engine(segment_max_events=50)  # the pins come back from the files on disk
    assert e.datadir is not None
    first = e.datadir.topics_dir / f"{e.topics['a'].topic_id:08X}" / "seg-0000000000000001.data"
    # every record of the first segment, by a selector a replay cannot run on stand-ins
    e.delete_records("a", match=Selector("Eq", "x"))
    assert first.exists()  # the newest snapshot needs it
    e.snapshot()
    assert first.exists()  # the previous one, kept beside it, still needs it
    before = _state(e, "a")
    e.snapshot()
    assert not first.exists()  # no kept snapshot references it any more
    assert _state(e, "a") == before


def test_a_missing_referenced_segment_refuses_recovery_unless_its_topic_went(
    make_engine: EngineFactory,
) -> None:
    e = make_engine(segment_max_events=50)
    e.write("a", [RecordIn.of({"i": i}) for i in range(120)])
    e.write("gone", [RecordIn.of({"i": i}) for i in range(120)])
    for name in ("a", "gone"):
        seal_topic(e, e.topics[name])
    e.snapshot()
    e.drop_topic("gone")  # its files go at once; the snapshot still lists it
    assert e.datadir is not None
    topic_dir = e.datadir.topics_dir / f"{e.topics['a'].topic_id:08X}"
    e.close(snapshot=False)
    e2 = make_engine()  # "gone" is restored from the snapshot, then its delete replayed
    assert "gone" not in e2.topics and len(_state(e2, "a")) == 120
    e2.close(snapshot=False)
    for suffix in ("data", "idx"):
        (topic_dir / f"seg-0000000000000051.{suffix}").unlink()
    with pytest.raises(SealedSegmentMissingError, match=r"51\.\.100"):
        make_engine()


def test_a_format_1_snapshot_still_restores(make_engine: EngineFactory) -> None:
    e = make_engine(segment_max_events=50)
    e.write("a", [RecordIn.of({"i": i}, tag="x") for i in range(120)])
    before = _state(e, "a")
    assert e.datadir is not None
    meta_dir = e.datadir.meta_dir
    e.close(snapshot=False)
    body = {
        "id": 1, "ts": 0, "next_topic_id": 2,
        "checkpoint": {"last_checkpoint_seq": 0, "groups": []},
        "topics": [{
            "name": "a", "topic_id": 1, "epoch": 1, "config": TopicConfig().to_dict(),
            "base_seq": 1, "head_seq": 120,
            "records": [{"seq": s, "ts": ts, "tag": tag, "data": d, "bytes": len(orjson.dumps(d))}
                        for s, ts, d, _m, _n, tag in before],
        }],
        "routers": [],
    }  # fmt: skip
    raw = orjson.dumps(body)
    header = struct.pack("<4sIQQ", b"SGSN", 1, len(raw), xxhash.xxh3_64_intdigest(raw))
    for old in meta_dir.iterdir():
        old.unlink()
    for wal in (e.options.data_dir / "wal").rglob("*.log"):
        wal.unlink()  # the snapshot alone holds the records now
    write_file_durably(e.fs, meta_dir / snapshot_name(1), header + raw)
    assert _state(make_engine(), "a") == before


def test_records_kept_from_before_a_topic_became_persistent_are_rendered(
    make_engine: EngineFactory,
) -> None:
    """Rows that no sealed segment holds, before the first one (written while the topic
    was ephemeral) as well as after the last, are rendered into `records`."""
    e = make_engine(segment_max_events=50)
    e.put_topic("a", TopicConfig(durability=Durability.EPHEMERAL))
    e.write("a", [RecordIn.of({"early": i}) for i in range(30)])
    e.put_topic("a", TopicConfig(durability=Durability.DISK))
    e.write("a", [RecordIn.of({"i": i}, tag="x") for i in range(120)])
    seal_topic(e, e.topics["a"])
    e.snapshot()
    a = next(t for t in _snapshot_doc(e)["topics"] if t["name"] == "a")
    seqs = [r["seq"] for r in a["records"]]
    assert seqs == list(range(1, 31)) + list(range(131, 151))  # before and after the segments
    assert [(r["first"], r["last"]) for r in a["segments"]] == [(31, 80), (81, 130)]
    before = _state(e, "a")
    e.close(snapshot=False)
    assert _state(make_engine(), "a") == before


# ---- review findings: stand-ins never pass for records, stale references never linger ----


def _crash(e: Engine, fs: FaultFs) -> FaultFs:
    image = fs.process_crash_image()
    abandon(e, fs)
    return image


def test_a_missing_segment_of_a_ttl_topic_is_never_taken_for_expired_records() -> None:
    """Replay runs retention over the stand-ins of a missing segment (here: a config update
    after the snapshot); their stand-in timestamps must not let them expire unnoticed."""
    fs = FaultFs()
    config = TopicConfig(durability=Durability.DISK, ttl_ms=86_400_000)
    e = open_engine(fs, segment_max_events=50)
    e.put_topic("t", config)
    e.write("t", [RecordIn.of({"i": i}) for i in range(120)])
    seal_topic(e, e.topics["t"])
    e.snapshot()
    e.put_topic("t", config)
    topic_dir = ROOT / "topics" / f"{e.topics['t'].topic_id:08X}"
    fs = _crash(e, fs)
    for suffix in ("data", "idx"):
        fs.unlink(topic_dir / f"seg-0000000000000001.{suffix}")
    with pytest.raises(SealedSegmentMissingError, match=r"1\.\.50"):
        open_engine(fs, segment_max_events=50)


@pytest.mark.parametrize("kind", IMAGES)
def test_a_topic_made_ephemeral_and_persistent_again_across_crashes(kind: ImageKind) -> None:
    """Recovery empties a topic that is ephemeral at the crash and removes its segment
    files; the snapshots it takes before any write must stop referencing them, so a later
    crash neither refuses to start nor brings the emptied records back."""
    fs = _referenced_then_ephemeral_and_crashed(kind)
    e = open_engine(fs, segment_max_events=50)
    assert e.topics["t"].count == 0
    e.put_topic("t", TopicConfig(durability=Durability.DISK))
    (seq,) = e.write("t", [RecordIn.of({"new": 1})]).seqs
    fs = _image_and_abandon(e, fs, kind)
    e = open_engine(fs, segment_max_events=50)
    try:
        assert list(read_all(e, "t")) == [seq]
    finally:
        abandon(e, fs)


def _referenced_then_ephemeral_and_crashed(kind: ImageKind) -> FaultFs:
    """A crash image where the newest snapshot references topic t's sealed segments and t
    became ephemeral since."""
    fs = FaultFs()
    e = open_engine(fs, segment_max_events=50)
    e.put_topic("t", TopicConfig(durability=Durability.DISK))
    e.write("t", [RecordIn.of({"i": i}) for i in range(120)])
    seal_topic(e, e.topics["t"])
    e.snapshot()
    e.put_topic("t", TopicConfig(durability=Durability.EPHEMERAL))
    return _image_and_abandon(e, fs, kind)


def _image_and_abandon(e: Engine, fs: FaultFs, kind: ImageKind) -> FaultFs:
    img = image(fs, kind)
    abandon(e, fs)
    return img


def test_an_offline_read_of_a_running_server_leaves_out_a_topic_deleted_since(
    make_engine: EngineFactory,
) -> None:
    """A running server's directory is read as of its newest snapshot, minus what was
    deleted since: a topic deleted after it (its files gone) is left out, not an error."""
    from seglog.offline import OfflineDir

    e = make_engine(segment_max_events=50)
    for name in ("a", "gone"):
        e.write(name, [RecordIn.of({"i": i}) for i in range(120)])
        seal_topic(e, e.topics[name])
    e.snapshot()
    e.drop_topic("gone")
    assert e.datadir is not None
    d = OfflineDir.open(e.datadir.root, None, 0, running=True)
    assert [(v.name, v.count) for v in d.topics()] == [("a", 120)]


def _damage_newest_snapshot(fs: FaultFs) -> None:
    meta = ROOT / "meta"
    newest = sorted(n for n in fs.listdir(meta) if n.endswith(".bin"))[-1]
    raw = bytearray(fs.read_file(meta / newest))
    raw[16:24] = bytes(8)  # its checksum: the snapshot is skipped as damaged
    f = fs.open(meta / newest)
    f.write_at(bytes(raw), 0)
    f.sync()
    f.close()


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("durability", [Durability.DISK, Durability.FSYNC])
def test_an_older_kept_snapshot_never_outlives_the_files_it_references(
    kind: ImageKind, durability: Durability
) -> None:
    """S1 references t's segments; t becomes ephemeral and S2 (no references) is taken;
    the start after a crash empties t and removes its files, so it must also retire S1:
    a later start that falls back to S1 (S2 damaged) neither refuses nor resurrects."""
    fs = FaultFs()
    e = open_engine(fs, segment_max_events=50)
    e.put_topic("t", TopicConfig(durability=durability))
    e.put_topic("u", TopicConfig(durability=durability))
    e.write("t", [RecordIn.of({"i": i}) for i in range(120)])
    e.write("u", [RecordIn.of({"i": i}) for i in range(10)])
    seal_topic(e, e.topics["t"])
    e.snapshot()
    e.put_topic("t", TopicConfig(durability=Durability.EPHEMERAL))
    e.snapshot()
    fs = _image_and_abandon(e, fs, kind)
    e = open_engine(fs, segment_max_events=50)
    e.put_topic("t", TopicConfig(durability=durability))
    (seq,) = e.write("t", [RecordIn.of({"new": 1})]).seqs
    e.write("u", [RecordIn.of({"i": 99})])
    fs = _image_and_abandon(e, fs, kind)
    _damage_newest_snapshot(fs)
    e = open_engine(fs, segment_max_events=50)
    try:
        assert list(read_all(e, "t")) == [seq]
        assert len(read_all(e, "u")) == 11
    finally:
        abandon(e, fs)


class _Stop(Exception):
    pass


@pytest.mark.parametrize("kind", IMAGES)
def test_a_crash_between_the_snapshots_a_start_takes_retires_the_references_later(
    kind: ImageKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start that empties an ephemeral topic snapshots twice; a crash after the first
    leaves the referencing snapshot kept, and the next start must retire it again."""
    fs = _referenced_then_ephemeral_and_crashed(kind)
    real = Engine.snapshot
    taken: list[int] = []
    crashed: list[FaultFs] = []

    def first_only(self: Engine) -> int:
        if taken:
            crashed.append(image(fs, kind))
            raise _Stop
        taken.append(real(self))
        return taken[-1]

    monkeypatch.setattr(Engine, "snapshot", first_only)
    e = Engine(options(1, segment_max_events=50), fs=fs, clock=ManualClock())
    with pytest.raises(_Stop):
        e.open()
    abandon(e, fs)
    monkeypatch.setattr(Engine, "snapshot", real)
    fs = crashed[0]
    e = open_engine(fs, segment_max_events=50)
    e.put_topic("t", TopicConfig(durability=Durability.DISK))
    (seq,) = e.write("t", [RecordIn.of({"new": 1})]).seqs
    fs = _image_and_abandon(e, fs, kind)
    _damage_newest_snapshot(fs)
    e = open_engine(fs, segment_max_events=50)
    try:
        assert list(read_all(e, "t")) == [seq]
    finally:
        abandon(e, fs)


def test_an_offline_read_of_a_running_server_reads_its_newer_snapshot_after_a_race(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the reader restores from the newest snapshot, the server snapshots twice and
    drops a segment that snapshot referenced: the reader starts over from the new one."""
    from seglog.engine import recovery
    from seglog.offline import OfflineDir

    e = make_engine(segment_max_events=50)
    e.write("a", [RecordIn.of({"i": i}) for i in range(120)])
    seal_topic(e, e.topics["a"])
    e.snapshot()
    real = recovery.SealedReader.__call__
    raced: list[bool] = []

    def racing(self: recovery.SealedReader, topic_id: int, ref: SegmentRef) -> SealedRows | None:
        if not raced:
            raced.append(True)
            e.delete_records("a", before_seq=51)  # the first segment is all dead now
            e.snapshot()
            e.snapshot()  # ... and no kept snapshot references it: dropped
        return real(self, topic_id, ref)

    monkeypatch.setattr(recovery.SealedReader, "__call__", racing)
    assert e.datadir is not None
    d = OfflineDir.open(e.datadir.root, None, 0, running=True)
    assert raced and [(v.name, v.count) for v in d.topics()] == [("a", 70)]
