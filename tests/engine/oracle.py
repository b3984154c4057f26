"""Shared helpers for the fault/crash tests (test_regressions, test_stress, test_model).

- Engines on a `FaultFs` rooted at `/data`, crash images of both kinds: a *process* crash
  (the page cache survives: `FaultFs.process_crash_image`) and a *power* cut (only what was
  fsynced: `crash_image("none")`), and a way to abandon the crashed engine without letting
  it touch the disk again.
- Deterministic fault plumbing on top of FaultFs's hooks: hold the write that carries a
  marker, fail the write (or the fsync after the write) that carries a marker, freeze all
  writes after a commit has failed (so a repair done *after* the error was reported cannot
  hide a bug: STORAGE §3.5 wants the failed bytes zeroed *before* the handle fails).
- `Oracle`: what the clients of a concurrent run were told (acks, failures, deletes, topic
  control), with a logical clock, and the checks a recovered engine must pass against it
  (SEMANTICS §2.2, §3.1–§3.2, §4.2, §7; STORAGE §3.5, §7).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from seglog.model import Durability, Record, RecordIn, TopicConfig
from tests.support.faultfs import Crash, FaultFs, WriteFault

ROOT = Path("/data")
ImageKind = Literal["process", "power"]
IMAGES: tuple[ImageKind, ...] = ("process", "power")
HOOK_TIMEOUT_S = 10.0  # safety net only: a held write is always released explicitly


# ---- engines and crashes -------------------------------------------------------------------


WAL_FILE_SIZE = 256 << 10  # FaultFs keeps files in memory: no 64 MiB preallocations


def options(shards: int = 1, **kw: int) -> EngineOptions:
    kw.setdefault("wal_file_size", WAL_FILE_SIZE)
    return EngineOptions(data_dir=ROOT, wal_shards=shards, **kw)  # type: ignore[arg-type]


def open_engine(
    fs: FaultFs, shards: int = 1, *, clock: ManualClock | None = None, **kw: int
) -> Engine:
    e = Engine(options(shards, **kw), fs=fs, clock=clock if clock is not None else ManualClock())
    e.open()
    return e


def snapshot(e: Engine) -> int:
    """Take a snapshot now (STORAGE §5.3)."""
    return e.snapshot()


def image(fs: FaultFs, kind: ImageKind) -> FaultFs:
    """What the disk holds after a crash of `kind` right now."""
    return fs.process_crash_image() if kind == "process" else fs.crash_image("none")


def abandon(e: Engine, fs: FaultFs) -> None:
    """Stop a crashed engine's threads; nothing more reaches `fs` (its images are taken)."""
    fs.before_write = None
    fs.write_gate = None
    fs.crashed = True
    try:
        e.close(snapshot=False)
    except (Exception, Crash):
        pass


def reopen_after_crash(
    e: Engine, fs: FaultFs, clock: ManualClock, kind: ImageKind = "process"
) -> Engine:
    """Crash `e` (an image of `kind` taken now), then recover an engine from the image."""
    img = image(fs, kind)
    abandon(e, fs)
    return open_engine(img, clock=clock)


def read_all(e: Engine, name: str) -> dict[int, Record]:
    """Every record a reader sees from the start, checking seqs strictly increase."""
    got: dict[int, Record] = {}
    cursor = 0
    last = 0
    for _ in range(100_000):
        r = e.read(name, cursor, limit=1000, max_bytes=8 << 20)
        for rec in r.records:
            assert rec.seq > last, f"{name}: seq {rec.seq} after {last} (not increasing)"
            last = rec.seq
            got[rec.seq] = rec
        if r.next_from_seq == cursor and r.caught_up:
            break
        cursor = r.next_from_seq
        if r.caught_up:
            break
    return got


# ---- deterministic fault plumbing ------------------------------------------------------------


