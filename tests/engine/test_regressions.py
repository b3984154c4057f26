"""Small, deterministic regression tests for the ways the core lost, altered or resurrected
acknowledged writes (review findings 1–5, 7, 8). Each lines up the interleaving with
FaultFs hooks (hold the write carrying a marker, fail exactly that write or the fsync after
it, freeze the disk once a failure was reported), crashes with both images — a process
crash keeps the page cache, a power cut keeps only what was fsynced — and recovers.

Spec: SEMANTICS §2.2, §3.1–§3.2, §4.2, §7; STORAGE §3.5, §5.3, §6 (step 5), §7.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from seglog.engine.engine import Engine
from seglog.engine.maintenance import seal_topic
from seglog.engine.ops import PendingWrite
from seglog.errors import ErrorCode, SeglogError
from seglog.model import (
    DeleteResult,
    Durability,
    RecordIn,
    Selector,
    TopicConfig,
    WriteResult,
)
from tests.engine.oracle import (
    HOOK_TIMEOUT_S,
    IMAGES,
    Hooks,
    ImageKind,
    abandon,
    image,
    open_engine,
    read_all,
    snapshot,
    wait_until,
)
from tests.support.faultfs import FaultFs, WriteFault

FSYNC = TopicConfig(durability=Durability.FSYNC)
DISK = TopicConfig(durability=Durability.DISK)


def begin(e: Engine, name: str, records: list[RecordIn]) -> PendingWrite:
    """`Engine.write_begin` for a topic that exists (reserve + submit, no wait)."""
    pw = e.write_begin(name, records)
    assert pw is not None
    return pw


def rec(marker: str, tag: str | None = None) -> RecordIn:
    return RecordIn.of({"id": marker}, tag=tag)


def data_of(marker: str) -> bytes:
    return rec(marker).data_json


def mark(marker: str) -> bytes:
    """Bytes that occur in the WAL frame of `rec(marker)` and nowhere else."""
    return b'"' + marker.encode() + b'"'


def seqs_by_marker(e: Engine, name: str) -> dict[bytes, int]:
    return {r.data_json: s for s, r in read_all(e, name).items()}


@pytest.fixture
def fs() -> FaultFs:
    return FaultFs()


def crash_and_recover(
    e: Engine,
    fs: FaultFs,
    kind: ImageKind,
    opened: list[tuple[Engine, FaultFs]],
    shards: int = 1,
    before: Callable[[], None] | None = None,
) -> tuple[Engine, FaultFs]:
    """Image the disk now (optionally after `before`), abandon `e`, recover on the image."""
    img = image(fs, kind)
    if before is not None:
        before()
    abandon(e, fs)
    e2 = open_engine(img, shards)
    opened.append((e2, img))
    return e2, img


def durable_for(cls: Durability, kind: ImageKind) -> bool:
    return cls is Durability.FSYNC or (cls is Durability.DISK and kind == "process")


# ---- 1. a failed WAL commit fails only itself; its seqs stay holes ------------------------


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("first_write", [True, False], ids=["A-first", "A-after-w0"])
@pytest.mark.parametrize("cls", [Durability.DISK, Durability.FSYNC])
def test_failed_append_fails_only_itself_and_its_seqs_stay_holes(
    fs: FaultFs,
    engines: list[tuple[Engine, FaultFs]],
    cls: Durability,
    first_write: bool,
    kind: ImageKind,
) -> None:
    """1(a)/(c): write A fails with EIO while B, reserved behind it, goes out in the next
    batch. B must be acked; C and D get fresh seqs above B; after a crash A's seqs are
    holes, B, C, D are there (or, for `disk` after a power cut, absent but never altered)
    and a new write is handed a seq above every acked one."""
    # The held write waits in the writer thread, not in this one (no inline write).
    e = open_engine(fs, wal_inline_writes=False)
    engines.append((e, fs))
    hooks = Hooks(fs)
    e.put_topic("t", TopicConfig(durability=cls))
    acked: dict[int, bytes] = {}
    if not first_write:
        r0 = e.write("t", [rec("w0")])
        acked[r0.seqs[0]] = data_of("w0")
    gate = hooks.hold(mark("A-1"))
    hooks.fail_write(mark("A-1"))
    pa = begin(e, "t", [rec("A-1"), rec("A-2")])
    gate.wait_held()
    pb = begin(e, "t", [rec("B")])
    gate.release()
    with pytest.raises(SeglogError) as failed:
        e.write_finish(pa)
    assert failed.value.code is ErrorCode.INTERNAL
    try:
        rb = e.write_finish(pb)
    except SeglogError as err:
        pytest.fail(f"B's own frames were committed, yet B failed: {err!r}")
    a_first = 1 if first_write else 2
    assert rb.seqs == [a_first + 2], "B keeps the seq reserved behind A's"
    acked[rb.seqs[0]] = data_of("B")
    rc = e.write("t", [rec("C")])
    rd = e.write("t", [rec("D")])
    assert rb.last_seq < rc.first_seq < rd.first_seq, "A's seqs were handed out again"
    acked[rc.seqs[0]] = data_of("C")
    acked[rd.seqs[0]] = data_of("D")
    live = {s: r.data_json for s, r in read_all(e, "t").items()}
    assert live == acked, "the live topic must show exactly the acked writes"

    e2, _ = crash_and_recover(e, fs, kind, engines)
    got = {s: r.data_json for s, r in read_all(e2, "t").items()}
    for s, data in got.items():
        assert data not in (data_of("A-1"), data_of("A-2")), f"failed write A resurrected at {s}"
        assert acked.get(s) == data, f"seq {s} holds {data!r}, acked {acked.get(s)!r}"
    if durable_for(cls, kind):
        assert got == acked, "acked writes lost after the crash"
    top = max(acked)
    after = e2.write("t", [rec("E")])
    assert after.first_seq > top, f"seq {after.first_seq} handed out again (acked up to {top})"


@pytest.mark.parametrize("cls", [Durability.DISK, Durability.FSYNC])
def test_delete_queued_behind_failing_append_is_bounded_by_the_visible_head(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]], cls: Durability
) -> None:
    """1(b): a before_seq delete ordered behind append A, whose commit then fails, is bounded
    by the head that is actually visible (A's seqs never were), so a write acked later is
    neither swallowed by the delete floor now nor after a crash."""
    # The held write waits in the writer thread, not in this one (no inline write).
    e = open_engine(fs, wal_inline_writes=False)
    engines.append((e, fs))
    hooks = Hooks(fs)
    e.put_topic("t", TopicConfig(durability=cls))
    e.write("t", [rec("p1"), rec("p2"), rec("p3")])  # seqs 1..3
    gate = hooks.hold(mark("A-1"))
    hooks.fail_write(mark("A-1"))
    pa = begin(e, "t", [rec("A-1"), rec("A-2")])  # seqs 4, 5
    gate.wait_held()
    box: list[object] = []

    def deleter() -> None:
        try:
            box.append(e.delete_records("t", before_seq=1000))
        except BaseException as err:
            box.append(err)

    th = threading.Thread(target=deleter)
    th.start()
    assert e.wal is not None
    wal = e.wal
    wait_until(lambda: wal.metrics().queue_depth >= 1, "the delete frame to be queued")
    gate.release()
    with pytest.raises(SeglogError):
        e.write_finish(pa)
    th.join(HOOK_TIMEOUT_S)
    assert not th.is_alive(), "the delete hangs"
    res = box[0]
    assert not isinstance(res, BaseException), f"the delete failed: {res!r}"
    assert res.deleted == 3  # type: ignore[attr-defined]
    rc = e.write("t", [rec("C")])
    assert rc.first_seq > 5, "seqs of the failed write were handed out again"
    live = seqs_by_marker(e, "t")
    assert live == {data_of("C"): rc.first_seq}, "the acked write after the delete is gone"
    info = e.get_topic("t")
    assert info.count == 1 and info.head_seq == rc.last_seq
    e2, _ = crash_and_recover(e, fs, "process", engines)
    assert seqs_by_marker(e2, "t") == {data_of("C"): rc.first_seq}
    assert e2.write("t", [rec("D")]).first_seq > rc.last_seq


# ---- 2. snapshots serialized with topic create / config update / delete ------------------


class HoldAfterCommit:
    """Let one control frame (by type) commit, then hold its submitting thread — the frame
    is in the WAL but the change is not yet applied in memory — until released (or, if
    the engine rightly makes the snapshot wait for the change, until a timeout)."""

    RELEASE_AFTER_S = 0.5  # only reached when the engine serializes (correctly)

    def __init__(self, e: Engine, ftype: int, monkeypatch: pytest.MonkeyPatch) -> None:
        assert e.wal is not None
        wal = e.wal
        real = wal.submit
        self.committed = threading.Event()
        self.release = threading.Event()
        self._used = False

        def submit(shard: int, frames: list[bytes], durable: bool, wake: bool = True) -> object:
            c = real(shard, frames, durable, wake)
            if not self._used and frames and frames[0][4] == ftype:
                self._used = True
                try:
                    c.wait(HOOK_TIMEOUT_S)
                except Exception:
                    pass
                self.committed.set()
                self.release.wait(self.RELEASE_AFTER_S)
            return c

        monkeypatch.setattr(wal, "submit", submit)


TOPIC_CREATE, TOPIC_DELETE = 2, 3


def race_snapshot(e: Engine, hold: HoldAfterCommit, op: Callable[[], object]) -> None:
    box: list[BaseException] = []

    def run() -> None:
        try:
            op()
        except BaseException as err:
            box.append(err)

    th = threading.Thread(target=run)
    th.start()
    assert hold.committed.wait(HOOK_TIMEOUT_S), "the control frame was never submitted"
    snapshot(e)  # its CheckpointMark lands after the committed control frame
    hold.release.set()
    th.join(HOOK_TIMEOUT_S)
    assert not th.is_alive() and not box, box


@pytest.mark.parametrize("kind", IMAGES)
def test_topic_created_while_a_snapshot_runs_survives(
    fs: FaultFs,
    engines: list[tuple[Engine, FaultFs]],
    monkeypatch: pytest.MonkeyPatch,
    kind: ImageKind,
) -> None:
    e = open_engine(fs)
    engines.append((e, fs))
    e.put_topic("old", FSYNC)
    e.write("old", [rec("o1")])
    hold = HoldAfterCommit(e, TOPIC_CREATE, monkeypatch)
    race_snapshot(e, hold, lambda: e.put_topic("new", FSYNC))
    r = e.write("new", [rec("n1"), rec("n2")])
    e2, _ = crash_and_recover(e, fs, kind, engines)
    assert "new" in e2.topics, "an acked topic create vanished after the crash"
    assert e2.get_topic("new").config == FSYNC
    assert seqs_by_marker(e2, "new") == {data_of("n1"): r.seqs[0], data_of("n2"): r.seqs[1]}
    assert seqs_by_marker(e2, "old") == {data_of("o1"): 1}


@pytest.mark.parametrize("kind", IMAGES)
def test_config_update_while_a_snapshot_runs_survives(
    fs: FaultFs,
    engines: list[tuple[Engine, FaultFs]],
    monkeypatch: pytest.MonkeyPatch,
    kind: ImageKind,
) -> None:
    e = open_engine(fs)
    engines.append((e, fs))
    e.put_topic("t", DISK)
    e.write("t", [rec(f"x{i}") for i in range(6)])
    e.write("t", [rec("y")])
    new = TopicConfig(durability=Durability.FSYNC, cap_records=50)
    hold = HoldAfterCommit(e, TOPIC_CREATE, monkeypatch)
    race_snapshot(e, hold, lambda: e.put_topic("t", new))
    assert e.get_topic("t").config == new
    r = e.write("t", [rec("z")])  # acked as fsync
    e2, _ = crash_and_recover(e, fs, kind, engines)
    assert e2.get_topic("t").config == new, "an acked config update reverted after the crash"
    got = seqs_by_marker(e2, "t")
    assert got.get(data_of("z")) == r.first_seq, "the fsync write after the change was lost"


@pytest.mark.parametrize("kind", IMAGES)
def test_topic_dropped_while_a_snapshot_runs_stays_dropped(
    fs: FaultFs,
    engines: list[tuple[Engine, FaultFs]],
    monkeypatch: pytest.MonkeyPatch,
    kind: ImageKind,
) -> None:
    e = open_engine(fs)
    engines.append((e, fs))
    e.put_topic("gone", FSYNC)
    e.put_topic("kept", FSYNC)
    e.write("gone", [rec("g1")])
    e.write("kept", [rec("k1")])
    hold = HoldAfterCommit(e, TOPIC_DELETE, monkeypatch)
    race_snapshot(e, hold, lambda: e.drop_topic("gone"))
    assert "gone" not in e.topics
    e2, _ = crash_and_recover(e, fs, kind, engines)
    assert "gone" not in e2.topics, "an acked topic delete was undone by the crash"
    assert seqs_by_marker(e2, "kept") == {data_of("k1"): 1}


# ---- 3. a class change to a persistent class logs the head ---------------------------------


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("cls", [Durability.FSYNC, Durability.DISK])
def test_class_change_from_ephemeral_keeps_acked_writes_and_their_seqs(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]], cls: Durability, kind: ImageKind
) -> None:
    e = open_engine(fs)
    engines.append((e, fs))
    e.put_topic("e", TopicConfig(durability=Durability.EPHEMERAL))
    for i in range(10):
        e.write("e", [rec(f"eph{i}")])
    e.put_topic("e", TopicConfig(durability=cls))
    r = e.write("e", [rec("p1"), rec("p2")])
    assert r.seqs == [11, 12]
    e2, _ = crash_and_recover(e, fs, kind, engines)
    got = {s: x.data_json for s, x in read_all(e2, "e").items()}
    for s, data in got.items():
        assert {11: data_of("p1"), 12: data_of("p2")}.get(s) == data, (s, data)
    if durable_for(cls, kind):
        assert got == {11: data_of("p1"), 12: data_of("p2")}, "acked writes lost"
    assert e2.write("e", [rec("p3")]).first_seq > 12, "acked seqs were handed out again"


# ---- 4. a write that returned an error never reappears ---------------------------------------


@pytest.mark.parametrize(
    "how", ["fsync-eio", "write-eio-torn", "write-enospc-torn", "write-eio-torn-disk"]
)
def test_failed_write_is_not_resurrected_by_a_process_crash(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]], how: str
) -> None:
    """STORAGE §3.5: the failed range is zeroed and synced *before* the handle fails. The
    disk is frozen the moment A's commit fails, so a repair made later cannot hide it."""
    e = open_engine(fs)
    engines.append((e, fs))
    hooks = Hooks(fs)
    cls = Durability.DISK if how.endswith("disk") else Durability.FSYNC
    e.put_topic("t", TopicConfig(durability=cls))
    r0 = e.write("t", [rec("w0")])
    if how == "fsync-eio":
        hooks.fail_sync_after(mark("A-1"))
    else:
        # the batch write stops one byte short and fails: are complete frames
        hooks.write_rules.append(_torn_rule(mark("A-1"), 28 if "enospc" in how else 5))
    pa = begin(e, "t", [rec("A-1"), rec("A-2"), rec("A-3")])
    pa.op.commit.add_done_callback(lambda _c: hooks.freeze())
    with pytest.raises(SeglogError) as failed:
        e.write_finish(pa)
    assert failed.value.code is ErrorCode.INTERNAL
    assert seqs_by_marker(e, "t") == {data_of("w0"): r0.first_seq}
    e2, _ = crash_and_recover(e, fs, "process", engines, before=hooks.thaw)
    got = seqs_by_marker(e2, "t")
    for m in ("A-1", "A-2", "A-3"):
        assert data_of(m) not in got, f"failed write {m} resurrected at seq {got.get(data_of(m))}"
    assert got == {data_of("w0"): r0.first_seq}
    assert e2.write("t", [rec("B")]).first_seq > r0.last_seq


def _torn_rule(marker: bytes, errno_: int) -> Callable[[Path, bytes], WriteFault | None]:
    done: list[int] = []

    def rule(path: Path, data: bytes) -> WriteFault | None:
        if marker in data and not done:
            done.append(1)
            return WriteFault(keep=len(data) - 1, errno=errno_)
        return None

    return rule


# ---- 5. an I/O error while flipping a sealed record's delete flag -------------------------
# Delete flags are queued by the delete and written later (`TopicSegments.flush_flags`: the
# maintenance pass, `Engine.close`): a flag only repeats a delete that the WAL and every
# later snapshot hold. So a failing flag write reaches neither the deleter nor a writer,
# and loses no delete.


def _is_flag_flip(path: Path, data: bytes) -> bool:
    # Seals and relocations write temp files then rename; only flags write a sealed `.data`.
    return "/topics/" in str(path) and str(path).endswith(".data")


def _sealed_topic(e: Engine, config: TopicConfig = FSYNC) -> None:
    e.put_topic("t", config)
    for i in range(6):
        e.write("t", [rec(f"r{i}", tag="x" if i % 2 else "y")])
    seal_topic(e, e.topics["t"], force=True)
    assert e.topics["t"].segments.sealed, "the records should sit in a sealed segment"


# A `disk` delete survives a process crash; a power cut may drop its un-fsynced WAL frame
# (SEMANTICS §2.2), so that combination promises nothing about it.
@pytest.mark.parametrize(
    ("config", "kind"),
    [(FSYNC, "process"), (FSYNC, "power"), (DISK, "process")],
    ids=["fsync-process", "fsync-power", "disk-process"],
)
def test_flag_flip_eio_is_contained_and_loses_no_delete(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]], config: TopicConfig, kind: ImageKind
) -> None:
    e = open_engine(fs, segment_max_events=4)
    engines.append((e, fs))
    _sealed_topic(e, config)
    hooks = Hooks(fs)
    shot = hooks.fail_path_write(_is_flag_flip, WriteFault())
    e.delete_records("t", match=Selector("Eq", "x"))  # acked: no flag written on its path
    assert not shot.fired
    t = e.topics["t"]
    assert t.segments is not None and len(t.segments.unflagged) == 3
    assert t.segments.flush_flags(t) == 3  # the maintenance pass: logged, never raised
    assert shot.fired, "the flag flip was never attempted (test setup)"
    assert t.segments.unflagged == []
    # the engine keeps working: writes, reads, state
    r = e.write("t", [rec("after")])
    live = seqs_by_marker(e, "t")
    assert live[data_of("after")] == r.first_seq
    odd = {data_of(f"r{i}") for i in range(1, 6, 2)}
    assert not odd & set(live), "an acked delete left records visible"
    e2, _ = crash_and_recover(e, fs, kind, engines)
    got = seqs_by_marker(e2, "t")
    assert not odd & set(got), "an acked delete was undone by the crash"
    for i in range(0, 6, 2):
        assert data_of(f"r{i}") in got


