"""Concurrent stress against an oracle of what was acknowledged.

Several client threads run against one Engine on a FaultFs that injects ~1% EIO on writes
and fsyncs (plus the odd ENOSPC, short write and torn write) on WAL, segment and snapshot
files:

- writers append 1–4 records to `disk`, `fsync` and `memory` topics, some with
  `cap_records`, tagged at random;
- a deleter runs `before_seq` and tag-match deletes;
- two queue workers claim jobs from the `fsync` and `disk` queue topics the writers feed
  (one with durable leases), ack most, nack some and keep a few; a job is never leased to
  two workers at once, an acked job is never claimed again, and a claimed job is a record
  written to that queue (SEMANTICS §10.3–§10.4, §10.8); an acked job is a delete the
  oracle holds the recovered images to, per the queue's class;
- a router mirrors the `disk` topic `s-d` (which the deleter also deletes from) into
  `m-d`: after every check, `m-d` holds copies of records written to `s-d`, in their
  source order, none twice, and a copy of every record live in `s-d` (SEMANTICS §8.4);
- maintenance takes snapshots, writes the queued delete flags of sealed records and seals
  segments, as the server's maintenance pass does;
- an admin creates, reconfigures (class and cap changes, ephemeral/memory → disk/fsync
  upgrades), writes to and drops "churn" topics, and flips one shared topic between `disk`
  and `fsync` and between capped and uncapped while the writers use it.

While the writers are still running, two crash images are taken at one instant: a process
crash (page cache kept) and a power cut (only fsynced data). The live engine is checked
once everything returned; each image is recovered — with another WAL shard count — and
checked against the oracle (`tests/engine/oracle.py`): acked records present per their class
and unaltered, nothing that returned an error or was throttled appears, acked deletes and
drops stick, acked creates and configs survive, caps keep the newest records by live count,
and the next write on every topic gets a seq above every acked (disk/fsync) or recovered
one. The run then continues for another epoch on the process-crash lineage.

Deterministic per seed in its operation choices (thread interleavings vary; the oracle
holds for every interleaving). `SEGLOG_STRESS_SEEDS=N` runs seeds 0..N-1 (default 3).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import pytest

from seglog.core.leases import Claimer
from seglog.engine.engine import Engine
from seglog.engine.maintenance import seal_topic
from seglog.errors import ErrorCode, SeglogError
from seglog.model import Durability, RecordIn, Selector, TopicConfig, TopicType
from seglog.router_model import RouterSpec
from tests.engine.oracle import (
    Control,
    Oracle,
    abandon,
    open_engine,
    read_all,
    snapshot,
    wait_until,
)
from tests.support.faultfs import FaultFs, RandomFaults

SEEDS = int(os.environ.get("SEGLOG_STRESS_SEEDS", "3"))
EPOCHS = int(os.environ.get("SEGLOG_STRESS_EPOCHS", "3"))
WRITERS = 3
ADMIN_OPS = 80
MAINT_OPS = 30
WRITES_AFTER_ADMIN = 30  # each writer keeps going this long before the crash image

F, D, M = Durability.FSYNC, Durability.DISK, Durability.MEMORY
STABLE: dict[str, TopicConfig] = {
    "s-f": TopicConfig(durability=F),
    "s-d": TopicConfig(durability=D),
    "s-m": TopicConfig(durability=M),
    "s-fc": TopicConfig(durability=F, cap_records=12),
    "s-dc": TopicConfig(durability=D, cap_records=12),
    "s-x": TopicConfig(durability=D),  # the admin flips its class and cap
    "q-f": TopicConfig(type=TopicType.QUEUE, durability=F),
    "q-d": TopicConfig(type=TopicType.QUEUE, durability=D, leases_durable=True),
}
QUEUES = ("q-f", "q-d")
QUEUE_WORKERS = 2
CHURN = ("c-0", "c-1")
TAGS = ("a", "b", "c", None)
LAYOUTS = ((1, 2, 1, 2), (2, 3, 2, 1), (3, 1, 2, 3))


def engine(fs: FaultFs, shards: int) -> Engine:
    """Small segments (seals, sealed delete flags) and WAL files that rarely rotate."""
    return open_engine(
        fs, shards, segment_max_events=8, segment_payload_cache=4, wal_file_size=1 << 20
    )


def faults(seed: int, epoch: int) -> RandomFaults:
    return RandomFaults(
        random.Random(seed * 1000 + epoch),
        p_write_eio=0.01,
        p_sync_eio=0.01,
        p_enospc=0.002,
        p_short=0.004,
        p_torn_eio=0.002,
        paths=("/data/wal/", "/data/topics/", "/data/meta/"),
    )


@dataclass
class Run:
    seed: int
    oracle: Oracle
    e: Engine
    stop: threading.Event = field(default_factory=threading.Event)
    progress: dict[str, int] = field(default_factory=dict)
    counter: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Queue jobs: (topic, seq) → the worker leasing it now; → the instant its ack returned.
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    mirrored: dict[int, bytes] = field(default_factory=dict)  # the mirror at the crash
    acked_jobs: dict[tuple[str, int], int] = field(default_factory=dict)

    def payload(self, who: str, k: int, pad: int) -> bytes:
        with self.lock:
            self.counter += 1
            n = self.counter
        return f'{{"w":"{who}","n":{n},"k":{k},"p":"{"x" * pad}"}}'.encode()

    def write(self, who: str, rng: random.Random, name: str, n: int) -> None:
        tags = [rng.choice(TAGS) for _ in range(n)]
        datas = [self.payload(who, k, rng.randint(0, 24)) for k in range(n)]
        o = self.oracle
        w = o.begin_write(name, datas, tags)
        recs = [RecordIn(d, None, None, t) for d, t in zip(datas, tags, strict=True)]
        try:
            res = self.e.write(name, recs, create=False)
        except SeglogError as err:
            if err.code is ErrorCode.THROTTLED:
                o.finish(w, "nothing", repr(err))
            elif err.code is ErrorCode.INTERNAL:
                o.finish(w, "failed", repr(err))
            else:
                o.finish(w, "bug", repr(err))
                o.bug(f"{who}: write to {name} raised {err!r}")
            return
        except Exception as err:
            o.finish(w, "bug", repr(err))
            o.bug(f"{who}: write to {name} raised a raw {type(err).__name__}: {err!r}")
            return
        o.ack_write(w, res.seqs)

    def delete(self, who: str, rng: random.Random, name: str) -> None:
        o = self.oracle
        if rng.random() < 0.2:
            head = self.e.head_of(name)
            before: int | None = max(1, head - rng.randint(4, 30))
            tag = None
        else:
            before, tag = None, rng.choice(TAGS[:3])
        d = o.begin_delete(name, before, tag)
        try:
            self.e.delete_records(
                name, before_seq=before, match=None if tag is None else Selector("Eq", tag)
            )
        except SeglogError as err:
            o.finish(d, "failed" if err.code is not ErrorCode.THROTTLED else "nothing")
            if err.code not in (ErrorCode.INTERNAL, ErrorCode.THROTTLED):
                o.bug(f"{who}: delete on {name} raised {err!r}")
            return
        except Exception as err:
            o.finish(d, "bug")
            o.bug(f"{who}: delete on {name} raised a raw {type(err).__name__}: {err!r}")
            return
        o.finish(d, "acked")

    def claim(self, who: str, rng: random.Random, name: str) -> list[tuple[int, int]]:
        """Claim up to 4 jobs as `who`: their (seq, lease id), checked as they arrive."""
        o = self.oracle
        try:
            res = self.e.queues.claim(name, [Claimer(who, rng.randint(1, 4))], None)
        except SeglogError as err:
            if err.code not in (ErrorCode.INTERNAL, ErrorCode.THROTTLED):
                o.bug(f"{who}: claim on {name} raised {err!r}")
            return []
        except Exception as err:
            o.bug(f"{who}: claim on {name} raised a raw {type(err).__name__}: {err!r}")
            return []
        got: list[tuple[int, int]] = []
        with self.lock:
            for job in res.jobs[0]:
                seq = job.record.seq
                key = (name, seq)
                hit = o.by_data.get(job.record.data_json)
                if hit is None or hit[0].topic != name:
                    o.bug(f"{who}: claimed {name}:{seq}, not a record written there: {job!r}")
                if key in self.held:
                    o.bug(f"{who}: claimed {name}:{seq}, leased to {self.held[key]} already")
                if key in self.acked_jobs:
                    o.bug(f"{who}: claimed {name}:{seq}, acked at {self.acked_jobs[key]}")
                self.held[key] = who
                got.append((seq, job.lease_id))
        return got

    def settle(self, who: str, rng: random.Random, name: str, jobs: list[tuple[int, int]]) -> None:
        """Ack most of `jobs`, nack some, keep the rest leased."""
        r = rng.random()
        if r < 0.1:
            return  # kept: leased until a crash releases it (the clock stands still)
        seqs, fences = [s for s, _ in jobs], [f for _, f in jobs]
        with self.lock:
            for s in seqs:
                del self.held[(name, s)]
        o, q = self.oracle, self.e.queues
        if r < 0.25:
            try:
                q.nack(name, who, seqs, fences, 0)
            except SeglogError as err:
                if err.code not in (ErrorCode.INTERNAL, ErrorCode.THROTTLED):
                    o.bug(f"{who}: nack on {name} raised {err!r}")
            except Exception as err:
                o.bug(f"{who}: nack on {name} raised a raw {type(err).__name__}: {err!r}")
            return
        d = o.begin_delete(name, None, None, frozenset(seqs))
        try:
            res = q.ack(name, who, seqs, fences)
        except SeglogError as err:
            o.finish(d, "failed" if err.code is not ErrorCode.THROTTLED else "nothing")
            if err.code not in (ErrorCode.INTERNAL, ErrorCode.THROTTLED):
                o.bug(f"{who}: ack on {name} raised {err!r}")
            return
        except Exception as err:
            o.finish(d, "bug")
            o.bug(f"{who}: ack on {name} raised a raw {type(err).__name__}: {err!r}")
            return
        end = o.finish_ack(d, res.done)
        with self.lock:
            for s in res.done:
                self.acked_jobs[(name, s)] = end

    def control(self, c: Control, op: Callable[[], object]) -> bool:
        """Run a put_topic / drop_topic recorded as `c`; True if it was acked."""
        o, c_name = self.oracle, c.topic
        try:
            op()
        except SeglogError as err:
            o.finish(c, "failed" if err.code is not ErrorCode.THROTTLED else "nothing")
            if err.code not in (ErrorCode.INTERNAL, ErrorCode.THROTTLED):
                o.bug(f"admin: control op on {c_name} raised {err!r}")
            return False
        except Exception as err:
            o.finish(c, "bug")
            o.bug(f"admin: control op on {c_name} raised a raw {type(err).__name__}: {err!r}")
            return False
        o.finish(c, "acked")
        return True

    def bump(self, who: str) -> None:
        with self.lock:
            self.progress[who] = self.progress.get(who, 0) + 1


def guarded(run: Run, who: str, body: Callable[[], None]) -> threading.Thread:
    def main() -> None:
        try:
            body()
        except BaseException as err:  # a crashed client thread is a finding, not a hang
            run.oracle.bug(f"{who}: thread died with {type(err).__name__}: {err!r}")

    th = threading.Thread(target=main, name=who, daemon=True)
    th.start()
    return th


def writer(run: Run, idx: int) -> None:
    rng = random.Random(run.seed * 7919 + idx * 31 + run.progress.get("epoch", 0))
    names = list(STABLE)
    who = f"w{idx}"
    while not run.stop.is_set():
        run.write(who, rng, rng.choice(names), rng.randint(1, 4))
        run.bump(who)


def deleter(run: Run) -> None:
    rng = random.Random(run.seed * 104729 + run.progress.get("epoch", 0))
    names = list(STABLE)
    while not run.stop.is_set():
        run.delete("del", rng, rng.choice(names))
        run.bump("del")


def queue_worker(run: Run, idx: int) -> None:
    rng = random.Random(run.seed * 6700417 + idx * 17 + run.progress.get("epoch", 0))
    who = f"q{idx}"
    while not run.stop.is_set():
        name = rng.choice(QUEUES)
        jobs = run.claim(who, rng, name)
        if jobs:
            run.settle(who, rng, name, jobs)
        run.bump(who)


def router_worker(run: Run) -> None:
    """Forwards as the server's router worker does (it drains dirty sources every 50 ms),
    so copies are made between snapshots, while the deleter deletes their sources."""
    while not run.stop.is_set():
        try:
            run.e.forwarder.forward_all()
        except SeglogError as err:
            if err.code not in (ErrorCode.INTERNAL, ErrorCode.THROTTLED):
                run.oracle.bug(f"router worker: forwarding raised {err!r}")
        run.bump("fwd")


def maintenance(run: Run) -> None:
    rng = random.Random(run.seed * 15485863 + run.progress.get("epoch", 0))
    e = run.e
    for _ in range(MAINT_OPS):
        try:
            if rng.random() < 0.4:
                snapshot(e)
            else:
                names = sorted(e.topics)
                t = e.topics.get(rng.choice(names)) if names else None
                if t is not None:
                    if t.segments is not None:  # as the maintenance pass does, then seals
                        t.segments.flush_flags(t)
                    seal_topic(e, t, force=rng.random() < 0.5)
        except Exception as err:
            # An injected fault abandons the snapshot/seal (OSError, SeglogError, or the
            # WAL's own error type when the checkpoint mark failed); anything else is a bug.
            if not isinstance(err, (OSError, SeglogError)) and not type(err).__name__.startswith(
                "Wal"
            ):
                run.oracle.bug(f"maint: raised a raw {type(err).__name__}: {err!r}")
        run.bump("maint")


def admin(run: Run, churn_exists: dict[str, bool]) -> None:
    rng = random.Random(run.seed * 2147483647 + run.progress.get("epoch", 0))
    e, o = run.e, run.oracle
    classes = [Durability.EPHEMERAL, M, D, F]
    for _ in range(ADMIN_OPS):
        r = rng.random()
        if r < 0.25:  # flip the shared topic's class / cap under the writers' feet
            cfg = TopicConfig(durability=rng.choice([D, F]), cap_records=rng.choice([0, 0, 10]))
            run.control(o.update("s-x", cfg), partial(e.put_topic, "s-x", cfg))
            continue
        name = rng.choice(CHURN)
        if not churn_exists[name]:
            cfg = TopicConfig(durability=rng.choice(classes), cap_records=rng.choice([0, 6]))
            churn_exists[name] = run.control(o.create(name, cfg), partial(e.put_topic, name, cfg))
            continue
        cur = e.topics[name].config
        stronger = classes[classes.index(cur.durability) + 1 :]
        if r < 0.55 or (r < 0.7 and not stronger):
            run.write("admin", rng, name, rng.randint(1, 3))
        elif r < 0.7:  # upgrade: ephemeral/memory → persistent logs the head (SEMANTICS §3.2)
            cfg = TopicConfig(durability=rng.choice(stronger), cap_records=cur.cap_records)
            run.control(o.update(name, cfg), partial(e.put_topic, name, cfg))
        elif r < 0.8:
            run.delete("admin", rng, name)
        elif run.control(o.update(name, None), partial(e.drop_topic, name)):
            churn_exists[name] = False


def run_epoch(run: Run, churn_exists: dict[str, bool]) -> tuple[FaultFs, FaultFs, int, bool]:
    """Run the clients; take both crash images mid-flight; stop; return them with the
    crash instant and whether any WAL shard latched read-only."""
    run.stop.clear()
    run.progress = {"epoch": run.progress.get("epoch", 0)}
    threads = [guarded(run, f"w{i}", partial(writer, run, i)) for i in range(WRITERS)]
    threads.append(guarded(run, "del", partial(deleter, run)))
    threads.append(guarded(run, "fwd", partial(router_worker, run)))
    threads += [guarded(run, f"q{i}", partial(queue_worker, run, i)) for i in range(QUEUE_WORKERS)]
    bounded = [
        guarded(run, "maint", partial(maintenance, run)),
        guarded(run, "admin", partial(admin, run, churn_exists)),
    ]
    for th in bounded:
        th.join(120)
        assert not th.is_alive(), f"{th.name} hangs"
    base = {f"w{i}": run.progress.get(f"w{i}", 0) for i in range(WRITERS)}
    wait_until(
        lambda: all(run.progress.get(k, 0) >= v + WRITES_AFTER_ADMIN for k, v in base.items()),
        "the writers to make progress",
        timeout_s=120,
    )
    fs = run.e.fs
    assert isinstance(fs, FaultFs)
    with fs._lock:  # both images at one instant
        t = run.oracle.tick()
        proc = fs.process_crash_image()
        power = fs.crash_image("none")
    # The copies published so far (without forwarding): those of records acked before
    # `t` are re-derived at the same seqs from the process image.
    run.mirrored = mirrored_now(run.e)
    assert run.e.wal is not None
    ro = bool(run.e.wal.metrics().read_only)  # latched: then failed writes may reappear
    run.stop.set()
    for th in threads:
        th.join(60)
        assert not th.is_alive(), f"{th.name} hangs"
    return proc, power, t, ro


MIRROR_SOURCE, MIRROR = "s-d", "m-d"


def mirrored_now(e: Engine) -> dict[int, bytes]:
    """The mirror's copies as published now, without forwarding first."""
    out: dict[int, bytes] = {}
    cursor = 0
    while True:
        r = e.read(MIRROR, cursor, limit=1000, max_bytes=8 << 20, wait=False)
        out.update((rec.seq, rec.data_json) for rec in r.records)
        if r.caught_up or r.next_from_seq == cursor:
            return out
        cursor = r.next_from_seq