class Hooks:
    """One multiplexer per FaultFs for `before_write`, `write_fault` and `sync_fault`:
    tests register small one-shot rules on it."""

    def __init__(self, fs: FaultFs) -> None:
        self.fs = fs
        self._lock = threading.Lock()
        self.gates: list[Gate] = []
        self.write_rules: list[Callable[[Path, bytes], WriteFault | None]] = []
        self.sync_rules: list[Callable[[Path], int | None]] = []
        self.frozen: threading.Event | None = None  # set = not frozen
        fs.before_write = self._before
        fs.write_fault = self._write_fault
        fs.sync_fault = self._sync_fault

    def _before(self, path: Path, offset: int, data: bytes) -> None:
        for g in list(self.gates):
            g.check(data)
        frozen = self.frozen
        if frozen is not None:
            frozen.wait(HOOK_TIMEOUT_S)

    def _write_fault(self, path: Path, offset: int, data: bytes) -> WriteFault | None:
        for rule in list(self.write_rules):
            fault = rule(path, data)
            if fault is not None:
                return fault
        return None

    def _sync_fault(self, path: Path) -> int | None:
        for rule in list(self.sync_rules):
            code = rule(path)
            if code is not None:
                return code
        return None

    # -- rules --
    def hold(self, marker: bytes) -> Gate:
        """Hold the first write whose bytes contain `marker` until `Gate.release`."""
        g = Gate(marker)
        self.gates.append(g)
        return g

    def fail_write(self, marker: bytes, fault: WriteFault | None = None) -> OneShot:
        """Fail the first write whose bytes contain `marker` (default: EIO, nothing written)."""
        shot = OneShot()

        def rule(path: Path, data: bytes) -> WriteFault | None:
            if marker in data and shot.fire():
                return fault if fault is not None else WriteFault()
            return None

        self.write_rules.append(rule)
        return shot

    def fail_sync_after(self, marker: bytes, errno_: int = 5) -> OneShot:
        """Fail the first fsync of the file that received the write carrying `marker`."""
        shot = OneShot()
        armed: list[Path] = []

        def wrule(path: Path, data: bytes) -> WriteFault | None:
            if marker in data and not armed:
                armed.append(path)
            return None

        def srule(path: Path) -> int | None:
            if armed and path == armed[0] and shot.fire():
                return errno_
            return None

        self.write_rules.append(wrule)
        self.sync_rules.append(srule)
        return shot

    def fail_path_write(self, pred: Callable[[Path, bytes], bool], fault: WriteFault) -> OneShot:
        """Fail the first write for which `pred(path, data)` holds."""
        shot = OneShot()

        def rule(path: Path, data: bytes) -> WriteFault | None:
            if pred(path, data) and shot.fire():
                return fault
            return None

        self.write_rules.append(rule)
        return shot

    def freeze(self) -> None:
        """From now on every write waits (outside the fs lock) until `thaw`."""
        self.frozen = threading.Event()

    def thaw(self) -> None:
        frozen, self.frozen = self.frozen, None
        if frozen is not None:
            frozen.set()


class OneShot:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.fired = 0

    def fire(self) -> bool:
        with self._lock:
            if self.fired:
                return False
            self.fired = 1
            return True


class Gate:
    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.held = threading.Event()
        self._release = threading.Event()
        self._used = False
        self._lock = threading.Lock()

    def check(self, data: bytes) -> None:
        with self._lock:
            hit = not self._used and self.marker in data
            if hit:
                self._used = True
        if hit:
            self.held.set()
            self._release.wait(HOOK_TIMEOUT_S)

    def wait_held(self) -> None:
        assert self.held.wait(HOOK_TIMEOUT_S), f"the write carrying {self.marker!r} never came"

    def release(self) -> None:
        self._release.set()


def wait_until(pred: Callable[[], bool], what: str, timeout_s: float = HOOK_TIMEOUT_S) -> None:
    """Poll a condition that another thread is about to make true (synchronization only;
    never a correctness-relevant sleep)."""
    ev = threading.Event()
    waited = 0.0
    while not pred():
        ev.wait(0.001)
        waited += 0.001
        assert waited < timeout_s, f"timed out waiting for {what}"


# ---- the oracle of a concurrent run ----------------------------------------------------------

RANK = {
    Durability.EPHEMERAL: 0,
    Durability.MEMORY: 1,
    Durability.DISK: 2,
    Durability.FSYNC: 3,
}
CheckKind = Literal["live", "process", "power"]
# pending: not returned yet; nothing: rejected before anything was written (throttled);
# bug: a raw exception escaped (outcome unknown); vanished: not in the recovered lineage
# (may still appear, unverifiable); phantom: started after the crash instant of the lineage
# (must never appear).
Outcome = Literal["pending", "acked", "failed", "nothing", "bug", "vanished", "phantom"]


