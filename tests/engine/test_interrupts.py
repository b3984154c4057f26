"""Ctrl-C in an embedder's main thread never changes acknowledged writes.

Python raises KeyboardInterrupt between any two bytecodes of the main thread. Landing inside
an engine call after a write's frames were submitted but before its seqs were recorded, it
let the next write reuse those seqs (two WAL frames for one seq: a restart kept one of them);
landing inside the publication of a committed write, it left the topic's head behind its
queue. The engine's locks (`seglog.engine.interrupts`) hold a SIGINT back until the state
they guard is whole, then raise it. Spec: SEMANTICS §3.1–§3.2 (seqs are never reused).

The interrupt is a real SIGINT (`signal.raise_signal`), delivered on the test's main thread
at the exact point, with Python's default handler installed for the test."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from seglog.core.leases import Claimer, LeaseBook
from seglog.engine import interrupts, snapshots
from seglog.engine.engine import Engine
from seglog.engine.topic import TopicState
from seglog.model import Durability, RecordIn, TopicConfig, TopicType
from tests.engine.oracle import IMAGES, ImageKind, open_engine, read_all
from tests.engine.test_regressions import crash_and_recover, data_of, rec
from tests.support.faultfs import FaultFs

PERSISTENT = [Durability.DISK, Durability.FSYNC]


@pytest.fixture(autouse=True)
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (pytest-xdist workers run with another), shielded."""
    assert threading.current_thread() is threading.main_thread(), "signals run on the main thread"
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


class Once:
    """Raises SIGINT in this thread (`times` in a row) the first time it is called while
    armed."""

    def __init__(self, times: int = 1) -> None:
        self.armed = False
        self.fired = 0
        self.times = times

    def __call__(self) -> None:
        if self.armed:
            self.armed = False
            self.fired += 1
            for _ in range(self.times):
                signal.raise_signal(signal.SIGINT)


def _interrupt_after(fn: Callable[..., Any], once: Once) -> Callable[..., Any]:
    def wrapped(*args: Any, **kw: Any) -> Any:
        out = fn(*args, **kw)
        once()
        return out

    return wrapped


def _check_acked(e: Engine, name: str, acked: dict[int, bytes], may_lose: bool = False) -> None:
    """Every acked record at its own seq (`may_lose`: if it survived at all), nothing
    twice, and no other record at an acked seq."""
    got = read_all(e, name)
    seq_of = {data: seq for seq, data in acked.items()}
    for seq, r in got.items():
        if r.data_json in seq_of:
            assert seq == seq_of[r.data_json], f"{r.data_json!r} moved to seq {seq}"
        else:
            assert seq not in acked, f"acked seq {seq} holds {r.data_json!r}"
    if not may_lose:
        missing = sorted(set(acked) - set(got))
        assert not missing, f"acked seqs {missing} are gone"
    datas = [r.data_json for r in got.values()]
    assert len(datas) == len(set(datas)), f"a record appears twice: {sorted(datas)}"


def _lossy(cls: Durability, kind: ImageKind) -> bool:
    """A power cut may take acked `disk` writes whose frames were never fsynced."""
    return cls is Durability.DISK and kind == "power"


def _opened(engines: list[tuple[Engine, FaultFs]]) -> tuple[Engine, FaultFs]:
    """An engine on a fresh FaultFs, abandoned when the test ends."""
    fs = FaultFs()
    e = open_engine(fs)
    engines.append((e, fs))
    return e, fs