def copies_kept(oracle: Oracle, e: Engine, before: dict[int, bytes], t: int) -> list[str]:
    """After a process crash at `t`: every copy of a record acked before `t` is back at its
    seq (SEMANTICS §8.4: re-derivation reproduces the dest's seqs; the dest has no other
    writer), also when its source record was deleted after it was forwarded."""
    after = {seq: r.data_json for seq, r in read_all(e, MIRROR).items()}
    problems: list[str] = []
    for seq, data in sorted(before.items()):
        w, _k = oracle.by_data[data]
        if w.outcome == "acked" and w.end < t and after.get(seq) != data:
            got = after.get(seq)
            problems.append(f"{MIRROR}:{seq}: copy {data!r} before the crash, {got!r} after")
    return problems


def mirror_problems(oracle: Oracle, e: Engine, kind: str) -> list[str]:
    """The router's dest against its source (reading the dest forwards first, §8.5)."""
    src = {r.data_json for r in read_all(e, MIRROR_SOURCE).values()}
    copies = read_all(e, MIRROR)
    problems: list[str] = []
    seen: set[bytes] = set()
    last = 0
    for seq, r in sorted(copies.items()):
        hit = oracle.by_data.get(r.data_json)
        if hit is None or hit[0].topic != MIRROR_SOURCE:
            problems.append(f"{MIRROR}:{seq} ({kind}): not a record of {MIRROR_SOURCE}")
            continue
        if r.data_json in seen:
            problems.append(f"{MIRROR}:{seq} ({kind}): a second copy of {r.data_json!r}")
        seen.add(r.data_json)
        w, k = hit
        if w.seqs:
            if w.seqs[k] <= last:
                problems.append(f"{MIRROR}:{seq} ({kind}): source seq {w.seqs[k]} after {last}")
            last = w.seqs[k]
    missing = src - seen
    if missing:
        problems.append(f"{MIRROR} ({kind}): no copy of {len(missing)} live source records")
    return problems


