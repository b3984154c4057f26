"""Cold-tier relocation (STORAGE §4.5): the planner and crash-safe moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglog.core.segment_format import SegmentRecord
from seglog.storage.fs import RealFs
from seglog.storage.segment import SegmentInfo, SegmentStore, Tier
from seglog.storage.tiers import plan_relocation, relocate

TOPIC = 3


def seg(first: int, size: int = 100, tier: Tier = "hot") -> SegmentInfo:
    p = Path(f"/x/seg-{first:016d}")
    return SegmentInfo(TOPIC, first, first + 9, 10, size, tier, p, p)


def firsts(infos: list[SegmentInfo]) -> list[int]:
    return [i.first_seq for i in infos]


SIX = [seg(f) for f in (51, 1, 21, 11, 41, 31)]  # unsorted on purpose


@pytest.mark.parametrize(
    ("retain_segments", "retain_bytes", "moved"),
    [
        (4, 0, [1, 11]),
        (6, 0, []),
        (10, 0, []),
        (0, 0, [1, 11, 21, 31, 41, 51]),
        (-1, 0, [1, 11, 21, 31, 41, 51]),
        (4, 250, [1, 11, 21, 31]),  # bytes stricter: only 2 × 100 fit
        (2, 1000, [1, 11, 21, 31]),  # segments stricter
        (4, 400, [1, 11]),  # exactly fits
        (4, 50, [1, 11, 21, 31, 41, 51]),  # not even the newest fits
        (0, 10_000, [1, 11, 21, 31, 41, 51]),
    ],
)
def test_plan(retain_segments: int, retain_bytes: int, moved: list[int]) -> None:
    assert firsts(plan_relocation(SIX, retain_segments, retain_bytes)) == moved


def test_plan_considers_only_hot_segments() -> None:
    sealed = [seg(1, tier="cold"), seg(11, tier="cold"), seg(21), seg(31), seg(41)]
    assert firsts(plan_relocation(sealed, 2, 0)) == [21]
    assert firsts(plan_relocation(sealed, 2, 150)) == [21, 31]
    assert plan_relocation([], 0, 0) == []
    assert plan_relocation(sealed[:2], 0, 0) == []


def records(first: int, n: int) -> list[SegmentRecord]:
    return [
        SegmentRecord(s, 1000 + s, "n", None, b'{"d":%d}' % s, s == first + 1)
        for s in range(first, first + n)
    ]


@pytest.fixture
def store(tmp_path: Path) -> SegmentStore:
    return SegmentStore(RealFs(), tmp_path / "data" / "topics", tmp_path / "cold" / "topics", 3)


def test_relocate_moves_files_and_reads_still_work(store: SegmentStore, tmp_path: Path) -> None:
    recs = records(1, 20)
    hot = store.seal(recs, 1)
    other = store.seal(records(21, 5), 21)
    assert store.read(hot, 5) == recs[4]  # a cached hot map must not outlive the move
    cold = relocate(store, hot)
    assert cold.tier == "cold"
    assert cold.data_path == tmp_path / "cold/topics/00000003/seg-0000000000000001.data"
    assert (cold.first_seq, cold.last_seq, cold.count, cold.data_bytes) == (
        hot.first_seq, hot.last_seq, hot.count, hot.data_bytes,
    )  # fmt: skip
    assert not hot.data_path.exists() and not hot.idx_path.exists()
    assert cold.data_path.exists() and cold.idx_path.exists()
    assert list(cold.data_path.parent.iterdir()) != []
    assert not list(cold.data_path.parent.glob("*.tmp"))
    assert store.list() == [cold, other]
    assert list(store.iter_records(cold)) == recs
    assert store.read(cold, 7) == recs[6]
    assert store.read(hot, 8) == recs[7]  # a stale hot info resolves to the cold copy
    assert store.read_del_flags(cold) == [2]
    store.mark_deleted(hot, [9])  # a flag through a stale info lands in the cold copy
    assert store.read_del_flags(cold) == [2, 9]
    assert relocate(store, cold) is cold


def test_delete_flag_set_during_the_copy_is_carried_over(
    store: SegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    hot = store.seal(records(1, 10), 1)
    install = store.install

    def install_then_delete(tier: Tier, first_seq: int, data: bytes, idx: bytes) -> SegmentInfo:
        out = install(tier, first_seq, data, idx)
        store.mark_deleted(hot, [4, 10])  # lands on the hot file after it was copied
        return out

    monkeypatch.setattr(store, "install", install_then_delete)
    cold = relocate(store, hot)
    monkeypatch.undo()
    assert not hot.data_path.exists()
    assert store.read_del_flags(cold) == [2, 4, 10]
    reopened = SegmentStore(store.fs, store.hot_root, store.cold_root, 3)
    (listed,) = reopened.list()
    assert listed == cold and reopened.read(listed, 4).deleted


def test_interrupted_move_lists_the_hot_copy(store: SegmentStore) -> None:
    recs = records(1, 6)
    hot = store.seal(recs, 1)
    data, idx = hot.data_path.read_bytes(), hot.idx_path.read_bytes()
    # Crash after the cold copy was durable, before the hot unlink; a later flag hit hot only.
    stale_cold = store.install("cold", 1, data, idx)
    store.mark_deleted(hot, [5])
    reopened = SegmentStore(store.fs, store.hot_root, store.cold_root, 3)
    assert reopened.list() == [hot]
    assert reopened.read_del_flags(hot) == [2, 5]
    assert stale_cold.data_path.exists()
    cold = relocate(reopened, hot)  # redoing the move overwrites the stale cold pair
    assert reopened.list() == [cold]
    assert reopened.read_del_flags(cold) == [2, 5]
    assert [r.blob for r in reopened.iter_records(cold)] == [r.blob for r in recs]


def test_relocate_needs_a_cold_tier(tmp_path: Path) -> None:
    store = SegmentStore(RealFs(), tmp_path / "topics", None, 3)
    hot = store.seal(records(1, 2), 1)
    with pytest.raises(ValueError, match="no cold tier"):
        relocate(store, hot)
    assert store.list() == [hot]