@dataclass(eq=False)
class Write:
    uid: int
    topic: str
    inst: int
    datas: list[bytes]
    tags: list[str | None]
    start: int
    end: int = -1
    outcome: Outcome = "pending"
    seqs: list[int] = field(default_factory=list)
    error: str = ""
    durable: bool = False  # in the lineage's disk image as a disk/fsync record: must stay
    # Records of an outcome-unknown write that did not come back (a write that failed
    # while the WAL latched read-only may reappear in part: only its complete frames).
    absent: set[int] = field(default_factory=set)


@dataclass(eq=False)
class Delete:
    topic: str
    inst: int
    before_seq: int | None
    tag: str | None
    start: int
    end: int = -1
    outcome: Outcome = "pending"
    # An explicit-seq delete (a queue ack): only these seqs; once the ack returns, only
    # those it settled (its `skipped` ones were not its to delete).
    seqs: frozenset[int] | None = None


@dataclass(eq=False)
class Control:
    """A put_topic (create or update) or, with `config=None`, a drop."""

    topic: str
    inst: int
    config: TopicConfig | None
    start: int
    end: int = -1
    outcome: Outcome = "pending"


@dataclass(eq=False)
class Instance:
    name: str
    inst: int
    controls: list[Control] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    by_seq: dict[int, Write] = field(default_factory=dict)  # acked seq → its write


