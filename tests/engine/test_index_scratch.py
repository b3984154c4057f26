"""The sealed records' index columns in scratch memory (`storage.scratch`, wired by the
engine): written there as payloads leave memory, restored there after a restart, released
by the maintenance pass — and read back exactly as the heap columns are."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest

from seglog.clock import ManualClock
from seglog.engine import snapshots
from seglog.engine.engine import Engine
from seglog.engine.frozen_slots import HEAP
from seglog.engine.maintenance import SCRATCH_RELEASE_MS, Maintenance, seal_topic
from seglog.model import Durability, RecordIn, TopicConfig
from seglog.storage.scratch import MIN_BYTES, ScratchSpace
from tests.conftest import EngineFactory

N = 3 * MIN_BYTES // 4  # records: a 4-byte column of them is over the mapping threshold


def fill(e: Engine) -> None:
    e.put_topic("t", TopicConfig(durability=Durability.DISK))
    for a in range(0, N, 1000):
        e.write("t", [RecordIn.of({"i": i}, tag=f"k{i % 3}") for i in range(a, a + 1000)])
    seal_topic(e, e.topics["t"], force=True)


def view(e: Engine) -> list[Any]:
    t = e.topics["t"]
    out = [t.count, t.bytes, t.head]
    for cursor in (0, N // 2, N - 5):
        res = e.read("t", cursor, 50)
        out.append([(r.seq, r.ts, r.tag, r.data_json) for r in res.records])
    return out


def test_sealed_columns_live_in_scratch_and_read_like_heap_ones(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine(segment_max_events=10_000, segment_payload_cache=1_000)
    assert isinstance(e.scratch, ScratchSpace) and e.column_memory is e.scratch
    fill(e)
    t = e.topics["t"]
    assert t.frozen.n >= N - 1_000  # the sealed prefix whose payloads left memory
    assert e.scratch.mapped_bytes >= 4 * t.frozen.n  # ts offsets and sizes at least
    before = view(e)
    e.scratch.release_resident()
    assert view(e) == before
    e.close()

    e2 = make_engine(segment_max_events=10_000, segment_payload_cache=1_000)
    assert e2.scratch is not None
    assert e2.topics["t"].frozen.n >= N - 1_000
    assert e2.scratch.mapped_bytes >= 4 * e2.topics["t"].frozen.n  # restored into scratch
    assert view(e2) == before
    e2.close()

    e3 = make_engine(segment_max_events=10_000, segment_payload_cache=1_000, index_scratch=False)
    assert e3.scratch is None and e3.column_memory is HEAP
    assert view(e3) == before


def test_the_maintenance_pass_releases_the_scratch_pages(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine()
    assert e.scratch is not None
    released: list[int] = []
    e.scratch.release_resident = lambda: released.append(1) or 0  # type: ignore[method-assign]
    m = Maintenance(e)
    m.run_once()
    assert released == []
    clock.advance(SCRATCH_RELEASE_MS)
    m.run_once()
    m.run_once()
    assert released == [1]


def test_a_restore_releases_its_columns_as_it_goes(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore of many segments does not hold the whole index resident until the end."""
    e = make_engine(segment_max_events=1_000, segment_payload_cache=0)
    fill(e)
    before = view(e)
    e.close()
    monkeypatch.setattr(snapshots, "RELEASE_EVERY_SEGMENTS", 4)
    calls: list[int] = []
    real = ScratchSpace.release_resident

    def counted(self: ScratchSpace) -> int:
        calls.append(1)
        return real(self)

    monkeypatch.setattr(ScratchSpace, "release_resident", counted)
    e2 = make_engine(segment_max_events=1_000, segment_payload_cache=0)
    segments = len(e2.topics["t"].segments.sealed)
    assert segments >= 40
    assert len(calls) == segments // 4 + 1  # as the restore goes, then once open
    assert view(e2) == before


def test_retained_records_leave_no_heap_behind_once_sealed(make_engine: EngineFactory) -> None:
    """Every slot's dead flag lives in scratch memory with the other index columns: a topic
    sealing as it grows keeps its heap flat. (With the flags in a heap `bytearray` this
    measured 1.9 bytes per record; the index columns on the heap, ~14.)"""
    e = make_engine(segment_max_events=10_000, segment_payload_cache=1_000)
    e.put_topic("t", TopicConfig(durability=Durability.DISK))
    batch = [RecordIn.of({"i": i}) for i in range(1_000)]

    def grow(n: int) -> None:
        for _ in range(n // 1_000):
            e.write("t", batch)
        seal_topic(e, e.topics["t"], force=True)

    grow(200_000)  # past every column's mapping threshold, and the lists' first growth
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        grow(400_000)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert e.topics["t"].count == 600_000
    assert grown / 400_000 < 0.5, f"{grown / 400_000:.2f} heap bytes per record retained"