def _log_with_one_record(e: Engine, cls: Durability) -> dict[int, bytes]:
    """Topic "t" of class `cls` holding one acked record: {its seq: its data}."""
    e.put_topic("t", TopicConfig(durability=cls))
    return {e.write("t", [rec("first")]).first_seq: data_of("first")}


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("cls", PERSISTENT)
def test_interrupt_after_the_submission_never_reuses_its_seqs(
    engines: list[tuple[Engine, FaultFs]], cls: Durability, kind: ImageKind
) -> None:
    e, fs = _opened(engines)
    acked = _log_with_one_record(e, cls)
    once = Once()
    # Both doors a write's frames take into the WAL (the waiting caller's and the other).
    e._submit_for_waiter = _interrupt_after(e._submit_for_waiter, once)  # type: ignore[method-assign]
    e._submit = _interrupt_after(e._submit, once)  # type: ignore[method-assign]
    once.armed = True
    with pytest.raises(KeyboardInterrupt):
        e.write("t", [rec("interrupted")])
    assert once.fired == 1
    for marker in ("after-1", "after-2"):
        acked[e.write("t", [rec(marker)]).first_seq] = data_of(marker)
    _check_acked(e, "t", acked)
    e2, _ = crash_and_recover(e, fs, kind, engines)
    _check_acked(e2, "t", acked, may_lose=_lossy(cls, kind))


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("cls", PERSISTENT)
def test_interrupt_while_publishing_leaves_the_topic_whole(
    engines: list[tuple[Engine, FaultFs]],
    cls: Durability,
    kind: ImageKind,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    e, fs = _opened(engines)
    acked = _log_with_one_record(e, cls)
    once = Once()
    publish = TopicState.publish_batch

    def interrupted_publish(self: TopicState, *args: Any) -> Any:
        once()  # lands before the records are in the topic
        return publish(self, *args)

    monkeypatch.setattr(TopicState, "publish_batch", interrupted_publish)
    once.armed = True
    with pytest.raises(KeyboardInterrupt):
        e.write("t", [rec("interrupted")])
    assert once.fired == 1
    for marker in ("after-1", "after-2"):
        acked[e.write("t", [rec(marker)]).first_seq] = data_of(marker)
    _check_acked(e, "t", acked)
    t = e.topics["t"]
    assert not t.pending and t.head == t.reserved, "an op was left half applied"
    e2, _ = crash_and_recover(e, fs, kind, engines)
    _check_acked(e2, "t", acked, may_lose=_lossy(cls, kind))


def test_interrupt_outside_the_engine_is_raised_at_once() -> None:
    """The shield defers only inside a guarded section: elsewhere Ctrl-C is Python's."""
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    lock = interrupts.ShieldedLock()
    reached = []
    with pytest.raises(KeyboardInterrupt), lock:
        signal.raise_signal(signal.SIGINT)
        reached.append("after the signal")  # the section runs to its end
    assert reached == ["after the signal"]
    assert not lock.locked()
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)  # and the shield is down again


def test_nested_sections_raise_once_at_the_outermost_end() -> None:
    outer, inner = interrupts.ShieldedLock(reentrant=True), interrupts.ShieldedLock()
    steps = []
    with pytest.raises(KeyboardInterrupt), outer:
        with inner:
            signal.raise_signal(signal.SIGINT)
            steps.append("inner")
        steps.append("outer")
        with outer:  # re-entered: still one section
            steps.append("again")
    assert steps == ["inner", "outer", "again"]


def test_a_handler_of_the_embedders_own_is_left_alone() -> None:
    """Only Python's default handler is replaced: a program's own handler runs as it
    would, inside a section too."""
    calls: list[int] = []

    def own(signum: int, frame: Any) -> None:
        calls.append(signum)

    signal.signal(signal.SIGINT, own)
    with interrupts.ShieldedLock():
        assert signal.getsignal(signal.SIGINT) is own
        signal.raise_signal(signal.SIGINT)
        assert calls == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is own


def test_the_default_handler_is_back_after_every_section() -> None:
    """`asyncio.run` installs its graceful Ctrl-C only over Python's default handler."""
    lock = interrupts.ShieldedLock()
    with lock:
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt), lock:
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_other_threads_are_not_shielded() -> None:
    """Off the main thread a lock is only a lock (signals never run there)."""
    lock = interrupts.ShieldedLock()
    seen: list[int] = []

    def body() -> None:
        with lock:
            seen.append(interrupts.depth())

    th = threading.Thread(target=body)
    th.start()
    th.join(10)
    assert seen == [0]