def test_a_clean_close_writes_the_queued_flags(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]]
) -> None:
    """The flags a delete queued are in the sealed files once the engine is closed (what an
    offline reader of the stopped directory, and recovery's step 8, read)."""
    e = open_engine(fs, segment_max_events=4)
    engines.append((e, fs))
    _sealed_topic(e)
    e.delete_records("t", match=Selector("Eq", "x"))
    t = e.topics["t"]
    assert t.segments is not None
    infos = list(t.segments.sealed)
    store = t.segments.store
    assert sum(len(store.read_del_flags(i)) for i in infos) == 0  # queued only
    e.close()
    assert sorted(s for i in infos for s in store.read_del_flags(i)) == [2, 4, 6]


def test_the_maintenance_pass_writes_the_queued_flags(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]]
) -> None:
    """Only kills in sealed segments are queued (an unsealed one becomes a hole when it is
    sealed); a maintenance pass writes them."""
    from seglog.engine.maintenance import Maintenance

    e = open_engine(fs, segment_max_events=4)
    engines.append((e, fs))
    _sealed_topic(e)  # r0..r5 at seqs 1..6, sealed
    e.write("t", [rec("r6", tag="x")])  # seq 7, not sealed
    e.delete_records("t", match=Selector("Eq", "x"))
    t = e.topics["t"]
    assert t.segments is not None
    assert sorted(t.segments.unflagged) == [2, 4, 6]
    Maintenance(e).run_once()
    assert t.segments.unflagged == []
    store = t.segments.store
    assert sorted(s for i in t.segments.sealed for s in store.read_del_flags(i)) == [2, 4, 6]