def refused_after_read_only(err: Exception, ro: bool) -> bool:
    """A shard that could not erase a failed batch latched read-only (STORAGE §3.5). If
    the erase itself was torn, zeros cover the start of the failed range and complete,
    never-acked frames follow: by §3.1 that is corruption and the engine must refuse to
    start (an operator repairs). Spec-conform only after such a latch."""
    return ro and type(err).__name__ == "WalCorruptionError"


def stress(seed: int) -> dict[str, int]:
    oracle = Oracle()
    layout = LAYOUTS[seed % len(LAYOUTS)]
    fs = FaultFs()
    e = engine(fs, layout[0])
    run = Run(seed, oracle, e)
    for name, cfg in STABLE.items():
        assert run.control(oracle.create(name, cfg), partial(e.put_topic, name, cfg))
    e.put_topic(MIRROR, TopicConfig(durability=D))  # only the router writes it
    e.put_router(RouterSpec("mirror", MIRROR_SOURCE, MIRROR))
    churn_exists = dict.fromkeys(CHURN, False)
    injected: dict[str, int] = {}
    problems: list[str] = []
    for epoch in range(EPOCHS):
        run.progress["epoch"] = epoch
        fs.random_faults = rf = faults(seed, epoch)
        proc, power, t, ro = run_epoch(run, churn_exists)
        fs.random_faults = None
        for k, v in rf.injected.items():
            injected[k] = injected.get(k, 0) + v
        problems += [
            f"[epoch {epoch} live] {p}" for p in oracle.check(run.e, oracle.tick(), "live")
        ]
        if not ro:
            problems += [f"[epoch {epoch}] {p}" for p in mirror_problems(oracle, run.e, "live")]
        abandon(run.e, fs)
        shards = layout[epoch + 1]
        # power cut: a dead-end branch (checked, probed, closed)
        try:
            ep = engine(power, shards)
        except Exception as err:
            if not refused_after_read_only(err, ro):
                problems.append(f"[epoch {epoch} power] recovery failed: {err!r}")
        else:
            problems += [f"[epoch {epoch} power] {p}" for p in oracle.check(ep, t, "power", ro)]
            if not ro:
                problems += [f"[epoch {epoch}] {p}" for p in mirror_problems(oracle, ep, "power")]
            problems += [f"[epoch {epoch} power] {p}" for p in oracle.probe(ep, t, ro, False)]
            abandon(ep, power)
        # process crash: the lineage the run continues on
        try:
            en = engine(proc, shards)
        except Exception as err:
            if not refused_after_read_only(err, ro):
                problems.append(f"[epoch {epoch} process] recovery failed: {err!r}")
            injected["refused_after_read_only"] = 1
            break  # this lineage needs an operator's repair: the run ends here
        problems += [f"[epoch {epoch} process] {p}" for p in oracle.check(en, t, "process", ro)]
        if not ro:
            problems += [f"[epoch {epoch}] {p}" for p in mirror_problems(oracle, en, "process")]
            problems += [f"[epoch {epoch}] {p}" for p in copies_kept(oracle, en, run.mirrored, t)]
        oracle.resolve(en, t, ro)
        # The lineage goes on from the image: leases are the recovered ones (none that
        # the workers know of), and only acks that returned before `t` happened in it.
        run.held.clear()
        run.acked_jobs = {k: end for k, end in run.acked_jobs.items() if end < t}
        problems += [f"[epoch {epoch} process] {p}" for p in oracle.probe(en, t, ro, record=True)]
        for name in CHURN:
            churn_exists[name] = name in en.topics
        if problems or oracle.bugs:
            abandon(en, proc)
            break
        run.e, fs = en, proc
    else:
        abandon(run.e, fs)
    report = problems + [f"[client] {b}" for b in oracle.bugs]
    assert not report, f"seed {seed}: {len(report)} violations:\n" + "\n".join(report[:40])
    return injected


@pytest.mark.parametrize("seed", range(SEEDS))
def test_concurrent_faults_and_crashes_keep_every_acked_write(seed: int) -> None:
    injected = stress(seed)
    assert sum(injected.values()) > 0, "the run injected no faults"