def test_a_second_sigint_while_the_handler_goes_back_raises_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One lands in the outermost section, another while its end puts the default handler
    back: one KeyboardInterrupt there, and nothing left over for the next section."""
    setsignal = interrupts._setsignal

    def again_while_restoring(signum: int, handler: Any) -> Any:
        if handler is signal.default_int_handler:
            signal.raise_signal(signal.SIGINT)  # pending, run as the call below starts
        return setsignal(signum, handler)

    monkeypatch.setattr(interrupts, "_setsignal", again_while_restoring)
    lock = interrupts.ShieldedLock()
    with pytest.raises(KeyboardInterrupt), lock:
        signal.raise_signal(signal.SIGINT)
    monkeypatch.setattr(interrupts, "_setsignal", setsignal)
    try:
        with lock:
            pass  # no Ctrl-C this time: nothing is raised
    except KeyboardInterrupt:
        pytest.fail("a section without a Ctrl-C raised one left over from before")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _queue(durable_leases: bool = False, **kw: Any) -> TopicConfig:
    return TopicConfig(
        type=TopicType.QUEUE,
        durability=Durability.FSYNC,
        leases_durable=durable_leases,
        lease_ms=600_000,
        **kw,
    )


def _claimed(e: Engine, node: str, n: int = 10) -> list[int]:
    return [j.record.seq for j in e.queues.claim("q", [Claimer(node, n)], None).jobs[0]]


@pytest.mark.parametrize("kind", IMAGES)
def test_interrupted_snapshot_keeps_durable_leases(
    engines: list[tuple[Engine, FaultFs]], kind: ImageKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot drops the WAL that held the Lease frames; the leases are logged again in
    the same section, so a Ctrl-C held to its end cannot fall in between."""
    e, fs = _opened(engines)
    e.put_topic("q", _queue(durable_leases=True))
    e.write("q", [RecordIn.of({"job": 1})])
    assert _claimed(e, "w1") == [1]
    once = Once()
    monkeypatch.setattr(snapshots, "take", _interrupt_after(snapshots.take, once))
    once.armed = True
    with pytest.raises(KeyboardInterrupt):
        e.snapshot()
    assert once.fired == 1
    # Lease frames are best effort (STORAGE §3.3): an fsync write behind them on the same
    # shard makes them durable before the crash
    e.write("q", [RecordIn.of({"job": 2})])
    e2, _ = crash_and_recover(e, fs, kind, engines)
    assert _claimed(e2, "w2") == [2], "the durable lease of w1 was lost"


def test_interrupted_ack_leaves_the_job_claimable(
    engines: list[tuple[Engine, FaultFs]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ack's leases go under the topic lock and its delete after it: a Ctrl-C held to
    the end of that section makes the jobs claimable again, never stranded."""
    e, _ = _opened(engines)
    e.put_topic("q", _queue())
    e.write("q", [RecordIn.of({"job": 1})])
    assert _claimed(e, "w1") == [1]
    once = Once()
    monkeypatch.setattr(LeaseBook, "ack", _interrupt_after(LeaseBook.ack, once))
    once.armed = True
    with pytest.raises(KeyboardInterrupt):
        e.queues.ack("q", "w1", [1], [])
    assert once.fired == 1
    assert _claimed(e, "w2") == [1], "the job is neither acked nor claimable"


def test_interrupted_dead_letter_is_tried_again(
    engines: list[tuple[Engine, FaultFs]], monkeypatch: pytest.MonkeyPatch
) -> None:
    e, _ = _opened(engines)
    e.put_topic("q", _queue(max_deliveries=1, dead_letter="dlq"))
    e.write("q", [RecordIn.of({"job": 1})])
    assert _claimed(e, "w1") == [1]
    e.queues.nack("q", "w1", [1], [], 0)
    once = Once()
    write = e.write
    e.write = _interrupt_after(write, once)  # type: ignore[method-assign]
    once.armed = True
    with pytest.raises(KeyboardInterrupt):
        _claimed(e, "w2")  # the pass diverts job 1; its copy's write is interrupted
    assert once.fired == 1
    assert _claimed(e, "w2") == []  # diverted again: copied, then deleted from the queue
    assert e.queues.counts("q").ready == 0
    assert [r.data_json for r in read_all(e, "dlq").values()][-1] == b'{"job":1}'
    assert not read_all(e, "q")


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("cls", PERSISTENT)
def test_asyncio_runs_ctrl_c_is_held_too(
    engines: list[tuple[Engine, FaultFs]], cls: Durability, kind: ImageKind
) -> None:
    """Under `asyncio.run` the first Ctrl-C cancels the main task and the second raises
    KeyboardInterrupt where it lands: both are held to the end of the section."""
    e, fs = _opened(engines)
    acked = _log_with_one_record(e, cls)
    once = Once(times=2)
    e._submit_for_waiter = _interrupt_after(e._submit_for_waiter, once)  # type: ignore[method-assign]
    e._submit = _interrupt_after(e._submit, once)  # type: ignore[method-assign]

    async def main() -> None:
        once.armed = True
        e.write("t", [rec("interrupted")])

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    assert once.fired == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    for marker in ("after-1", "after-2"):
        acked[e.write("t", [rec(marker)]).first_seq] = data_of(marker)
    _check_acked(e, "t", acked)
    e2, _ = crash_and_recover(e, fs, kind, engines)
    _check_acked(e2, "t", acked, may_lose=_lossy(cls, kind))
