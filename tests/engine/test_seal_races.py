"""A seal writes its segment outside the topic's lock: a topic delete that lands meanwhile
takes the directory away under it. That ends the seal quietly, leaves no file behind, and
never stops the maintenance pass for the other topics."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import seglog.storage.segment as segment
from seglog.clock import ManualClock
from seglog.engine.engine import Engine
from seglog.engine.maintenance import Maintenance, seal_topic
from seglog.model import RecordIn, TopicConfig
from tests.engine.oracle import ROOT, open_engine
from tests.support.faultfs import FaultFs


def _drop_during_the_first_segment_write(
    e: Engine, monkeypatch: pytest.MonkeyPatch, name: str
) -> list[str]:
    real = segment.write_synced
    fired: list[str] = []

    def write_synced(fs: object, path: Path, data: bytes) -> None:
        if not fired:
            fired.append(name)
            other = threading.Thread(target=e.drop_topic, args=(name,))
            other.start()  # a request on another thread
            other.join(10)
        real(fs, path, data)  # type: ignore[arg-type]

    monkeypatch.setattr(segment, "write_synced", write_synced)
    return fired


def test_a_seal_racing_a_topic_delete_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    fs = FaultFs()
    e = open_engine(fs, clock=ManualClock(), segment_max_events=8)
    e.put_topic("c", TopicConfig())
    e.write("c", [RecordIn.of({"i": i}) for i in range(10)])
    tid = e.topics["c"].topic_id
    fired = _drop_during_the_first_segment_write(e, monkeypatch, "c")
    t = e.topics["c"]
    assert seal_topic(e, t, force=True) == 0
    assert fired and t.deleted
    assert not fs.is_dir(ROOT / "topics" / f"{tid:08X}")
    e.close()


def test_one_topics_failure_does_not_stop_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    fs = FaultFs()
    e = open_engine(fs, clock=ManualClock(), segment_max_events=8)
    for name in ("c", "z"):
        e.put_topic(name, TopicConfig())
        e.write(name, [RecordIn.of({"i": i}) for i in range(10)])

    def broken(*_a: object, **_k: object) -> int:
        raise OSError(5, "Input/output error")

    real = seal_topic
    monkeypatch.setattr(
        "seglog.engine.maintenance.seal_topic",
        lambda eng, t, force=False: broken() if t.name == "c" else real(eng, t, force),
    )
    Maintenance(e).run_once()
    z = e.topics["z"].segments
    assert z is not None and z.sealed  # sealed although "c" failed first
    e.close()


def test_a_seal_whose_install_makes_the_deleted_topics_directory_again_removes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The delete removed the directory just before the install made it again: the
    install succeeds, and the seal must remove all of it, not only its two files."""
    fs = FaultFs()
    e = open_engine(fs, clock=ManualClock(), segment_max_events=8)
    e.put_topic("c", TopicConfig())
    e.write("c", [RecordIn.of({"i": i}) for i in range(10)])
    tid = e.topics["c"].topic_id
    real = segment.make_dirs_durably
    fired: list[int] = []

    def make_dirs(fs_: object, d: Path) -> None:
        if not fired:
            fired.append(1)
            other = threading.Thread(target=e.drop_topic, args=("c",))
            other.start()
            other.join(10)
        real(fs_, d)  # type: ignore[arg-type]

    monkeypatch.setattr(segment, "make_dirs_durably", make_dirs)
    t = e.topics["c"]
    assert seal_topic(e, t, force=True) == 0
    assert fired and t.deleted
    assert not fs.is_dir(ROOT / "topics" / f"{tid:08X}")
    e.close()