def test_flag_flip_eio_does_not_hit_an_unrelated_concurrent_writer(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]]
) -> None:
    """Whichever thread applies the delete (the deleter or a writer draining the topic's
    queue), no flag is written on its path; the flush that writes them, failing, runs
    beside a writer without touching it, and nothing hangs."""
    # The held write waits in the writer thread, not in this one (no inline write).
    e = open_engine(fs, wal_inline_writes=False, segment_max_events=4)
    engines.append((e, fs))
    _sealed_topic(e)
    hooks = Hooks(fs)
    shot = hooks.fail_path_write(_is_flag_flip, WriteFault())
    gate = hooks.hold(mark("W1"))
    p1 = begin(e, "t", [rec("W1")])
    gate.wait_held()
    results: dict[str, object] = {}

    def run(name: str, fn: Callable[[], object]) -> threading.Thread:
        def body() -> None:
            try:
                results[name] = fn()
            except BaseException as err:
                results[name] = err

        th = threading.Thread(target=body, name=name)
        th.start()
        return th

    assert e.wal is not None
    wal = e.wal
    t_del = run("deleter", lambda: e.delete_records("t", match=Selector("Eq", "x")))
    wait_until(lambda: wal.metrics().queue_depth >= 1, "the delete to be queued")
    t_w2 = run("writer2", lambda: e.write("t", [rec("W2")]))
    wait_until(lambda: wal.metrics().queue_depth >= 2, "W2 to be queued")
    gate.release()
    try:
        results["writer1"] = e.write_finish(p1)
    except BaseException as err:
        results["writer1"] = err
    for th in (t_del, t_w2):
        th.join(HOOK_TIMEOUT_S)
        assert not th.is_alive(), f"{th.name} hangs"
    assert not shot.fired, "a flag was written on the delete's path"
    t = e.topics["t"]
    assert t.segments is not None
    t_flush = run("flush", lambda: t.segments.flush_flags(t) if t.segments else 0)
    t_w3 = run("writer3", lambda: e.write("t", [rec("W3")]))
    for th in (t_flush, t_w3):
        th.join(HOOK_TIMEOUT_S)
        assert not th.is_alive(), f"{th.name} hangs"
    assert shot.fired
    assert results["flush"] == 3
    for w in ("writer1", "writer2", "writer3"):
        assert isinstance(results[w], WriteResult), f"{w} got {results[w]!r}"
    assert isinstance(results["deleter"], DeleteResult), f"the deleter got {results['deleter']!r}"
    live = seqs_by_marker(e, "t")
    assert data_of("W1") in live and data_of("W2") in live and data_of("W3") in live
    assert not {data_of(f"r{i}") for i in range(1, 6, 2)} & set(live)


