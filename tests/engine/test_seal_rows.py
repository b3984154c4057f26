"""The vectorized row checks of sealing against their plain definitions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.engine.engine import Engine
from seglog.engine.maintenance import seal_topic
from seglog.engine.segments import missing_payload_rows, raced_deletes
from seglog.model import Durability, RecordIn, TopicConfig
from tests.conftest import EngineFactory
from tests.engine.oracle import ImageKind, abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs


@st.composite
def captured_rows(draw: st.DrawFn) -> tuple[list[bytes | None], bytearray]:
    n = draw(st.integers(0, 60))
    data = draw(st.lists(st.one_of(st.none(), st.just(b"x")), min_size=n, max_size=n))
    dead = bytearray(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    return data, dead


@given(captured_rows())
def test_missing_payload_rows_are_the_live_rows_without_data(
    rows: tuple[list[bytes | None], bytearray],
) -> None:
    data, dead = rows
    expected = [
        k for k, (d, gone) in enumerate(zip(data, dead, strict=True)) if d is None and not gone
    ]
    assert missing_payload_rows(data, dead) == expected


@st.composite
def seal_race(draw: st.DrawFn) -> tuple[int, bytearray, int, int, bytearray]:
    """A capture of rows `first_seq ..` against the topic's slots at registration. The
    front may have been compacted in between (`origin` moved past the capture's start:
    row 0's slot index `lo` is negative), and a dead flag is any non-zero byte."""
    origin = draw(st.integers(41, 10**12))
    slots = draw(st.integers(0, 80))
    dead = bytearray(draw(st.lists(st.integers(0, 3), min_size=slots, max_size=slots)))
    lo = draw(st.integers(-40, slots))
    n = draw(st.integers(0, slots - lo))  # captured rows never reach past the head
    was_dead = bytearray(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    front = draw(st.integers(0, slots))
    return origin + lo, was_dead, origin, front, dead


@given(seal_race())
def test_raced_deletes_are_rows_captured_live_that_died_since(
    case: tuple[int, bytearray, int, int, bytearray],
) -> None:
    first_seq, was_dead, origin, front, dead = case
    expected = [
        seq
        for seq, gone_then in enumerate(was_dead, first_seq)
        if not gone_then and (seq - origin < front or dead[seq - origin])
    ]
    assert raced_deletes(first_seq, was_dead, origin, front, dead) == expected


@pytest.mark.parametrize(
    ("delete", "flagged"),
    [({"seqs": [3, 7]}, [3, 7]), ({"before_seq": 5}, [1, 2, 3, 4])],
    ids=["seqs", "before_seq"],
)
def test_a_delete_that_lands_while_a_segment_is_written_is_flagged_in_it(
    make_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
    delete: dict[str, Any],
    flagged: list[int],
) -> None:
    """The seal writes its files outside the topic lock; a delete in between (one that
    moves the live front too) is flagged in the new segment once it registers."""
    e = make_engine(segment_max_events=10)
    e.put_topic("t", TopicConfig(durability=Durability.DISK))
    e.write("t", [RecordIn.of({"i": i}) for i in range(10)])
    t = e.topics["t"]
    assert t.segments is not None
    store = t.segments.store
    install = store.install

    def racing(*args: Any) -> Any:
        e.delete_records("t", **delete)
        return install(*args)

    monkeypatch.setattr(store, "install", racing)
    assert seal_topic(e, t) == 1
    (info,) = t.segments.sealed
    assert (info.first_seq, info.last_seq) == (1, 10)
    assert store.read_del_flags(info) == flagged


# A `disk` delete survives a process crash; a power cut may drop its un-fsynced WAL frame
# (SEMANTICS §2.2), so that combination promises nothing about it.
@pytest.mark.parametrize(
    ("durability", "kind"),
    [(Durability.FSYNC, "process"), (Durability.FSYNC, "power"), (Durability.DISK, "process")],
    ids=["fsync-process", "fsync-power", "disk-process"],
)
def test_a_delete_that_raced_a_seal_stays_deleted_after_a_crash(
    engines: list[tuple[Engine, FaultFs]],
    monkeypatch: pytest.MonkeyPatch,
    durability: Durability,
    kind: ImageKind,
) -> None:
    """Writes, a delete racing the seal's file writes, a snapshot that references the new
    segment, then a crash: recovery shows exactly the records that were not deleted."""
    fs = FaultFs()
    e = open_engine(fs, segment_max_events=10)
    engines.append((e, fs))
    e.put_topic("t", TopicConfig(durability=durability))
    e.write("t", [RecordIn.of({"i": i}) for i in range(1, 11)])
    t = e.topics["t"]
    assert t.segments is not None
    store = t.segments.store
    install = store.install

    def racing(*args: Any) -> Any:
        e.delete_records("t", seqs=[2, 9])
        return install(*args)

    monkeypatch.setattr(store, "install", racing)
    assert seal_topic(e, t) == 1
    e.snapshot()
    e.write("t", [RecordIn.of({"i": 11})])
    img = image(fs, kind)
    abandon(e, fs)
    e2 = open_engine(img)
    engines.append((e2, img))
    assert sorted(read_all(e2, "t")) == [1, 3, 4, 5, 6, 7, 8, 10, 11]
