"""`seglog verify` / `seglog repair` on real data directories built with the real WAL writer,
segment store and snapshot encoder: exit status, what the output names, dry runs that change
nothing, quarantine + truncation with --yes, the lock, and a clean verify afterwards."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from seglog.cli.offline import lock_holder, register_offline_commands
from seglog.core.frame_bodies import CheckpointMarkBody, TopicCreateBody
from seglog.core.frame_scanner import iter_raw
from seglog.core.frames import FrameType, encode_append, encode_control
from seglog.core.segment_format import SegmentRecord
from seglog.storage.datadir import DataDir
from seglog.storage.fs import RealFs, write_file_durably
from seglog.storage.segment import SegmentStore
from seglog.storage.snapshot import encode_snapshot, snapshot_name
from seglog.storage.wal import Wal
from seglog.storage.wal_files import wal_file_name

FS = RealFs()
TID = 10
WAL_SIZE = 64 << 10


def app() -> typer.Typer:
    a = typer.Typer()
    register_offline_commands(a)
    return a


def run(*args: str) -> Any:
    return CliRunner().invoke(app(), list(args))


def blob(seq: int) -> bytes:
    return b'{"d":{"n":%d}}' % seq


@dataclass
class Built:
    root: Path
    wal: Path  # the (only) WAL file
    records: int
    after_checkpoint: int  # Append frames after the newest snapshot's position


def build(root: Path, *, snapshots: int = 2, file_size: int = WAL_SIZE) -> Built:
    """A data dir: topic 'orders' (id 10), 50 records; a sealed segment of seqs 1-20;
    `snapshots` snapshots taken after record 20 and after record 30."""
    DataDir.open(FS, root).close()
    w = Wal(FS, root / "wal", 1, file_size=file_size, idle_sync=False)
    w.open()
    marks: list[tuple[int, int]] = []

    def mark() -> None:
        c = w.submit(0, [encode_control(FrameType.CHECKPOINT_MARK, 0,
                                        CheckpointMarkBody(0).encode(), 1, True)], True)  # fmt: skip
        c.wait()
        assert c.position is not None
        marks.append(c.position)

    try:
        body = TopicCreateBody("orders", b'{"durability":"fsync"}').encode()
        w.submit(0, [encode_control(FrameType.TOPIC_CREATE, TID, body, 1, True)], True).wait()
        for seq in range(1, 51):
            frame = encode_append(TID, seq, 100 + seq, "n", None, blob(seq), True)
            w.submit(0, [frame], True).wait()  # one frame per batch: a deterministic layout
            if seq in (20, 30):
                mark()
    finally:
        w.close()
    for i, (pos, head) in enumerate(zip(marks[:snapshots], (20, 30), strict=False)):
        doc = {
            "id": i + 1, "ts": 1, "next_topic_id": TID + 1,
            "checkpoint": {"last_checkpoint_seq": 0,
                           "groups": [{"key": "", "wal_idx": pos[0], "wal_offset": pos[1]}]},
            "topics": [{"name": "orders", "topic_id": TID, "head_seq": head, "base_seq": 1,
                        "records": [{"seq": s, "ts": 100 + s, "data": {"n": s}}
                                    for s in range(1, head + 1)]}],
            "routers": [],
        }  # fmt: skip
        write_file_durably(FS, root / "meta" / snapshot_name(i + 1), encode_snapshot(doc))
    store = SegmentStore(FS, root / "topics", None, TID)
    store.seal([SegmentRecord(s, 100 + s, "n", None, blob(s), s == 3) for s in range(1, 21)], 1)
    store.close()
    after = 50 - (30 if snapshots >= 2 else 20 if snapshots == 1 else 0)
    return Built(root, root / "wal" / wal_file_name(1), 50, after)


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def frame_starts(path: Path) -> list[int]:
    ends = [raw[0] for raw in iter_raw(path.read_bytes())]
    return [0, *ends[:-1]]


def flip(path: Path, at: int, mask: int = 0x20) -> None:
    buf = bytearray(path.read_bytes())
    buf[at] ^= mask
    path.write_bytes(bytes(buf))


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return build(tmp_path / "data")


# ---- verify ----------------------------------------------------------------------------


def test_verify_clean(built: Built) -> None:
    r = run("verify", str(built.root))
    assert r.exit_code == 0, r.output
    assert "result: clean" in r.output
    assert "meta/snapshot-0000000000000002.bin  ok  (1 topics)  <- recovery starts here" in r.output
    assert "0000000A  orders  30  30  20  1  19" in r.output  # 20 appends after snapshot 2
    doc = json.loads(run("verify", str(built.root), "--json").stdout)
    assert doc["clean"] is True and doc["recovery_snapshot"] == 2
    (topic,) = doc["topics"]
    assert topic == {
        "topic_id": TID, "name": "orders", "head_seq": 30, "snapshot_records": 30,
        "wal_appends": built.after_checkpoint, "segments": 1, "segment_records": 19,
    }  # fmt: skip
    (seg,) = doc["segments"]
    assert (seg["records"], seg["deleted"], seg["problem"]) == (20, 1, None)


def test_verify_reports_a_torn_tail_as_a_warning(built: Built) -> None:
    end = [raw[0] for raw in iter_raw(built.wal.read_bytes())][-1]
    with built.wal.open("r+b") as fh:
        fh.seek(end)
        fh.write(b"\x31\x00\x00\x00\x01partial frame")
    r = run("verify", str(built.root))
    assert r.exit_code == 0, r.output
    assert f"warning: torn tail in wal/{built.wal.name} at offset {end}" in r.output
    doc = json.loads(run("verify", str(built.root), "--json").stdout)
    assert doc["wal"][0]["torn_tails"] == [{"path": f"wal/{built.wal.name}", "offset": end}]


def test_verify_names_file_and_offset_of_corruption(built: Built) -> None:
    starts = frame_starts(built.wal)
    bad = starts[-10]  # the 41st record frame, after the newest snapshot's position
    flip(built.wal, bad + 40)
    before = tree(built.root)
    r = run("verify", str(built.root))
    assert r.exit_code == 1, r.output
    assert f"CORRUPTION in wal/{built.wal.name} at offset {bad}: 9 valid frame(s)" in r.output
    assert "seglog repair" in r.output
    doc = json.loads(run("verify", str(built.root), "--json").stdout)
    assert doc["clean"] is False
    assert doc["wal"][0]["corruption"] == {
        "path": f"wal/{built.wal.name}", "offset": bad, "valid_frames_after": 9,
    }  # fmt: skip
    assert tree(built.root) == before  # read-only


def test_damage_absorbed_by_the_snapshot_is_a_warning(built: Built) -> None:
    starts = frame_starts(built.wal)
    flip(built.wal, starts[5] + 30)  # record 5: before both snapshots' positions
    r = run("verify", str(built.root))
    assert r.exit_code == 0, r.output
    assert f"invalid bytes in wal/{built.wal.name} at offset {starts[5]}, before" in r.output


def test_verify_segment_and_snapshot_damage(built: Built) -> None:
    seg = built.root / "topics" / f"{TID:08X}" / "seg-0000000000000001.data"
    flip(seg, 200)
    snap = built.root / "meta" / snapshot_name(2)
    flip(snap, 40)
    r = run("verify", str(built.root))
    assert r.exit_code == 1, r.output
    assert "DAMAGED topics/0000000A/seg-0000000000000001.data:" in r.output
    assert "checksum mismatch" in r.output
    assert "meta/snapshot-0000000000000002.bin  DAMAGED: checksum mismatch" in r.output
    # recovery falls back to snapshot 1, and so does the WAL judgement
    assert "meta/snapshot-0000000000000001.bin  ok  (1 topics)  <- recovery starts here" in r.output
    doc = json.loads(run("verify", str(built.root), "--json").stdout)
    assert doc["recovery_snapshot"] == 1
    assert doc["topics"][0]["wal_appends"] == 30


def test_verify_index_that_disagrees_with_its_data(built: Built) -> None:
    idx = built.root / "topics" / f"{TID:08X}" / "seg-0000000000000001.idx"
    flip(idx, 20 * 4 + 8, 0x01)  # entry 4's ts
    r = run("verify", str(built.root))
    assert r.exit_code == 1
    assert "entry 4 (seq 5) has ts" in r.output


def test_verify_while_a_server_holds_the_lock(built: Built) -> None:
    dd = DataDir.open(FS, built.root)
    try:
        assert lock_holder(built.root) is not None
        before = tree(built.root)
        r = run("verify", str(built.root))
        assert r.exit_code == 0, r.output
        assert "is in use by a running server (pid=" in r.output
        assert tree(built.root) == before
    finally:
        dd.close()
    assert lock_holder(built.root) is None


def test_not_a_data_dir(tmp_path: Path) -> None:
    for cmd in ("verify", "repair"):
        r = run(cmd, str(tmp_path / "nope"))
        assert r.exit_code == 2
        assert "not a seglog data directory" in r.output


# ---- repair ----------------------------------------------------------------------------


def test_repair_dry_run_changes_nothing(built: Built) -> None:
    bad = frame_starts(built.wal)[-10]
    flip(built.wal, bad + 40)
    before = tree(built.root)
    r = run("repair", str(built.root))
    assert r.exit_code == 1, r.output
    assert "repair would (re-run with --yes to apply):" in r.output
    assert f"copy wal/{built.wal.name} to wal/quarantine/{built.wal.name}" in r.output
    assert f"truncate wal/{built.wal.name} at offset {bad} (loses 9 valid frame(s)" in r.output
    assert tree(built.root) == before
    assert not (built.root / "wal" / "quarantine").exists()


def test_repair_yes_quarantines_truncates_and_verify_is_clean(built: Built) -> None:
    bad = frame_starts(built.wal)[-10]
    flip(built.wal, bad + 40)
    original = built.wal.read_bytes()
    r = run("repair", str(built.root), "--yes")
    assert r.exit_code == 0, r.output
    assert "after repair: clean" in r.output
    assert (built.root / "wal" / "quarantine" / built.wal.name).read_bytes() == original
    cut = built.wal.read_bytes()
    assert cut[:bad] == original[:bad]
    assert len(cut) == len(original) and not any(cut[bad:])
    v = run("verify", str(built.root))
    assert v.exit_code == 0 and "result: clean" in v.output
    doc = json.loads(run("verify", str(built.root), "--json").stdout)
    assert doc["topics"][0]["wal_appends"] == built.after_checkpoint - 10
    assert run("repair", str(built.root)).output.endswith("nothing to repair\n")


def test_repair_moves_later_files_of_the_group(tmp_path: Path) -> None:
    b = build(tmp_path / "data", snapshots=0, file_size=1 << 10)
    files = sorted((b.root / "wal").glob("wal-*.log"))
    assert len(files) >= 3
    bad = frame_starts(files[0])[3]
    flip(files[0], bad + 20)
    r = run("verify", str(b.root), "--json")
    assert r.exit_code == 1
    corruption = json.loads(r.stdout)["wal"][0]["corruption"]
    assert (corruption["path"], corruption["offset"]) == (f"wal/{files[0].name}", bad)
    r = run("repair", str(b.root), "--yes")
    assert r.exit_code == 0, r.output
    q = b.root / "wal" / "quarantine"
    assert sorted(p.name for p in q.iterdir()) == sorted(p.name for p in files)
    assert sorted((b.root / "wal").glob("wal-*.log")) == [files[0]]
    assert run("verify", str(b.root)).exit_code == 0


def test_repair_yes_quarantines_damaged_segments_and_snapshots(built: Built) -> None:
    seg_dir = built.root / "topics" / f"{TID:08X}"
    flip(seg_dir / "seg-0000000000000001.data", 200)
    flip(built.root / "meta" / snapshot_name(2), 40)
    r = run("repair", str(built.root), "--yes", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["applied"] is True and doc["after"]["clean"] is True
    assert doc["report"]["clean"] is False
    q = built.root / "topics" / "quarantine" / f"{TID:08X}"
    assert sorted(p.name for p in q.iterdir()) == [
        "seg-0000000000000001.data",
        "seg-0000000000000001.idx",
    ]
    assert not list(seg_dir.iterdir())
    assert (built.root / "meta" / "quarantine" / snapshot_name(2)).exists()
    assert not (built.root / "meta" / snapshot_name(2)).exists()
    assert run("verify", str(built.root)).exit_code == 0


def test_repair_refuses_while_the_lock_is_held(built: Built) -> None:
    flip(built.wal, frame_starts(built.wal)[-10] + 40)
    before = tree(built.root)
    dd = DataDir.open(FS, built.root)
    try:
        for args in (["--yes"], []):
            r = run("repair", str(built.root), *args)
            assert r.exit_code == 2, r.output
            assert "refusing to repair" in r.output and "in use" in r.output
    finally:
        dd.close()
    assert tree(built.root) == before


def test_verify_reports_a_missing_wal_file(tmp_path: Path) -> None:
    """The server refuses to start when a WAL file replay needs is gone; verify says so too
    (exit 1), in text and JSON."""
    b = build(tmp_path / "data", snapshots=0, file_size=1 << 10)
    files = sorted((b.root / "wal").glob("wal-*.log"))
    assert len(files) >= 3
    files[1].unlink()
    r = run("verify", str(b.root))
    assert r.exit_code == 1
    assert "MISSING FILES" in r.stdout and files[1].name in r.stdout
    r = run("verify", str(b.root), "--json")
    assert r.exit_code == 1
    assert "replay needs" in json.loads(r.stdout)["wal"][0]["missing_files"]


# ---- format 2: segments a snapshot references ----------------------------------------------


def engine_dir(root: Path) -> Path:
    """A data dir written by the engine: topic 'a' (id 1) of 120 records, seqs 1-100 in two
    sealed segments of 50 that its format-2 snapshot references, seq 7 deleted."""
    from seglog.clock import ManualClock
    from seglog.engine.engine import Engine, EngineOptions
    from seglog.engine.maintenance import seal_topic
    from seglog.model import RecordIn

    e = Engine(
        EngineOptions(data_dir=root, wal_shards=1, segment_max_events=50), clock=ManualClock()
    )
    e.open()
    e.write("a", [RecordIn.of({"i": i}) for i in range(120)])
    seal_topic(e, e.topics["a"])
    e.delete_records("a", seqs=[7])
    e.snapshot()
    e.close(snapshot=False)
    return root / "topics" / "00000001"


def test_verify_counts_referenced_records_and_reports_a_lost_segment(tmp_path: Path) -> None:
    seg_dir = engine_dir(tmp_path / "data")
    doc = json.loads(run("verify", str(tmp_path / "data"), "--json").stdout)
    assert doc["clean"] is True and doc["lost"] == []
    (topic,) = doc["topics"]
    assert topic["snapshot_records"] == 119  # 99 referenced + the 20 of the unsealed tail
    for suffix in ("data", "idx"):
        (seg_dir / f"seg-0000000000000051.{suffix}").unlink()
    r = run("verify", str(tmp_path / "data"))
    assert r.exit_code == 1, r.output
    assert "LOST topic 00000001: the sealed segment of seqs 51..100" in r.output


def test_repair_salvages_a_segment_only_it_holds_records_of(tmp_path: Path) -> None:
    """A damaged segment the snapshot references is not moved (its intact records exist
    nowhere else): the originals are copied to quarantine and the segment is rewritten
    with the damaged record as a deleted hole. Exactly that record is lost."""
    from seglog.clock import ManualClock
    from seglog.core.segment_format import idx_view
    from seglog.engine.engine import Engine, EngineOptions

    root = tmp_path / "data"
    seg_dir = engine_dir(root)
    seg, idx = seg_dir / "seg-0000000000000001.data", seg_dir / "seg-0000000000000001.idx"
    at = int(idx_view(idx.read_bytes())["offset"][9])  # seq 10's frame
    flip(seg, at + 40)  # inside its payload: only its checksum fails
    damaged = seg.read_bytes()
    r = run("repair", str(root))
    assert r.exit_code == 1, r.output  # a dry run: nothing applied
    assert "1 damaged one(s) become deleted holes (loses seqs 10)" in r.output
    assert seg.read_bytes() == damaged
    r = run("repair", str(root), "--yes")
    assert r.exit_code == 0, r.output
    q = root / "topics" / "quarantine" / "00000001"
    assert (q / seg.name).read_bytes() == damaged and (q / idx.name).exists()
    assert run("verify", str(root)).exit_code == 0
    e = Engine(EngineOptions(data_dir=root, wal_shards=1), clock=ManualClock())
    e.open()
    try:
        got = {r.seq: r.data for r in e.read("a", 0, limit=1000).records}
    finally:
        e.close(snapshot=False)
    assert sorted(got) == [s for s in range(1, 121) if s not in (7, 10)]
    assert got[9] == {"i": 8} and got[11] == {"i": 10}


def test_salvage_without_a_usable_index_keeps_the_frames_before_the_damage() -> None:
    from seglog.core.segment_format import SegmentRecord, encode_segment
    from seglog.storage.verify import salvage_frames

    recs = [SegmentRecord(s, 100 + s, None, "t", b'{"d":%d}' % s, False) for s in range(5, 10)]
    data, idx = encode_segment(recs, 5)
    bad = bytearray(data)
    bad[len(data) // 2] ^= 0xFF  # somewhere in the third frame
    got, lost = salvage_frames(bytes(bad), idx, 5, 5)
    assert lost == [7] and [r.blob for r in got if not r.deleted] == [
        r.blob for r in recs if r.seq != 7
    ]
    got, lost = salvage_frames(bytes(bad), b"", 5, 5)  # no index: nothing locates 8 and 9
    assert lost == [7, 8, 9] and [r.seq for r in got] == [5, 6, 7, 8, 9]
    assert [r.ts for r in got] == [105, 106, 106, 106, 106]  # holes keep ts non-decreasing


def test_verify_excuses_a_referenced_segment_only_when_the_wal_drops_its_topic(
    tmp_path: Path,
) -> None:
    """A topic deleted after the snapshot takes its files with it (recovery replays the
    delete); a topic directory removed by hand is lost records."""
    import shutil

    from seglog.clock import ManualClock
    from seglog.engine.engine import Engine, EngineOptions

    seg_dir = engine_dir(tmp_path / "data")
    shutil.rmtree(seg_dir)
    r = run("verify", str(tmp_path / "data"))
    assert r.exit_code == 1 and "LOST topic 00000001" in r.output, r.output
    seg_dir = engine_dir(tmp_path / "other")
    e = Engine(EngineOptions(data_dir=tmp_path / "other", wal_shards=1), clock=ManualClock())
    e.open()
    e.drop_topic("a")  # logged after the snapshot, its files removed at once
    e.close(snapshot=False)
    assert not seg_dir.exists()
    r = run("verify", str(tmp_path / "other"))
    assert r.exit_code == 0 and "LOST" not in r.output, r.output


def test_verify_judges_a_topic_by_its_last_config(tmp_path: Path) -> None:
    """Made ephemeral and persistent again while running, the topic keeps its records: its
    lost files are lost records, as recovery says."""
    from seglog.clock import ManualClock
    from seglog.engine.engine import Engine, EngineOptions
    from seglog.engine.maintenance import seal_topic
    from seglog.model import Durability, RecordIn, TopicConfig

    root = tmp_path / "data"
    e = Engine(
        EngineOptions(data_dir=root, wal_shards=1, segment_max_events=50), clock=ManualClock()
    )
    e.open()
    e.write("a", [RecordIn.of({"i": i}) for i in range(120)])
    seal_topic(e, e.topics["a"])
    e.snapshot()
    e.put_topic("a", TopicConfig(durability=Durability.EPHEMERAL))
    e.put_topic("a", TopicConfig(durability=Durability.DISK))
    e.close(snapshot=False)
    (root / "topics" / "00000001" / "seg-0000000000000001.data").unlink()
    r = run("verify", str(root))
    assert r.exit_code == 1 and "LOST topic 00000001: the sealed segment of seqs 1..50" in r.output


def test_salvage_of_a_rewrite_cut_short_loses_nothing_more() -> None:
    """A repair that rewrote `.data` (holes have other lengths than the frames they
    replace) and crashed before `.idx`: the stale index points past the frames, which a
    read in a row still finds."""
    from seglog.core.segment_format import SegmentRecord, encode_segment
    from seglog.storage.verify import salvage_frames

    recs = [SegmentRecord(s, 7, None, None, b'{"d":"%s"}' % (b"x" * s), False) for s in range(1, 9)]
    data, idx = encode_segment(recs, 1)
    bad = bytearray(data)
    bad[len(data) // 3] ^= 0xFF
    first, lost = salvage_frames(bytes(bad), idx, 1, 8)
    rewritten, _ = encode_segment(first, 1)
    again, lost_again = salvage_frames(rewritten, idx, 1, 8)  # the old index beside it
    assert len(lost) == 1 and lost_again == []
    assert [r.blob for r in again] == [r.blob for r in first]
