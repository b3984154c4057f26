"""Sealed segment files (STORAGE §4): seal/list/read, delete flags, corruption, leftovers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from seglog.core.segment_format import DEL_FLAG, SegmentCorruption, SegmentRecord
from seglog.storage.fs import RealFs
from seglog.storage.segment import (
    SegmentInfo,
    SegmentStore,
    iter_segment,
    list_topic_segments,
    segment_base,
    topic_dir_name,
)

TOPIC = 0x2A


def records(first: int, n: int, dead: tuple[int, ...] = ()) -> list[SegmentRecord]:
    return [
        SegmentRecord(
            s,
            1_700_000_000_000 + s,
            None if s % 3 == 0 else f"node-{s % 2}",
            "tag" if s % 2 else None,
            b'{"d":null}' if s in dead else b'{"d":{"n":%d}}' % s,
            s in dead,
        )
        for s in range(first, first + n)
    ]


def make_store(tmp_path: Path, cold: bool = False) -> SegmentStore:
    cold_root = tmp_path / "cold" / "topics" if cold else None
    return SegmentStore(RealFs(), tmp_path / "data" / "topics", cold_root, TOPIC)


def flip(path: Path, pos: int, mask: int = 0x01) -> None:
    raw = bytearray(path.read_bytes())
    raw[pos] ^= mask
    path.write_bytes(bytes(raw))


def test_names() -> None:
    assert topic_dir_name(10) == "0000000A"
    assert topic_dir_name(0xDEADBEEF) == "DEADBEEF"
    assert segment_base(10001) == "seg-0000000000010001"


def test_seal_list_read_iter(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    a, b = records(1, 50, dead=(7,)), records(51, 20)
    ia = store.seal(a, 1)
    ib = store.seal(b, 51)
    topic_dir = tmp_path / "data" / "topics" / "0000002A"
    assert sorted(p.name for p in topic_dir.iterdir()) == [
        "seg-0000000000000001.data",
        "seg-0000000000000001.idx",
        "seg-0000000000000051.data",
        "seg-0000000000000051.idx",
    ]
    assert ia == SegmentInfo(
        TOPIC, 1, 50, 50, ia.data_bytes, "hot",
        topic_dir / "seg-0000000000000001.data", topic_dir / "seg-0000000000000001.idx",
    )  # fmt: skip
    assert ia.data_bytes == ia.data_path.stat().st_size
    assert ia.idx_path.stat().st_size == 50 * 20
    assert store.list() == [ia, ib]
    for rec in a + b:
        assert store.read(ia if rec.seq <= 50 else ib, rec.seq) == rec
    assert list(store.iter_records(ia)) == a
    assert store.read_del_flags(ia) == [7]
    for seq in (0, 51):
        with pytest.raises(IndexError):
            store.read(ia, seq)
    store.close()
    assert store.read(ib, 60) == b[9]  # maps are re-created after close
    store.close()
    assert make_store(tmp_path).list() == [ia, ib]


def test_mark_deleted_flips_exactly_one_byte_and_survives_reopen(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    info = store.seal(records(1, 10), 1)
    before = info.data_path.read_bytes()
    assert store.read(info, 4).deleted is False  # mapped before the flip
    store.mark_deleted(info, [4])
    after = info.data_path.read_bytes()
    diff = [i for i in range(len(before)) if before[i] != after[i]]
    idx = info.idx_path.read_bytes()[3 * 20 : 4 * 20]
    offset, length = int.from_bytes(idx[0:4], "little"), int.from_bytes(idx[4:8], "little")
    assert diff == [offset + length - 1]
    assert after[offset + length - 1] == DEL_FLAG
    assert store.read(info, 4).deleted is True  # the cached map sees the in-place write
    store.mark_deleted(info, [4, 9, 9])  # idempotent, duplicates fine
    store.close()
    reopened = make_store(tmp_path)
    (again,) = reopened.list()
    assert reopened.read_del_flags(again) == [4, 9]
    assert [r.seq for r in reopened.iter_records(again) if r.deleted] == [4, 9]
    with pytest.raises(IndexError):
        reopened.mark_deleted(again, [11])
    reopened.mark_deleted(again, [])


def test_mark_deleted_writes_only_the_flag_bytes_of_many_seqs(tmp_path: Path) -> None:
    """Adjacent flags go out as one run of the file's own bytes: nothing else changes,
    including flags set by an earlier call inside the run."""
    store = make_store(tmp_path)
    info = store.seal(records(1, 400), 1)
    store.mark_deleted(info, [7])
    before = info.data_path.read_bytes()
    chosen = [3, 4, 5, 9, 10, 200, 201, 399]
    store.mark_deleted(info, chosen)
    after = info.data_path.read_bytes()
    idx = info.idx_path.read_bytes()

    def flag_pos(seq: int) -> int:
        e = idx[(seq - 1) * 20 : seq * 20]
        return int.from_bytes(e[0:4], "little") + int.from_bytes(e[4:8], "little") - 1

    assert [i for i in range(len(before)) if before[i] != after[i]] == [flag_pos(s) for s in chosen]
    assert store.read_del_flags(info) == sorted([7, *chosen])
    store.close()
    (again,) = make_store(tmp_path).list()
    assert make_store(tmp_path).read_del_flags(again) == sorted([7, *chosen])


def test_mark_deleted_refuses_index_entries_out_of_order(tmp_path: Path) -> None:
    """Two swapped entries each point at a well-formed frame, but not in seq order: the
    run would be written from the wrong place, so nothing is written."""
    store = make_store(tmp_path)
    info = store.seal(records(1, 3), 1)
    idx = bytearray(info.idx_path.read_bytes())
    idx[20:40], idx[40:60] = idx[40:60], idx[20:40]
    info.idx_path.write_bytes(bytes(idx))
    data = info.data_path.read_bytes()
    with pytest.raises(SegmentCorruption, match="seq 3"):
        make_store(tmp_path).mark_deleted(info, [2, 3])
    assert info.data_path.read_bytes() == data


def test_mark_deleted_refuses_a_bad_index_entry(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    info = store.seal(records(1, 3), 1)
    flip(info.idx_path, 20, 0x04)  # seq 2's offset now points into seq 1's frame
    data = info.data_path.read_bytes()
    with pytest.raises(SegmentCorruption, match="seq 2"):
        store.mark_deleted(info, [2])
    assert info.data_path.read_bytes() == data


@pytest.mark.parametrize("where", ["payload", "checksum", "header"])
def test_flipped_byte_raises_on_read_and_iter(tmp_path: Path, where: str) -> None:
    store = make_store(tmp_path)
    info = store.seal(records(1, 5), 1)
    assert store.read(info, 3).seq == 3  # the map is cached; corruption must still be seen
    idx = info.idx_path.read_bytes()
    offset = int.from_bytes(idx[40:44], "little")
    end = offset + int.from_bytes(idx[44:48], "little")
    pos = {"payload": end - 12, "checksum": end - 5, "header": offset + 6}[where]
    flip(info.data_path, pos)
    for s in (store, make_store(tmp_path)):
        with pytest.raises(SegmentCorruption, match="seq 3"):
            s.read(info, 3)
        assert s.read(info, 2).seq == 2 and s.read(info, 4).seq == 4
        with pytest.raises(SegmentCorruption, match="seq 3"):
            s.read_run(info, 1, 5)
        assert s.read_run(info, 4, 5) == [r.blob for r in records(4, 2)]
        with pytest.raises(SegmentCorruption, match="seq 3"):
            list(s.iter_records(info))
        with pytest.raises(SegmentCorruption, match="seq 3"):
            s.read_del_flags(info)
        with pytest.raises(SegmentCorruption):
            list(iter_segment(info))
        s.close()


def test_truncated_data_and_extra_frames_are_corruption(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    info = store.seal(records(1, 5), 1)
    short = dataclasses.replace(info, count=4, last_seq=4)
    with pytest.raises(SegmentCorruption, match="holds 5 frames"):
        list(store.iter_records(short))
    with pytest.raises(SegmentCorruption, match="holds 5 frames"):
        store.read_del_flags(short)
    store.close()
    raw = info.data_path.read_bytes()
    info.data_path.write_bytes(raw[:-3])
    with pytest.raises(SegmentCorruption):
        store.read(info, 5)


def test_leftovers_are_deleted_and_complete_segments_kept(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    keep = store.seal(records(1, 4), 1)
    d = keep.data_path.parent
    leftovers = {
        "seg-0000000000000005.data.tmp": b"partial",
        "seg-0000000000000005.idx.tmp": b"",
        "seg-0000000000000009.data": b"x" * 50,  # .data without .idx
        "seg-0000000000000013.data": b"x" * 50,  # idx length not a multiple of 20
        "seg-0000000000000013.idx": b"y" * 30,
        "seg-0000000000000017.data": b"",  # empty idx: no records
        "seg-0000000000000017.idx": b"",
        "seg-0000000000000021.idx": b"z" * 20,  # .idx alone
    }
    for name, raw in leftovers.items():
        (d / name).write_bytes(raw)
    (d / "notes.txt").write_bytes(b"not ours")
    assert list_topic_segments(tmp_path / "data", TOPIC) == [keep]  # offline: read-only
    assert all((d / name).exists() for name in leftovers)
    assert store.list() == [keep]
    assert sorted(p.name for p in d.iterdir()) == [
        "notes.txt",
        "seg-0000000000000001.data",
        "seg-0000000000000001.idx",
    ]


def test_seal_replaces_an_existing_pair(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    old = store.seal(records(1, 10), 1)
    assert store.read(old, 10).seq == 10
    new_recs = records(1, 3, dead=(2,))
    new = store.seal(new_recs, 1)
    assert (new.count, new.last_seq) == (3, 3)
    assert store.list() == [new]
    assert list(store.iter_records(new)) == new_recs
    assert store.read(new, 2) == new_recs[1]
    assert not list(new.data_path.parent.glob("*.tmp"))


def test_drop_is_idempotent(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    a = store.seal(records(1, 3), 1)
    b = store.seal(records(4, 3), 4)
    store.read(a, 1)
    store.drop(a)
    store.drop(a)
    assert not a.data_path.exists() and not a.idx_path.exists()
    assert store.list() == [b]
    store.drop_all()
    store.drop_all()
    assert not (tmp_path / "data" / "topics" / "0000002A").exists()
    assert store.list() == []


def test_drop_removes_both_tiers(tmp_path: Path) -> None:
    store = make_store(tmp_path, cold=True)
    recs = records(1, 3)
    hot = store.seal(recs, 1)
    cold = store.install("cold", 1, hot.data_path.read_bytes(), hot.idx_path.read_bytes())
    assert store.list() == [hot]  # interrupted move: hot wins
    store.drop(hot)
    assert not cold.data_path.exists() and store.list() == []


def test_drop_all_removes_both_tiers(tmp_path: Path) -> None:
    store = make_store(tmp_path, cold=True)
    hot = store.seal(records(1, 3), 1)
    store.install("cold", 9, b"x", b"y" * 20)
    store.drop_all()
    assert not hot.data_path.parent.exists()
    assert not (tmp_path / "cold" / "topics" / "0000002A").exists()


def test_offline_api_lists_both_tiers(tmp_path: Path) -> None:
    store = make_store(tmp_path, cold=True)
    a_recs, b_recs = records(1, 5, dead=(2,)), records(6, 5)
    a = store.seal(a_recs, 1)
    data, idx = a.data_path.read_bytes(), a.idx_path.read_bytes()
    store.drop(a)
    cold = store.install("cold", 1, data, idx)
    b = store.seal(b_recs, 6)
    (tmp_path / "cold" / "topics" / "0000002A" / "seg-0000000000000011.data.tmp").write_bytes(b"")
    infos = list_topic_segments(tmp_path / "data", TOPIC, tmp_path / "cold")
    assert infos == [cold, b]
    assert [i.tier for i in infos] == ["cold", "hot"]
    assert list(iter_segment(infos[0])) == a_recs
    assert list(iter_segment(infos[1], RealFs())) == b_recs
    assert list_topic_segments(tmp_path / "data", TOPIC) == [b]  # without the cold dir
    assert list_topic_segments(tmp_path / "data", 7, tmp_path / "cold") == []
    assert (tmp_path / "cold" / "topics" / "0000002A" / "seg-0000000000000011.data.tmp").exists()


def test_list_spares_a_pair_being_sealed(tmp_path: Path) -> None:
    listed: list[list[SegmentInfo]] = []

    class ListOnRename(RealFs):
        def rename(self, src: Path, dst: Path) -> None:
            super().rename(src, dst)
            listed.append(store.list())  # between the .data and .idx renames, and after

    store = SegmentStore(ListOnRename(), tmp_path / "topics", None, TOPIC)
    info = store.seal(records(1, 3), 1)
    assert listed[0] == [] and listed[1] == [info]
    assert store.list() == [info]


def test_read_run_clamps_to_the_segment_and_checks_the_index(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    recs = records(11, 10, dead=(13,))
    info = store.seal(recs, 11)
    assert store.read_run(info, 11, 20) == [r.blob for r in recs]
    assert store.read_run(info, 5, 12) == [r.blob for r in recs[:2]]
    assert store.read_run(info, 19, 99) == [r.blob for r in recs[-2:]]
    assert store.read_run(info, 21, 30) == []
    framed = [
        int.from_bytes(info.idx_path.read_bytes()[i * 20 + 4 : i * 20 + 8], "little")
        for i in range(10)
    ]
    assert store.read_run(info, 11, 20, max_bytes=1) == [recs[0].blob]
    assert store.read_run(info, 11, 20, max_bytes=framed[0] + framed[1]) == [
        r.blob for r in recs[:2]
    ]
    assert store.read_run(info, 11, 20, max_bytes=framed[0] + framed[1] + 1) == [
        r.blob for r in recs[:3]
    ]
    assert store.read_run(info, 11, 20, max_bytes=10**9) == [r.blob for r in recs]
    idx = bytearray(info.idx_path.read_bytes())
    idx[20 * 4 : 20 * 4 + 4] = (10**6).to_bytes(4, "little")  # seq 15 points past the end
    info.idx_path.write_bytes(bytes(idx))
    fresh = make_store(tmp_path)
    assert fresh.read_run(info, 11, 14) == [r.blob for r in recs[:4]]
    with pytest.raises(SegmentCorruption, match=r"seqs 15\.\.15: .* outside the data file"):
        fresh.read_run(info, 15, 15)
    with pytest.raises(SegmentCorruption):
        fresh.read_run(info, 11, 20)
    fresh.close()
    store.close()


def test_a_pinned_segment_stays_readable_after_its_files_go(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    recs = records(1, 8)
    info = store.seal(recs, 1)
    pin = store.pin(info)
    store.drop(info)  # e.g. every record evicted while a snapshot was being written
    assert not info.data_path.exists()
    assert store.read_run(pin, 3, 5) == [r.blob for r in recs[2:5]]
    store.close()
