"""Cold-tier reads (STORAGE §4.5): a slow cold disk delays only its reader. The cold bytes
are paged in without the topic lock, so writers and hot readers of the same topic go on."""

from __future__ import annotations

import mmap
import threading
from pathlib import Path

import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import relocate_cold, seal_topic
from seglog.model import RecordIn, TopicConfig
from seglog.storage.fs import RealFs


class SlowColdFs(RealFs):
    """Once armed, maps of files under `cold` wait on `gate` (a cold disk that stalls)."""

    def __init__(self, cold: Path) -> None:
        self.cold = cold
        self.armed = False
        self.gate = threading.Event()
        self.entered = threading.Event()

    def map_file(self, path: Path) -> bytes | mmap.mmap:
        if self.armed and self.cold in path.parents:
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
        return super().map_file(path)


def options(tmp_path: Path) -> EngineOptions:
    return EngineOptions(
        data_dir=tmp_path / "data",
        cold_dir=tmp_path / "cold",
        wal_shards=1,
        segment_max_events=10,
        hot_retain_segments=1,
        segment_payload_cache=0,
    )


def sealed_segments(tmp_path: Path, segments: int) -> Engine:
    """An open engine whose topic `t` holds `segments` sealed segments of 10 records."""
    e = Engine(options(tmp_path), clock=ManualClock())
    e.open()
    e.put_topic("t", TopicConfig())
    for i in range(segments):
        e.write("t", [RecordIn.of({"i": i * 10 + j}) for j in range(10)])
        seal_topic(e, e.topics["t"], force=True)
    return e


def test_a_stalled_cold_read_blocks_neither_writers_nor_hot_readers(tmp_path: Path) -> None:
    e = sealed_segments(tmp_path, 4)
    assert relocate_cold(e, e.topics["t"]) == 3  # seqs 1..30 cold, 31..40 hot
    e.close(snapshot=True)

    fs = SlowColdFs(tmp_path / "cold")
    e = Engine(options(tmp_path), fs=fs, clock=ManualClock())
    e.open()
    fs.armed = True  # recovery has verified the segments; reads map them afresh
    for segs in (e.topics["t"].segments,):
        segs.store._release_maps()
    try:
        assert e.reads_cold("t", 0, 5) and not e.reads_cold("t", 30, 5)
        got: list[object] = []
        reader = threading.Thread(target=lambda: got.append(e.read("t", 0, limit=25)))
        reader.start()
        assert fs.entered.wait(30)  # the reader is stuck on the cold disk ...
        w = e.write("t", [RecordIn.of({"i": 40})])  # ... and the topic still takes writes
        assert w.first_seq == 41
        hot = e.read("t", 30, limit=100)  # ... and serves hot reads
        assert [r.seq for r in hot.records] == list(range(31, 42))
        assert reader.is_alive()
        fs.gate.set()
        reader.join(30)
        (res,) = got
        assert [r.seq for r in res.records] == list(range(1, 26))  # type: ignore[attr-defined]
        assert [r.data for r in res.records] == [{"i": i} for i in range(25)]  # type: ignore[attr-defined]
        assert res.cold_segments_read == 25  # type: ignore[attr-defined]
    finally:
        fs.gate.set()
        e.close(snapshot=False)


class SlowSegmentReads:
    """Wraps `SegmentStore.read_run` so that, once armed, it stalls on `gate` (a hot segment
    whose pages must come from a slow disk)."""

    def __init__(self, store: object) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.armed = False
        original = store.read_run  # type: ignore[attr-defined]

        def read_run(*args: object, **kwargs: object) -> object:
            if self.armed:
                self.entered.set()
                assert self.gate.wait(30), "the test never opened the gate"
            return original(*args, **kwargs)

        store.read_run = read_run  # type: ignore[attr-defined]


def test_sealed_payloads_are_read_without_the_topic_lock(tmp_path: Path) -> None:
    """A read whose payloads left memory reads them from the sealed segments with the topic
    lock released: a stalled page-in delays that reader only, not writers or other
    readers of the topic (issue 9: reads never wait on the disk under a lock)."""
    opts = EngineOptions(
        data_dir=tmp_path / "data", wal_shards=1, segment_max_events=10, segment_payload_cache=0
    )
    e = Engine(opts, clock=ManualClock())
    e.open()
    try:
        e.put_topic("t", TopicConfig())
        for i in range(3):
            e.write("t", [RecordIn.of({"i": i * 10 + j}) for j in range(10)])
            seal_topic(e, e.topics["t"], force=True)
        t = e.topics["t"]
        assert not t.has_payload(1)  # the payloads of seqs 1..30 left memory
        slow = SlowSegmentReads(t.segments.store)
        slow.armed = True
        got: list[object] = []
        reader = threading.Thread(target=lambda: got.append(e.read("t", 0, limit=25)))
        reader.start()
        assert slow.entered.wait(30)  # the reader waits on the segment ...
        assert e.write("t", [RecordIn.of({"i": 30})]).first_seq == 31  # ... writers go on
        assert e.get_topic("t").head_seq == 31  # ... and so does the topic's state
        assert reader.is_alive()
        slow.gate.set()
        reader.join(30)
        (res,) = got
        assert [r.data for r in res.records] == [{"i": i} for i in range(25)]  # type: ignore[attr-defined]
    finally:
        e.close(snapshot=False)


