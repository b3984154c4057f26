"""Fault injection through the filesystem seam.

1. A small durable workload is stopped after every single mutating filesystem call in turn
   (the world stops there); what a power cut would leave is recovered, asserting
   acked-durable ⊆ recovered ⊆ ever-written, dense increasing seqs, and that acked deletes,
   floors and configs are intact.
2. An fsync that fails with EIO is never reported as success to a writer.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import seal_topic
from seglog.errors import ErrorCode, SeglogError
from seglog.model import Durability, RecordIn, Selector, TopicConfig
from seglog.storage.wal_commit import WalError
from tests.support.faultfs import Crash, FaultFs

ROOT = Path("/data")


def options() -> EngineOptions:
    return EngineOptions(
        data_dir=ROOT,
        wal_shards=2,
        wal_file_size=4096,
        segment_max_events=3,
        segment_payload_cache=2,
    )


@dataclass
class Ledger:
    """What the workload was told: acked records per topic, everything ever attempted."""

    acked: dict[str, dict[int, bytes]] = field(default_factory=dict)
    written: dict[str, dict[int, set[bytes]]] = field(default_factory=dict)
    attempted: dict[str, list[bytes]] = field(default_factory=dict)
    deleted: dict[str, set[int]] = field(default_factory=dict)
    maybe_deleted: dict[str, set[int]] = field(default_factory=dict)
    tags: dict[str, dict[int, str]] = field(default_factory=dict)
    configs: dict[str, TopicConfig] = field(default_factory=dict)


def workload(e: Engine, ledger: Ledger, clock: ManualClock, cls: Durability) -> None:
    cfg_f = TopicConfig(durability=cls)
    cfg_c = TopicConfig(durability=cls, cap_records=4)
    for name, cfg in (("f", cfg_f), ("c", cfg_c)):
        e.put_topic(name, cfg)
        ledger.configs[name] = cfg
    for i in range(6):
        for name in ("f", "c"):
            recs = [
                RecordIn.of({"t": name, "i": i, "k": k}, tag=f"g{(i + k) % 3}") for k in range(2)
            ]
            ledger.attempted.setdefault(name, []).extend(r.data_json for r in recs)
            res = e.write(name, recs)
            for s, r in zip(res.seqs, recs, strict=True):
                ledger.acked.setdefault(name, {})[s] = r.data_json
                ledger.tags.setdefault(name, {})[s] = r.tag or ""
        if i == 2:
            doomed = {s for s, tag in ledger.tags["f"].items() if tag == "g1"}
            ledger.maybe_deleted["f"] = doomed  # in flight: may or may not survive a crash
            e.delete_records("f", match=Selector("Eq", "g1"))
            ledger.deleted["f"] = doomed
            seal_topic(e, e.topics["f"])
        if i == 3:
            e.snapshot()
        clock.advance(10)


def check(
    recovered: Engine, ledger: Ledger, may_lose_acked: bool = False, probe: bool = False
) -> None:
    """`may_lose_acked`: a `disk` topic after a power cut may lose acked records whose frames
    were never fsynced — but never alter one, and never hand an acked seq out again (`probe`
    writes one record per topic to check that; the image is not reused afterwards)."""
    for name, cfg in ledger.configs.items():
        t = recovered.topics.get(name)
        acked = ledger.acked.get(name, {})
        if t is None:
            assert not acked, f"topic {name} lost with acked records"
            continue
        assert t.config == cfg
        got: dict[int, bytes] = {}
        cursor = 0
        while True:
            r = recovered.read(name, cursor, limit=1000)
            for rec in r.records:
                assert rec.seq > cursor and rec.seq not in got
                got[rec.seq] = rec.data_json
            cursor = r.next_from_seq
            if r.caught_up:
                break
        # recovered ⊆ ever written
        attempted = set(ledger.attempted.get(name, []))
        for s, data in got.items():
            assert data in attempted, f"{name}:{s} fabricated"
            if s in acked:
                assert acked[s] == data
        # acked-durable ⊆ recovered, minus voluntary deletes and cap eviction
        earliest = t.earliest()
        for s, data in acked.items():
            if s < earliest:
                continue
            if s in ledger.deleted.get(name, set()):
                # A disk-class delete is a buffered frame: a power cut may drop it too.
                assert may_lose_acked or s not in got, f"acked delete of {name}:{s} undone"
                continue
            if s in ledger.maybe_deleted.get(name, set()) and s not in got:
                continue
            if may_lose_acked and s not in got:
                continue
            assert got.get(s) == data, f"acked {name}:{s} lost"
        if name == "c":
            # The cap counts live records: exactly the newest 4 stay (holes — reservation
            # padding after a crash, failed writes — never take a live record's place).
            assert t.count == len(got) <= 4
            if not may_lose_acked:
                assert len(got) == min(4, len(set(got) | set(acked))), sorted(got)
        if probe:  # no acked seq is ever handed out again (SEMANTICS §3.1–§3.2)
            top = max(acked, default=0)
            assert recovered.write(name, [RecordIn.of("probe")]).first_seq > top


def run_until_crash(
    crash_at: int | None, cls: Durability = Durability.FSYNC, on: str = "main"
) -> tuple[FaultFs, Ledger, int]:
    """The workload until the world stops at mutating call `crash_at`, run `on` the main
    thread or a worker: a worker's waits write the WAL queue themselves
    (`WalShard.commit_here`), the main thread's leave it to the WAL writer."""
    fs = FaultFs()
    clock = ManualClock()
    ledger = Ledger()
    e = Engine(options(), fs=fs, clock=clock)
    if crash_at is not None:
        fs.crash_after(crash_at)

    def run() -> None:
        try:
            e.open()
            workload(e, ledger, clock, cls)
            e.close()
        except (Crash, SeglogError, WalError):
            pass  # the world stopped here; whatever was acked before must survive

    try:
        if on == "main":
            run()
        else:
            th = threading.Thread(target=run)
            th.start()
            th.join(60)
            assert not th.is_alive(), "the workload hangs"
    finally:
        if e.wal is not None:
            fs.crashed = True  # nothing more reaches the disk
            e.wal.close()
    return fs, ledger, fs.mutations