# ---- 7. shard count changed between snapshots ---------------------------------------------


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("layouts", [(1, 2, 1), (2, 3, 2), (1, 3, 2)], ids=str)
def test_shard_layout_changes_between_snapshots_keep_acked_records(
    fs: FaultFs,
    engines: list[tuple[Engine, FaultFs]],
    layouts: tuple[int, int, int],
    kind: ImageKind,
) -> None:
    """STORAGE §6 step 5: restart with another shard count after a crash (no snapshot in
    between), write, crash, restart with the first count, write, crash: all acked fsync
    records are there and new seqs go above them."""
    names = [f"t{i}" for i in range(4)]  # several topic ids: some move between shards
    e = open_engine(fs, layouts[0])
    engines.append((e, fs))
    acked: dict[str, dict[int, bytes]] = {n: {} for n in names}
    for n in names:
        e.put_topic(n, FSYNC)
    step = 0
    for shards in (*layouts[1:], layouts[0]):
        for n in names:
            for _ in range(2):
                m = f"{n}-{step}"
                step += 1
                r = e.write(n, [rec(m)])
                acked[n][r.first_seq] = data_of(m)
        e, fs = crash_and_recover(e, fs, "process", engines, shards=shards)
        for n in names:
            got = {s: x.data_json for s, x in read_all(e, n).items()}
            assert got == acked[n], f"{n}: acked records lost/altered at {shards} shards"
    for n in names:
        r = e.write(n, [rec(f"{n}-last")])
        assert r.first_seq > max(acked[n])
        acked[n][r.first_seq] = data_of(f"{n}-last")
    e, fs = crash_and_recover(e, fs, kind, engines, shards=layouts[0])
    for n in names:
        got = {s: x.data_json for s, x in read_all(e, n).items()}
        assert got == acked[n], f"{n}: acked records lost after the last crash"
        assert e.write(n, [rec("probe")]).first_seq > max(acked[n])


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("cls", [Durability.DISK, Durability.FSYNC])
def test_a_shard_rotated_in_an_earlier_layout_never_costs_the_new_writer_its_file(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]], kind: ImageKind, cls: Durability
) -> None:
    """2 shards whose WAL files rotate, crash; 1 shard, crash; 2 shards again. The older
    kept snapshot still names the first period's `shard-01` position (file 2), and the
    start-up snapshot after the change deleted the new `shard-01/wal-…1.log` as absorbed
    while its writer kept appending to the unlinked file: every acked write of that shard
    was gone after the next crash (found by a black-box crash audit)."""
    names = [f"t{i}" for i in range(4)]  # several topic ids: both shards get some
    e = open_engine(fs, 2)
    engines.append((e, fs))
    acked: dict[str, dict[int, bytes]] = {n: {} for n in names}
    for n in names:
        e.put_topic(n, TopicConfig(durability=cls))
    pad = "x" * 2000
    step = 0
    for shards in (1, 2, 2):
        for n in names:
            count = 200 if step == 0 else 3  # the first period rotates every shard's file
            for _ in range(count):
                record = RecordIn.of({"id": f"{n}-{step}", "pad": pad})
                step += 1
                acked[n][e.write(n, [record]).first_seq] = record.data_json
        e, fs = crash_and_recover(e, fs, "process", engines, shards=shards)
        for n in names:
            got = {s: x.data_json for s, x in read_all(e, n).items()}
            lost = sorted(set(acked[n]) - set(got))
            assert not lost, f"{n}: {len(lost)} acked records lost at {shards} shards"
            assert got == acked[n]
    for n in names:
        r = e.write(n, [rec(f"{n}-last")])
        acked[n][r.first_seq] = data_of(f"{n}-last")
    e, fs = crash_and_recover(e, fs, kind, engines, shards=2)
    for n in names:
        got = {s: x.data_json for s, x in read_all(e, n).items()}
        if durable_for(cls, kind):
            assert got == acked[n], f"{n}: acked records lost after the last crash"
        else:  # a power cut may take the unsynced tail of a disk topic, never more
            assert all(acked[n].get(q) == d for q, d in got.items()), f"{n}: altered"