class DropDuringMove:
    """Runs `action` once, at a chosen step of the relocation (the move runs unlocked)."""

    def __init__(self, e: Engine, at: str, action: object) -> None:
        self.store = e.topics["t"].segments.store  # type: ignore[union-attr]
        self.at, self.action, self.fired = at, action, False
        self.read_file = self.store.fs.read_file
        self.install = self.store.install

    def __enter__(self) -> DropDuringMove:
        fs, store = self.store.fs, self.store

        def read_file(path: Path) -> bytes:
            self.fire("read")
            return bytes(self.read_file(path))

        def install(tier: str, first_seq: int, data: bytes, idx: bytes) -> object:
            got = self.install(tier, first_seq, data, idx)  # type: ignore[arg-type]
            self.fire("installed")
            return got

        fs.read_file = read_file  # type: ignore[method-assign]
        store.install = install  # type: ignore[method-assign]
        return self

    def fire(self, step: str) -> None:
        if step == self.at and not self.fired:
            self.fired = True
            self.action()  # type: ignore[operator]

    def __exit__(self, *exc: object) -> None:
        del self.store.fs.read_file
        del self.store.install


def cold_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "cold").rglob("seg-*") if p.is_file())


@pytest.mark.parametrize("at", ["read", "installed"])
def test_a_segment_dropped_while_it_moves_leaves_no_cold_copy(tmp_path: Path, at: str) -> None:
    e = sealed_segments(tmp_path, 3)
    drop_first = lambda: e.delete_records("t", before_seq=11)  # noqa: E731  (segment 1..10)
    with DropDuringMove(e, at, drop_first) as hook:
        assert relocate_cold(e, e.topics["t"]) == 1  # 11..20 moved; 1..10 was dropped
    assert hook.fired
    segs = e.topics["t"].segments
    assert segs is not None
    assert [(s.first_seq, s.tier) for s in segs.sealed] == [(11, "cold"), (21, "hot")]
    assert cold_files(tmp_path) == ["seg-0000000000000011.data", "seg-0000000000000011.idx"]
    assert [r.seq for r in e.read("t", 0, limit=100).records] == list(range(11, 31))
    e.close(snapshot=True)
    e = Engine(options(tmp_path), clock=ManualClock())
    e.open()
    assert [r.seq for r in e.read("t", 0, limit=100).records] == list(range(11, 31))
    e.close(snapshot=False)


def test_a_topic_deleted_while_its_segment_moves_leaves_no_files(tmp_path: Path) -> None:
    e = sealed_segments(tmp_path, 2)
    t = e.topics["t"]
    with DropDuringMove(e, "installed", lambda: e.drop_topic("t")):
        assert relocate_cold(e, t) == 0
    assert cold_files(tmp_path) == []
    e.close(snapshot=False)


def test_a_read_racing_a_relocation_finds_the_segment_in_the_other_tier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relocation copies a segment to the cold tier, then unlinks the hot copy, while
    readers hold only the topic's lock: a reader that found the hot copy may find it gone
    when it opens it, and must then read the cold one, not fail."""
    from seglog.storage.tiers import relocate

    e = sealed_segments(tmp_path, 3)
    t = e.topics["t"]
    assert t.segments is not None
    store = t.segments.store
    first = t.segments.sealed[0]
    real = store.resolve
    moved: list[object] = []

    def resolve_then_relocate(info):  # type: ignore[no-untyped-def]
        paths = real(info)
        if not moved and info.first_seq == first.first_seq:
            moved.append(relocate(store, info))  # the hot copy goes after `paths` was found
        return paths

    monkeypatch.setattr(store, "resolve", resolve_then_relocate)
    store._forget(first.data_path)
    res = e.read("t", 0, limit=10, max_bytes=1 << 20)
    assert moved and [r.data for r in res.records] == [{"i": i} for i in range(10)]
    e.close()
