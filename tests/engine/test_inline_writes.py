"""A buffered write the writing thread puts into the WAL itself (`WalShard.submit`, inline
when the writer is idle) keeps every promise a write through the writer thread keeps: a
failure fails only it, its seqs stay holes, a write queued behind it (another topic, same
shard) is acked and written after it, and neither crash image brings the failed write
back. Spec: SEMANTICS §3.1–§3.2; STORAGE §3.5."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from seglog.engine.engine import Engine
from seglog.errors import ErrorCode, SeglogError
from seglog.model import Durability, TopicConfig, WriteResult
from tests.engine.oracle import IMAGES, Hooks, ImageKind, open_engine, wait_until
from tests.engine.test_regressions import crash_and_recover, data_of, mark, read_all, rec
from tests.support.faultfs import FaultFs


def _live(e: Engine, name: str) -> dict[int, bytes]:
    return {s: r.data_json for s, r in read_all(e, name).items()}


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("cls", [Durability.DISK, Durability.MEMORY])
def test_a_failed_inline_write_fails_only_itself(
    engines: list[tuple[Engine, FaultFs]], cls: Durability, kind: ImageKind
) -> None:
    fs = FaultFs()
    e = open_engine(fs)
    engines.append((e, fs))
    hooks = Hooks(fs)
    for name in ("a", "b"):
        e.put_topic(name, TopicConfig(durability=cls))
        e.write(name, [rec(f"{name}0")])  # a disk topic's first write logs its reservation
    inline_before = e.wal.metrics().inline_batches if e.wal else 0

    gate = hooks.hold(mark("A"))
    hooks.fail_write(mark("A"))
    writing_threads: list[str] = []
    held_writes = fs.before_write
    assert held_writes is not None

    def note_thread(path: Any, offset: int, data: bytes) -> None:
        if mark("A") in data:
            writing_threads.append(threading.current_thread().name)
        held_writes(path, offset, data)

    fs.before_write = note_thread
    outcome: dict[str, object] = {}

    def run(key: str, name: str, marker: str) -> threading.Thread:
        def body() -> None:
            try:
                outcome[key] = e.write(name, [rec(marker)])
            except BaseException as err:
                outcome[key] = err

        th = threading.Thread(target=body, name=f"writer-{key}")
        th.start()
        return th

    ta = run("A", "a", "A")
    gate.wait_held()  # A is being written by its own thread, not by the WAL writer
    assert e.wal is not None
    wal = e.wal
    tb = run("B", "b", "B")
    # The writer takes B only once A's write lets go of the file: until then B is queued.
    wait_until(lambda: wal.metrics().queue_depth >= 1, "B to be queued behind A")
    assert "B" not in outcome, "B was acked before A, queued ahead of it, was written"
    gate.release()
    ta.join(10)
    tb.join(10)
    err = outcome["A"]
    assert isinstance(err, SeglogError) and err.code is ErrorCode.INTERNAL
    rb = outcome["B"]
    assert isinstance(rb, WriteResult), f"B's own frames were written, yet: {rb!r}"
    assert writing_threads[0] == "writer-A", "A was not written by its own thread"
    assert wal.metrics().read_only == 0

    rc = e.write("a", [rec("C")])
    assert wal.metrics().inline_batches == inline_before + 1  # C: inline again at once
    assert rc.first_seq > 2, "the failed write's seq was handed out again"
    assert _live(e, "a") == {1: data_of("a0"), rc.first_seq: data_of("C")}
    assert _live(e, "b") == {1: data_of("b0"), rb.first_seq: data_of("B")}

    e2, _ = crash_and_recover(e, fs, kind, engines)
    got_a, got_b = _live(e2, "a"), _live(e2, "b")
    assert data_of("A") not in got_a.values(), "the failed write came back"
    if kind == "process":  # the page cache survives: every acked buffered write is there
        assert got_a == {1: data_of("a0"), rc.first_seq: data_of("C")}
        assert got_b == {1: data_of("b0"), rb.first_seq: data_of("B")}
    else:  # a power cut may drop buffered writes, never alter or reorder them
        assert set(got_a.items()) <= {(1, data_of("a0")), (rc.first_seq, data_of("C"))}
        assert set(got_b.items()) <= {(1, data_of("b0")), (rb.first_seq, data_of("B"))}
    if cls is Durability.DISK:  # an acked disk seq is never reused (SEMANTICS §3.2)
        assert e2.write("a", [rec("D")]).first_seq > rc.last_seq