# ---- 8. cap_records counts live records ---------------------------------------------------


def test_disk_cap_keeps_the_newest_cap_records_across_a_crash(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]]
) -> None:
    e = open_engine(fs)
    engines.append((e, fs))
    e.put_topic("c", TopicConfig(durability=Durability.DISK, cap_records=100))
    acked: dict[int, bytes] = {}
    for i in range(15):
        recs = [rec(f"c{i}-{k}") for k in range(10)]
        r = e.write("c", recs)
        for s, x in zip(r.seqs, recs, strict=True):
            acked[s] = x.data_json
    newest = dict(sorted(acked.items())[-100:])
    assert {s: x.data_json for s, x in read_all(e, "c").items()} == newest
    e2, _ = crash_and_recover(e, fs, "process", engines)
    info = e2.get_topic("c")
    got = {s: x.data_json for s, x in read_all(e2, "c").items()}
    assert info.count == len(got) == 100, f"{info.count} live records after the crash"
    assert got == newest


def test_cap_counts_live_records_not_seq_distance(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]]
) -> None:
    """Holes left by deletes never evict a live record (SEMANTICS §4.2 step 2)."""
    e = open_engine(fs)
    engines.append((e, fs))
    e.put_topic("c", TopicConfig(durability=Durability.FSYNC, cap_records=5))
    for i in range(5):
        e.write("c", [rec(f"v{i}", tag="b" if i % 2 else "a")])  # seqs 1..5
    assert e.delete_records("c", match=Selector("Eq", "b")).deleted == 2  # 2, 4 gone
    e.write("c", [rec("v5")])
    e.write("c", [rec("v6")])  # live: 1, 3, 5, 6, 7
    want = {1: "v0", 3: "v2", 5: "v4", 6: "v5", 7: "v6"}
    got = {s: x.data_json for s, x in read_all(e, "c").items()}
    assert got == {s: data_of(m) for s, m in want.items()}
    assert e.get_topic("c").count == 5
    e2, _ = crash_and_recover(e, fs, "power", engines)
    got2 = {s: x.data_json for s, x in read_all(e2, "c").items()}
    assert got2 == {s: data_of(m) for s, m in want.items()}