class Oracle:
    """Thread-safe ledger of what clients were told, on a logical clock (`tick`), and the
    checks an engine (live, or recovered from a crash image taken at tick `t`) must pass.

    Classification at a crash instant `t`: an operation whose result was recorded before
    `t` had that result before the image was taken; anything that started before `t` and
    ended after it is outcome-unknown; anything that started after it is not in the image.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tick = 0
        self._uid = 0
        self.instances: dict[str, list[Instance]] = {}
        self.by_data: dict[bytes, tuple[Write, int]] = {}
        self.bugs: list[str] = []

    def tick(self) -> int:
        with self._lock:
            self._tick += 1
            return self._tick

    def bug(self, msg: str) -> None:
        with self._lock:
            self.bugs.append(msg)

    # ---- recording ----------------------------------------------------------------------
    def create(self, name: str, config: TopicConfig) -> Control:
        with self._lock:
            lst = self.instances.setdefault(name, [])
            inst = Instance(name, len(lst))
            lst.append(inst)
            self._tick += 1
            c = Control(name, inst.inst, config, self._tick)
            inst.controls.append(c)
            return c

    def update(self, name: str, config: TopicConfig | None) -> Control:
        with self._lock:
            inst = self.instances[name][-1]
            self._tick += 1
            c = Control(name, inst.inst, config, self._tick)
            inst.controls.append(c)
            return c

    def finish(self, op: Write | Delete | Control, outcome: Outcome, error: str = "") -> None:
        with self._lock:
            self._tick += 1
            op.end = self._tick
            op.outcome = outcome
            if isinstance(op, Write):
                op.error = error

    def begin_write(self, name: str, datas: list[bytes], tags: list[str | None]) -> Write:
        with self._lock:
            self._tick += 1
            self._uid += 1
            inst = self.instances[name][-1]
            w = Write(self._uid, name, inst.inst, datas, tags, self._tick)
            inst.writes.append(w)
            for i, d in enumerate(datas):
                assert d not in self.by_data, "payloads must be unique"
                self.by_data[d] = (w, i)
            return w

    def ack_write(self, w: Write, seqs: list[int]) -> None:
        with self._lock:
            self._tick += 1
            w.end = self._tick
            w.outcome = "acked"
            w.seqs = list(seqs)
            if len(seqs) != len(w.datas) or seqs != list(range(seqs[0], seqs[0] + len(seqs))):
                self.bugs.append(f"{w.topic}: write {w.uid} got seqs {seqs} for {len(w.datas)}")
            self._claim_seqs(self.instances[w.topic][w.inst], w)

    def _claim_seqs(self, inst: Instance, w: Write) -> None:
        for k, s in enumerate(w.seqs):
            if k in w.absent:
                continue
            other = inst.by_seq.get(s)
            if other is not None and other is not w:
                self.bugs.append(
                    f"{w.topic}#{w.inst}: seq {s} acked to write {other.uid} and again to "
                    f"write {w.uid} (a seq handed to two acked writes)"
                )
            inst.by_seq[s] = w

    def begin_delete(
        self, name: str, before_seq: int | None, tag: str | None, seqs: frozenset[int] | None = None
    ) -> Delete:
        with self._lock:
            self._tick += 1
            inst = self.instances[name][-1]
            d = Delete(name, inst.inst, before_seq, tag, self._tick, seqs=seqs)
            inst.deletes.append(d)
            return d

    def finish_ack(self, d: Delete, done: list[int]) -> int:
        """An ack returned: it deleted `done` (its other seqs were skipped). Returns the
        instant it ended."""
        with self._lock:
            d.seqs = frozenset(done)
            self._tick += 1
            d.end = self._tick
            d.outcome = "acked"
            return d.end

    # ---- interpretation at an instant -----------------------------------------------------
    @staticmethod
    def configs_during(inst: Instance, lo: int, hi: int) -> list[TopicConfig]:
        """Configs possibly in effect at some instant of [lo, hi]: the one settled at `lo`
        and every change that may have applied meanwhile."""
        settled: TopicConfig | None = None
        out: list[TopicConfig] = []
        for c in inst.controls:
            if c.config is None or c.outcome in ("phantom", "nothing") or c.start > hi:
                continue
            if c.end != -1 and c.end < lo:
                if c.outcome == "acked":
                    settled = c.config
                elif c.outcome != "failed":
                    out.append(c.config)
            elif c.outcome != "failed":
                out.append(c.config)
        if settled is not None:
            out.append(settled)
        return out

    def rank(self, w: Write, t: int) -> int:
        """The weakest class possibly in effect while the write ran, weakened further by a
        later change to memory/ephemeral before `t` (such records may then vanish)."""
        inst = self.instances[w.topic][w.inst]
        end = w.end if w.end != -1 else t
        r = min((RANK[c.durability] for c in self.configs_during(inst, w.start, end)), default=0)
        later = [RANK[c.durability] for c in self.configs_during(inst, end, t)]
        return min([r, *[x for x in later if x <= 1]])

    def min_cap(self, inst: Instance, lo: int, t: int) -> int:
        caps = [c.cap_records for c in self.configs_during(inst, lo, t) if c.cap_records > 0]
        return min(caps, default=0)

    def delete_status(
        self, inst: Instance, w: Write, k: int, t: int, kind: CheckKind
    ) -> Literal["no", "maybe", "yes"]:
        """Was record k of acked write w removed by a delete, as of instant t? A delete
        that ended before the write started was ordered before its seqs existed."""
        seq, tag = w.seqs[k], w.tags[k]
        status: Literal["no", "maybe", "yes"] = "no"
        for d in inst.deletes:
            if d.start > t or d.outcome in ("phantom", "nothing"):
                continue
            hits = (
                (d.tag is None or d.tag == tag)
                and (d.before_seq is None or seq < d.before_seq)
                and (d.seqs is None or seq in d.seqs)
            )
            if not hits or (d.end != -1 and d.end < w.start):
                continue
            definite = (
                d.outcome == "acked"
                and d.end < t
                and d.start > w.end
                and (kind != "power" or self._all_fsync(inst, d.start, d.end))
            )
            if definite:
                return "yes"
            status = "maybe"
        return status

    def _all_fsync(self, inst: Instance, lo: int, hi: int) -> bool:
        cfgs = self.configs_during(inst, lo, hi)
        return bool(cfgs) and all(c.durability is Durability.FSYNC for c in cfgs)

    def expected(
        self, name: str, t: int, ro: bool
    ) -> tuple[Instance | None, TopicConfig | None, bool]:
        """(instance, config) that must exist at `t` (None: must not exist), and whether
        that is certain (a failed control change is not applied, unless the WAL latched
        read-only: then its frame may reappear)."""
        inst: Instance | None = None
        cfg: TopicConfig | None = None
        certain = True
        for instance in self.instances.get(name, []):
            for c in instance.controls:
                if c.start > t or c.outcome in ("phantom", "nothing"):
                    continue
                if c.outcome == "acked" and c.end < t:
                    inst, cfg = (None, None) if c.config is None else (instance, c.config)
                elif c.outcome == "failed" and c.end < t and not ro:
                    continue
                else:
                    certain = False
        return inst, cfg, certain

    # ---- checks ---------------------------------------------------------------------------
    def check(self, e: Engine, t: int, kind: CheckKind, ro: bool = False) -> list[str]:
        """Everything an engine must satisfy at `t` (live: now, all clients returned)."""
        problems: list[str] = []
        with self._lock:
            for name in sorted(self.instances):
                inst, cfg, certain = self.expected(name, t, ro and kind != "live")
                exists = name in e.topics
                if certain and inst is None and exists:
                    problems.append(f"{name}: a dropped (or never created) topic exists ({kind})")
                if certain and inst is not None and not exists:
                    problems.append(f"{name}: an acked topic is missing ({kind})")
                if not exists:
                    continue
                if certain and cfg is not None and e.topics[name].config != cfg:
                    problems.append(
                        f"{name}: config {e.topics[name].config} != acked {cfg} ({kind})"
                    )
                try:
                    got = read_all(e, name)
                except Exception as err:
                    problems.append(f"{name}: reading the topic failed ({kind}): {err!r}")
                    continue
                self._check_present(name, inst if certain else None, got, t, kind, ro, problems)
                if inst is not None and certain:
                    self._check_required(inst, cfg, got, t, kind, ro, problems)
        return problems

    def _check_present(
        self,
        name: str,
        inst: Instance | None,
        got: dict[int, Record],
        t: int,
        kind: CheckKind,
        ro: bool,
        problems: list[str],
    ) -> None:
        for seq, r in got.items():
            hit = self.by_data.get(r.data_json)
            where = f"{name}:{seq} ({kind})"
            if hit is None:
                problems.append(f"{where}: fabricated record {r.data_json!r}")
                continue
            w, k = hit
            if w.topic != name or (inst is not None and w.inst != inst.inst):
                problems.append(f"{where}: record of {w.topic}#{w.inst} write {w.uid}")
                continue
            if r.tag != w.tags[k]:
                problems.append(f"{where}: tag {r.tag!r}, written {w.tags[k]!r}")
            owner = self.instances[w.topic][w.inst]
            if w.outcome == "phantom" or w.start > t:
                problems.append(f"{where}: write {w.uid} began after the crash instant")
            elif w.outcome == "acked" and w.end < t:
                if w.seqs[k] != seq:
                    problems.append(f"{where}: acked at seq {w.seqs[k]} (write {w.uid})")
                elif self.delete_status(owner, w, k, t, kind) == "yes":
                    problems.append(f"{where}: an acked delete was undone (write {w.uid})")
            elif w.outcome == "nothing" and w.end < t:
                problems.append(f"{where}: a throttled write appeared (write {w.uid})")
            elif w.outcome == "failed" and w.end < t and (kind == "live" or not ro):
                problems.append(
                    f"{where}: write {w.uid} returned an error ({w.error}) but appeared"
                )
            else:
                other = owner.by_seq.get(seq)
                if other is not None and other is not w:
                    problems.append(
                        f"{where}: holds unacked write {w.uid}, but seq was acked to {other.uid}"
                    )

    def _check_required(
        self,
        inst: Instance,
        cfg: TopicConfig | None,
        got: dict[int, Record],
        t: int,
        kind: CheckKind,
        ro: bool,
        problems: list[str],
    ) -> None:
        name = inst.name
        cap = cfg.cap_records if cfg is not None else 0
        if cap and len(got) > cap:
            problems.append(f"{name}: {len(got)} live records above cap_records {cap} ({kind})")
        acked = [w for w in inst.writes if w.outcome == "acked" and w.end < t]
        newer_seqs = sorted(s for w in acked for s in w.seqs)
        # Writes of unknown outcome may have published newer records that evicted older
        # ones through the cap: in flight at `t`, a raw exception, or a failure while the
        # WAL latched read-only (its frames may come back after a crash).
        settled = ("acked", "nothing") if ro and kind != "live" else ("acked", "failed", "nothing")
        unknown = sum(
            len(w.datas)
            for w in inst.writes
            if w.start < t and not (w.end < t and w.outcome in settled) and w.outcome != "phantom"
        )
        for w in acked:
            r = self.rank(w, t)
            need = (
                kind == "live"
                or w.durable
                or (kind == "process" and r >= 2)
                or (kind == "power" and r == 3)
            )
            if not need:
                continue
            for k, seq in enumerate(w.seqs):
                if k in w.absent or self.delete_status(inst, w, k, t, kind) != "no":
                    continue
                c = self.min_cap(inst, w.start, t)
                if c:
                    newer = len(newer_seqs) - bisect_right(newer_seqs, seq) + unknown
                    if newer >= c:
                        continue  # may have been evicted by the cap (live count)
                if seq not in got:
                    cls = next(k2 for k2, v in RANK.items() if v == r).value
                    problems.append(
                        f"{name}#{inst.inst}: acked {cls} record seq {seq} (write {w.uid}) "
                        f"lost ({kind})"
                    )

    def seq_floor(self, inst: Instance, t: int, got: dict[int, Record]) -> int:
        """New seqs must go above every recovered seq and every seq acked to a disk/fsync
        write before `t` (SEMANTICS §3.1–§3.2: never reused; memory/ephemeral excepted)."""
        floor = max(got, default=0)
        for w in inst.writes:
            if w.outcome == "acked" and w.end < t and (w.durable or self.rank(w, t) >= 2):
                floor = max([floor, *(s for k, s in enumerate(w.seqs) if k not in w.absent)])
        return floor

    def probe(self, e: Engine, t: int, ro: bool, record: bool) -> list[str]:
        """After recovery: one write per expected topic must get a seq above the floor.
        With `record`, the probes join the ledger (the run continues on this engine)."""
        problems: list[str] = []
        for name in sorted(self.instances):
            inst, _cfg, certain = self.expected(name, t, ro)
            if inst is None or not certain or name not in e.topics:
                continue
            data = f'{{"probe":{self.tick()},"t":{t},"r":{int(record)}}}'.encode()
            w = self.begin_write(name, [data], [None]) if record else None
            try:
                floor = self.seq_floor(inst, t, read_all(e, name))
                res = e.write(name, [RecordIn(data)], create=False)
            except Exception as err:
                problems.append(f"{name}: probe write after recovery failed: {err!r}")
                if w is not None:
                    self.finish(w, "failed", repr(err))
                continue
            if w is not None:
                self.ack_write(w, res.seqs)
            if res.first_seq <= floor:
                problems.append(
                    f"{name}: after recovery a write got seq {res.first_seq}, but seqs up to "
                    f"{floor} were already acked or recovered (seq reuse)"
                )
        return problems

    def resolve(self, e: Engine, t: int, ro: bool = False) -> None:
        """Rebase the ledger on the lineage recovered from the image taken at `t`: what was
        outcome-unknown there is now known from what survived; what started after `t` never
        happened in this lineage; memory/ephemeral records that did not survive free their
        seqs (they may be handed out again, SEMANTICS §2.2)."""
        with self._lock:
            for name, insts in self.instances.items():
                live, _cfg, _certain = self.expected(name, t, False)
                try:
                    got = read_all(e, name) if live is not None and name in e.topics else {}
                except Exception:
                    got = {}  # reported by `check`
                where = {r.data_json: s for s, r in got.items()}
                for inst in insts:
                    self._resolve_instance(inst, t, where if inst is live else {}, ro)

    def _resolve_instance(self, inst: Instance, t: int, where: dict[bytes, int], ro: bool) -> None:
        for c in inst.controls:
            if c.start > t:
                c.outcome = "phantom"
            elif ro and c.outcome == "failed":
                c.outcome = "bug"  # outcome unknown: its frame may have survived
        for d in inst.deletes:
            if d.start > t:
                d.outcome = "phantom"
            elif d.end == -1 or d.end >= t or d.outcome != "acked":
                d.outcome = "failed"  # maybe applied
                d.end = t
        for w in inst.writes:
            known = w.end != -1 and w.end < t
            if w.start > t:
                self._forget(inst, w, "phantom")
            elif known and w.outcome == "acked":
                present = any(d in where for d in w.datas)
                if self.rank(w, t) >= 2:
                    w.durable = True
                elif not present:
                    self._forget(inst, w, "vanished")
            elif known and (w.outcome == "nothing" or (w.outcome == "failed" and not ro)):
                continue
            else:
                k_seq = [(k, where[d]) for k, d in enumerate(w.datas) if d in where]
                if k_seq:
                    k, s = k_seq[0]
                    w.seqs = [s - k + i for i in range(len(w.datas))]
                    if w.outcome == "failed" and ro:  # only whole frames came back
                        w.absent = {i for i, d in enumerate(w.datas) if d not in where}
                    w.outcome = "acked"
                    w.end = t
                    self._claim_seqs(inst, w)
                    if self.rank(w, t) >= 2:
                        w.durable = True
                else:
                    self._forget(inst, w, "vanished")

    def _forget(self, inst: Instance, w: Write, outcome: Outcome) -> None:
        for s in w.seqs:
            if inst.by_seq.get(s) is w:
                del inst.by_seq[s]
        w.outcome = outcome