def recover(fs: FaultFs) -> Engine:
    e = Engine(options(), fs=fs, clock=ManualClock())
    e.open()
    return e


def test_clean_run_then_recover() -> None:
    fs, ledger, total = run_until_crash(None)
    assert total > 50
    e = recover(fs.crash_image())
    check(e, ledger)
    e.close()


@pytest.mark.parametrize("on", ["main", "worker"])
@pytest.mark.parametrize("cls", [Durability.FSYNC, Durability.DISK])
def test_crash_after_every_mutating_call(cls: Durability, on: str) -> None:
    """Both crash images after every mutating call, for both persistent classes: a power cut
    (only what was fsynced, or a random prefix of the unsynced writes) and a process crash
    (the page cache survives: every acked `disk` record too). Deletes, seals and a snapshot
    are in flight at some of the crash points."""
    _fs, _ledger, total = run_until_crash(None, cls, on)
    rng = random.Random(7)
    for n in range(1, total + 1):
        fs, ledger, _ = run_until_crash(n, cls, on)
        images = [
            ("none", fs.crash_image("none"), cls is Durability.DISK),
            ("random", fs.crash_image("random", rng), cls is Durability.DISK),
            ("process", fs.process_crash_image(), False),
        ]
        for keep, img, lenient in images:
            e = recover(img)
            try:
                check(e, ledger, may_lose_acked=lenient)
            except AssertionError as err:
                raise AssertionError(f"{cls}: crash after call {n} ({keep}): {err}") from err
            # recovery is idempotent: a second recovery of the recovered image agrees
            e.close(snapshot=False)
            again = recover(img.crash_image("none"))
            check(again, ledger, may_lose_acked=lenient, probe=True)
            again.close(snapshot=False)


@pytest.mark.parametrize("fail_sync", [3, 6, 9])
def test_failed_fsync_is_never_an_ack(fail_sync: int) -> None:
    fs = FaultFs()
    e = Engine(options(), fs=fs, clock=ManualClock())
    e.open()
    e.put_topic("f", TopicConfig(durability=Durability.FSYNC))
    fs.fail_syncs = {fs.syncs + fail_sync - 2}
    acked: dict[int, bytes] = {}
    failures = 0
    for i in range(8):
        rec = RecordIn.of({"i": i})
        try:
            res = e.write("f", [rec])
        except SeglogError as err:
            assert err.code is ErrorCode.INTERNAL
            failures += 1
            continue
        acked[res.seqs[0]] = rec.data_json
    assert failures == 1
    # The failed write is not visible and its seq stays a hole (SEMANTICS §3.1): the next
    # write was not handed it again, so the acked seqs skip exactly one.
    seqs = [r.seq for r in e.read("f", 0).records]
    assert seqs == sorted(acked)
    assert len(acked) == 7 and seqs[-1] == 8
    hole = (set(range(1, 9)) - set(seqs)).pop()
    e.close()
    e2 = recover(fs.crash_image())
    got = {r.seq: r.data_json for r in e2.read("f", 0).records}
    assert got == acked and hole not in got
    assert e2.write("f", [RecordIn.of({"after": 1})]).seqs == [9]
    e2.close()