# ---- found by the stress test (not in the review's list) ----------------------------------


@pytest.mark.parametrize("kind", IMAGES)
def test_records_from_before_an_ephemeral_upgrade_stay_readable(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]], kind: ImageKind
) -> None:
    """Records acked while the topic was ephemeral stay live after an upgrade to fsync;
    sealing later records must not drop their payloads (they are in no segment): reads,
    snapshots and recovery must keep working and never alter a record."""
    e = open_engine(fs, segment_max_events=8, segment_payload_cache=4)
    engines.append((e, fs))
    e.put_topic("c", TopicConfig(durability=Durability.EPHEMERAL))
    written: dict[int, bytes] = {}
    for i in range(5):
        r = e.write("c", [rec(f"e{i}")])
        written[r.first_seq] = data_of(f"e{i}")
    e.put_topic("c", FSYNC)
    acked: dict[int, bytes] = {}
    for i in range(15):
        r = e.write("c", [rec(f"f{i}")])
        acked[r.first_seq] = data_of(f"f{i}")
        if i == 2:
            snapshot(e)
    seal_topic(e, e.topics["c"], force=True)
    live = {s: x.data_json for s, x in read_all(e, "c").items()}
    assert live == {**written, **acked}
    snapshot(e)
    e2, _ = crash_and_recover(e, fs, kind, engines, shards=2)  # the layout change snapshots
    got = {s: x.data_json for s, x in read_all(e2, "c").items()}
    assert {s: got.get(s) for s in acked} == acked
    assert all({**written, **acked}[s] == d for s, d in got.items())
    snapshot(e2)


def test_disk_reservation_survives_a_class_flip_across_a_snapshot(
    fs: FaultFs, engines: list[tuple[Engine, FaultFs]]
) -> None:
    """disk → fsync → snapshot → disk: the HeadWatermark logged in the first disk period
    is behind the checkpoint, so the second disk period must log a fresh reservation
    before its seqs become visible; else a power cut hands acked seqs out again."""
    e = open_engine(fs)
    engines.append((e, fs))
    e.put_topic("x", DISK)
    for i in range(3):
        e.write("x", [rec(f"a{i}")])
    e.put_topic("x", FSYNC)
    snapshot(e)
    for i in range(3):
        e.write("x", [rec(f"b{i}")])
    e.put_topic("x", DISK)
    top = 0
    for i in range(3):
        top = e.write("x", [rec(f"c{i}")]).last_seq
    e2, _ = crash_and_recover(e, fs, "power", engines)
    nxt = e2.write("x", [rec("probe")]).first_seq
    assert nxt > top, f"seq {nxt} handed out again after a power cut (acked up to {top})"
