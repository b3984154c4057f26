"""Black-box SIGKILL oracle against the real `seglog` server process.

usage: python scripts/crash_oracle.py [--rounds N] [--seed S] [--shards K] [--workers W]
           [--min-ms A] [--max-ms B] [--segment-events E] [--clean-restarts P]
           [--shard-changes P] [--strict] [--ignore LETTERS] [--data-dir DIR] [--keep] [--quiet]

    .venv/bin/python scripts/crash_oracle.py                  # 100 rounds, random seed
    .venv/bin/python scripts/crash_oracle.py --rounds 20 --seed 7 --shards 3
    .venv/bin/python scripts/crash_oracle.py --shard-changes 0.3 --strict
    .venv/bin/python scripts/crash_oracle.py --ignore adfg    # survey: count, don't stop

One fresh data directory (a temp dir unless `--data-dir`) is reused by every round. A round:

1. (the server is running from the previous round; with chance `--clean-restarts`, default
   0.2, it is first restarted gracefully, so the final snapshot makes this round's crash
   recover from a snapshot plus a WAL tail — a short-lived server never snapshots otherwise;
   with chance `--shard-changes`, default 0, a start uses another WAL shard count);
2. runs a randomized workload for a random short time (default 150–900 ms) from W (default
   4) concurrent HTTP clients (threads, one `httpx.Client` each) over 8 topic names: batched
   writes (tags, nodes and meta on some records; `create:false`), `before_seq` and tag
   (`Eq`/`Glob`, sometimes AND `before_seq`) deletes, class changes through `PUT`
   (`ephemeral`→`fsync`/`disk`, `disk`→`fsync`, `fsync`→`disk`), drops and (re)creates with a
   random class and `cap_records` (the first instances cover fsync/disk/ephemeral with and
   without a cap), and state reads. Every attempted write, every acked (2xx) outcome, every
   rejected one (non-2xx, or connection refused: never reached the server) and every request
   whose outcome is unknown (connection died mid-request) is recorded with client-side
   send/ack instants. Per topic name, creates and drops exclude every other request and
   class changes exclude each other (so a write's topic instance is never ambiguous);
   writes, deletes, reads and class changes run concurrently;
3. SIGKILLs the server at a random instant, with requests in flight;
4. restarts it on the same data directory (`tests/support/server.py` `ServerProcess`:
   `python -m seglog.server --port 0 --port-file F`) and checks, over `/v0` only:

   (a) every acked record that must survive is present with identical data, tag, node and
       meta: everything written to `fsync` *and* `disk` topics (SIGKILL is a process crash,
       the page cache survives), i.e. all but the writes that may have been applied while
       the topic was still `ephemeral` (sent before the class change to a persistent class
       was acked);
   (b) no fabrication, alteration or seq reuse: every record read back is one that was
       attempted, on this topic instance, with exactly the attempted content, at the seq it
       was acked with; an outcome-unknown write may appear or not, but atomically (all of
       its records, at contiguous seqs in order); rejected writes never appear; a record seen
       absent (or of a dropped instance) never comes back; its `$ts` never changes, one
       write's records share one `$ts`; two different writes never share a seq, across
       rounds too (checked on every ack as well);
   (c) acked deletes stay deleted: nothing below an acked `before_seq` chosen at or below
       the acked head + 1 (so the bound is exact), no record known visible before an acked
       tag delete (or a `before_seq` beyond the head) was sent that the delete matched;
   (d) a capped topic holds at most `cap_records` live records, and an acked record may be
       missing from it only if it is older than every live record *and* at least
       `cap_records` newer records ever existed (the cap counts live records, not seqs);
       `GET` state `count` equals the number of records a full diff returns;
   (e) acked drops stay dropped, acked creates and class changes survive (an unknown one
       either happened or not; the model follows what the server shows);
   (f) the recovered `head_seq` is at or above every seq ever acked or seen on the topic
       instance, and the next write gets `head_seq + 1`, above all of them;
   (g) no record below an `earliest_seq` the server reported before the crash (state
       reads, delete responses) is live after it (evicted/deleted records never return);
   (h) warning only (fatal with `--strict`): the reported `earliest_seq` went down although
       no record came back (SEMANTICS §4.1 says it never decreases).

   Topics still `ephemeral` after recovery are checked for (b) and dropped (their seqs may
   legally restart from the last snapshot's head). `memory`-class topics are not used (they
   may lose acked records and reissue seqs). Seq holes (failed writes, disk reservation
   padding, deletes) are expected and never counted against the server.

Per round it prints what was done and verified; at the end the totals and rounds/s. The first
violation stops the run with exit status 1 and a readable diff (what was expected, the
missing or extra seqs as ranges, the recovered state, recent deletes and class changes); the
data directory and server log are kept and their paths printed. `--ignore LETTERS` turns the
post-restart violations of those checks into counts (the topic is dropped and the run goes
on; exit status 1 at the end with the first message per check) to survey broken code.
Thread interleavings are not reproducible; `--seed` reproduces the per-round choices (topic
configs, durations, op mix).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.server import ServerProcess, ServerStartError

PERSISTENT = ("disk", "fsync")
SLOTS = 8
# First instance of each slot: every class/cap combination the oracle cares about is there
# from round 1 on (later instances are random).
INITIAL: list[tuple[str, int]] = [
    ("fsync", 0),
    ("fsync", 12),
    ("disk", 0),
    ("disk", 15),
    ("ephemeral", 0),
    ("ephemeral", 20),
    ("disk", 40),
    ("ephemeral", 8),
]
NEXT_CLASS = {"ephemeral": ("fsync", "disk"), "disk": ("fsync",), "fsync": ("disk",)}
TEXT = 'abcxyz-é☃𝄞\u2028"\\ '


class OracleViolation(AssertionError):
    """A broken guarantee; `check` is the letter from the module docstring."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"({check}) {message}")
        self.check = check


def ranges(seqs: Iterable[int]) -> str:
    """`[1, 2, 3, 7, 9, 10]` ⇒ `"1-3,7,9-10"`."""
    out: list[str] = []
    items = sorted(seqs)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out) if out else "(none)"


class RWLock:
    """Shared/exclusive lock with waiting-exclusive preference (no starvation of drops)."""

    def __init__(self) -> None:
        self._c = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._c:
            while self._writer or self._waiting:
                self._c.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._c:
                self._readers -= 1
                if not self._readers:
                    self._c.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._c:
            self._waiting += 1
            while self._writer or self._readers:
                self._c.wait()
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._c:
                self._writer = False
                self._c.notify_all()


# --------------------------------------------------------------------------- the model

ACKED, FAILED, UNKNOWN, INFLIGHT = "acked", "failed", "unknown", "inflight"


@dataclass(eq=False)
class Write:
    wid: int
    rnd: int
    send_ts: float
    klass: str  # the model's class of the topic when the write was sent
    gen: int  # the topic instance
    ack_ts: float | None = None
    status: str = INFLIGHT
    recs: list[Rec] = field(default_factory=list)


@dataclass(eq=False)
class Rec:
    rid: str
    write: Write
    idx: int
    data: Any
    tag: str | None
    node: str | None
    meta: Any
    seq: int | None = None
    # live: acked or seen present, not yet seen absent; gone: seen absent (or its instance
    # dropped) — it must never appear again; failed: rejected, must never appear
    state: str = INFLIGHT
    known_ts: float | None = None  # when it was known visible (ack, or seen after recovery)
    must_survive: bool = False
    ts: int | None = None  # `$ts` as first read back


@dataclass(eq=False)
class Delete:
    send_ts: float
    before: int | None
    match: tuple[str, str] | None  # ("Eq", value) or ("Glob", prefix)
    before_exact: bool  # before <= acked head + 1 at send: the bound is exactly `before`
    ack_ts: float | None = None
    status: str = INFLIGHT

    def matches(self, r: Rec) -> bool:
        if self.before is not None and (r.seq is None or r.seq >= self.before):
            return False
        if self.match is not None:
            if r.tag is None:
                return False
            kind, val = self.match
            return r.tag == val if kind == "Eq" else r.tag.startswith(val)
        return True

    def must_have_deleted(self, r: Rec, verified: bool = False) -> bool:
        """Acked delete `self` certainly removed `r` (if `r` existed in this instance)."""
        if self.status not in ((ACKED, "verified") if verified else (ACKED,)) or not self.matches(
            r
        ):
            return False
        if self.before_exact:
            return True  # every record below the exact bound existed when it was ordered
        return r.known_ts is not None and r.known_ts < self.send_ts

    def may_have_deleted(self, r: Rec) -> bool:
        if self.status == FAILED or not self.matches(r):
            return False
        return not (self.ack_ts is not None and self.ack_ts < r.write.send_ts)

    def describe(self) -> str:
        parts = []
        if self.before is not None:
            parts.append(f"before_seq={self.before}{'' if self.before_exact else ' (not exact)'}")
        if self.match is not None:
            parts.append(f"match={list(self.match)}")
        return " & ".join(parts)


@dataclass(eq=False)
class ClassChange:
    old: str
    new: str
    send_ts: float
    ack_ts: float | None = None
    status: str = INFLIGHT


@dataclass(eq=False)
class Instance:
    name: str
    gen: int
    klass: str
    cap: int
    status: str  # creating | live | dropping
    created_rnd: int
    persistent_since: float | None = None
    pending_class: ClassChange | None = None
    recs: list[Rec] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    seq_owner: dict[int, Rec] = field(default_factory=dict)
    max_seq: int = 0  # highest seq ever acked or seen
    floor_e: int = 0  # highest earliest_seq the server reported
    floor_e_src: str = ""
    changes: list[ClassChange] = field(default_factory=list)

    def label(self) -> str:
        return f"topic {self.name!r} (instance #{self.gen}, class {self.klass}, cap_records {self.cap})"

    def config_body(self, klass: str | None = None) -> dict[str, Any]:
        return {"durability": klass or self.klass, "cap_records": self.cap}


@dataclass
class Slot:
    name: str
    ctl: threading.Lock = field(default_factory=threading.Lock)
    rw: RWLock = field(default_factory=RWLock)
    inst: Instance | None = None
    initial: tuple[str, int] | None = None


@dataclass
class Counts:
    writes_acked: int = 0
    records_acked: int = 0
    writes_unknown: int = 0
    writes_failed: int = 0
    unknown_present: int = 0
    records_verified: int = 0  # must-survive records found intact after recovery
    # acked records legitimately absent: maybe deleted / evicted by the cap / maybe ephemeral
    absent_deleted: int = 0
    absent_evicted: int = 0
    absent_ephemeral: int = 0
    deletes_acked: int = 0
    deletes_verified: int = 0  # acked deletes whose covered records were checked absent
    deleted_records_checked: int = 0
    capped_topics_checked: int = 0
    class_changes_acked: int = 0
    class_changes_verified: int = 0
    creates_acked: int = 0
    drops_acked: int = 0
    topics_verified: int = 0
    probes: int = 0
    clean_restarts: int = 0
    warnings: int = 0  # soft deviations (--strict makes them fatal)
    state_reads: int = 0
    http_errors: int = 0

    def add(self, o: Counts) -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(o, k))

    def line(self) -> str:
        return (
            f"acked {self.writes_acked} writes/{self.records_acked} recs, "
            f"unknown {self.writes_unknown} ({self.unknown_present} recs surfaced), "
            f"failed {self.writes_failed}; verified {self.records_verified} recs present, "
            f"absent ok {self.absent_deleted} deleted/{self.absent_evicted} evicted/"
            f"{self.absent_ephemeral} ephemeral-era; deletes {self.deletes_verified}/"
            f"{self.deletes_acked} verified ({self.deleted_records_checked} recs); "
            f"{self.capped_topics_checked} capped topics; class changes "
            f"{self.class_changes_verified}/{self.class_changes_acked}; creates {self.creates_acked}, "
            f"drops {self.drops_acked}; {self.topics_verified} topic checks, {self.probes} probes"
            + (f"; {self.clean_restarts} clean restart" if self.clean_restarts else "")
            + (f"; {self.warnings} WARNINGS" if self.warnings else "")
        )


class Oracle:
    """State that lives across rounds: the data dir, the server, the model."""

    def __init__(
        self,
        data_dir: Path,
        *,
        seed: int,
        shards: int = 2,
        workers: int = 4,
        min_ms: int = 150,
        max_ms: int = 900,
        segment_events: int = 16,
        clean_restarts: float = 0.2,
        shard_changes: float = 0.0,
        ignore: str = "",
        strict: bool = False,
    ) -> None:
        self.strict = strict
        self.warnings: dict[str, list[str]] = {}
        self.rng = random.Random(seed)
        # checks whose violations found after a restart are only counted (the topic is then
        # dropped so the model stays exact); for surveying broken code, never in tests
        self.ignore = set(ignore)
        self.ignored: dict[str, list[str]] = {}
        self.shards = shards
        self.clean_restarts = clean_restarts
        self.shard_changes = shard_changes
        self.seed = seed
        self.workers = workers
        self.min_ms = min_ms
        self.max_ms = max_ms
        self.srv = ServerProcess(
            data_dir=data_dir,
            env={"SEGLOG_SEGMENT_MAX_EVENTS": str(segment_events)},
            wal_shards=shards,
        )
        self.slots = [Slot(f"oracle-t{i}", initial=INITIAL[i % len(INITIAL)]) for i in range(SLOTS)]
        self.m = threading.Lock()  # guards the model
        self.recs: dict[str, Rec] = {}
        self.gen = itertools.count(1)
        self.wid = itertools.count(1)
        self.rnd = 0
        self.total = Counts()
        self.counts = Counts()
        self.violations: list[OracleViolation] = []
        self.stop = threading.Event()
        self.errors_seen: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers

    def soft(self, check: str, msg: str) -> None:
        """A deviation that loses or invents no data: fatal only with `strict`."""
        if self.strict:
            raise OracleViolation(check, msg)
        self.warnings.setdefault(check, []).append(f"round {self.rnd}: ({check}) {msg}")
        self.counts.warnings += 1

    def note_error(self, what: str) -> None:
        with self.m:
            self.counts.http_errors += 1
            self.errors_seen[what] = self.errors_seen.get(what, 0) + 1

    # ------------------------------------------------------------------ a round

    def run_round(self) -> Counts:
        """One round: start, workload, SIGKILL, restart, verify. Raises OracleViolation."""
        self.rnd += 1
        self.counts = Counts()
        self.stop.clear()
        rrng = random.Random(self.rng.getrandbits(64))
        if not self.srv.running:
            self._start(rrng)
            self.verify()
        elif rrng.random() < self.clean_restarts:
            # A graceful restart writes a final snapshot: this round's crash then recovers
            # from a snapshot plus a WAL tail (a short-lived server never snapshots otherwise).
            code = self.srv.stop()
            if code != 0:
                raise OracleViolation(
                    "recovery",
                    f"graceful stop (SIGTERM) exited with {code}:\n{self.srv.log_text()[-3000:]}",
                )
            self._start(rrng)
            self.verify()
            self.counts.clean_restarts += 1
        url = self.srv.url
        threads = [
            threading.Thread(
                target=self._worker, args=(url, random.Random(rrng.getrandbits(64)), i), daemon=True
            )
            for i in range(self.workers)
        ]
        for t in threads:
            t.start()
        time.sleep(rrng.uniform(self.min_ms, self.max_ms) / 1000)
        self.stop.set()  # no new requests; those in flight stay in flight
        died = not self.srv.running
        self.srv.kill()  # SIGKILL
        if died:
            raise OracleViolation(
                "recovery",
                f"the server exited by itself during the workload:\n{self.srv.log_text()[-3000:]}",
            )
        for t in threads:
            t.join(30)
            if t.is_alive():
                raise RuntimeError("a workload thread did not stop after the kill")
        if self.violations:
            raise self.violations[0]
        self._start(rrng)
        self.verify()
        self.total.add(self.counts)
        return self.counts

    def _start(self, rrng: random.Random) -> None:
        if self.shard_changes and rrng.random() < self.shard_changes:
            self.srv.wal_shards = rrng.choice(
                [k for k in range(1, max(3, self.shards + 1) + 1) if k != self.srv.wal_shards]
            )
        try:
            self.srv.start()
        except ServerStartError as e:
            raise OracleViolation("recovery", f"the server did not restart:\n{e}") from e

    # ------------------------------------------------------------------ workload

    def _worker(self, url: str, rng: random.Random, ident: int) -> None:
        with httpx.Client(base_url=url, timeout=20.0) as c:
            while not self.stop.is_set():
                slot = rng.choice(self.slots)
                try:
                    self._one_op(c, rng, slot, ident)
                except Exception as e:
                    if not isinstance(e, OracleViolation):  # a bug in the oracle itself
                        e = OracleViolation("oracle", f"workload thread crashed: {e!r}")
                    self.violations.append(e)
                    self.stop.set()
                    raise

    def _one_op(self, c: httpx.Client, rng: random.Random, slot: Slot, ident: int) -> None:
        inst = slot.inst
        if inst is None:
            if rng.random() < 0.3:
                self._create(c, rng, slot)
            return
        if inst.status != "live":
            return
        x = rng.random() * 100
        if x < 72:
            self._write(c, rng, slot, ident)
        elif x < 75:
            self._delete(c, rng, slot, "before")
        elif x < 81:
            self._delete(c, rng, slot, "tag")
        elif x < 86:
            self._change_class(c, rng, slot)
        elif x < 87.2:
            self._drop(c, slot)
        else:
            self._state(c, slot)

    def _send(self, c: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response | str:
        """The response, or "failed" (never reached the server) / "unknown"."""
        try:
            return c.request(method, path, **kw)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            return FAILED
        except httpx.TransportError:
            return UNKNOWN

    def _write(self, c: httpx.Client, rng: random.Random, slot: Slot, ident: int) -> None:
        with slot.rw.shared():
            inst = slot.inst
            if inst is None or inst.status != "live" or self.stop.is_set():
                return
            n = rng.choice((1, 1, 2, 3, 5, 8, 13, 20))
            with self.m:
                w = Write(next(self.wid), self.rnd, time.monotonic(), inst.klass, inst.gen)
                batch_node = f"n{ident}" if rng.random() < 0.2 else None
                body_recs = []
                for i in range(n):
                    rid = f"r{self.rnd}-{w.wid}-{i}"
                    data: Any = {
                        "id": rid,
                        "v": rng.randrange(1 << 40),
                        "s": TEXT[: rng.randrange(len(TEXT))],
                    }
                    if rng.random() < 0.05:
                        data["blob"] = "x" * rng.randrange(2000, 6000)
                    tag = None
                    if rng.random() < 0.5:
                        tag = f"g{rng.randrange(4)}:{rid}"
                    node = f"m{rng.randrange(3)}" if rng.random() < 0.15 else None
                    meta = {"k": rid, "z": [1, None, True]} if rng.random() < 0.15 else None
                    rec = Rec(rid, w, i, data, tag, node or batch_node, meta)
                    w.recs.append(rec)
                    self.recs[rid] = rec
                    inst.recs.append(rec)
                    r: dict[str, Any] = {"data": data}
                    if tag is not None:
                        r["tag"] = tag
                    if node is not None:
                        r["node"] = node
                    if meta is not None:
                        r["meta"] = meta
                    body_recs.append(r)
                inst.writes.append(w)
            body: dict[str, Any] = {"records": body_recs, "create": False}
            if batch_node:
                body["node"] = batch_node
            res = self._send(c, "POST", f"/v0/topics/{inst.name}", json=body)
            now = time.monotonic()
            with self.m:
                if isinstance(res, str):
                    self._settle_write(w, res)
                    return
                if res.status_code != 200:
                    self._settle_write(w, FAILED)
                    self.note_error(f"write {res.status_code} {res.text[:120]}")
                    return
                j = res.json()
                seqs = j.get("seqs")
                if not (
                    isinstance(seqs, list)
                    and len(seqs) == n
                    and seqs == list(range(seqs[0], seqs[0] + n))
                    and j.get("first_seq") == seqs[0]
                    and j.get("last_seq") == seqs[-1]
                    and j.get("count") == n
                    and j.get("deduped") is False
                ):
                    raise OracleViolation(
                        "b", f"bad write response for {n} records on {inst.label()}: {j}"
                    )
                w.status, w.ack_ts = ACKED, now
                must = inst.persistent_since is not None and w.send_ts > inst.persistent_since
                for rec, s in zip(w.recs, seqs, strict=True):
                    rec.state, rec.seq, rec.known_ts, rec.must_survive = "live", s, now, must
                    self._own_seq(inst, rec, "acked write")
                self.counts.writes_acked += 1
                self.counts.records_acked += n

    def _settle_write(self, w: Write, outcome: str) -> None:
        w.status = outcome
        for rec in w.recs:
            rec.state = outcome
        if outcome == FAILED:
            self.counts.writes_failed += 1
        else:
            self.counts.writes_unknown += 1

    def _own_seq(self, inst: Instance, rec: Rec, how: str) -> None:
        assert rec.seq is not None
        other = inst.seq_owner.get(rec.seq)
        if other is not None and other is not rec:
            raise OracleViolation(
                "b",
                f"seq reuse on {inst.label()}: seq {rec.seq} {how} for record {rec.rid} "
                f"(round {rec.write.rnd}) but it already belonged to record {other.rid} "
                f"(round {other.write.rnd}, write {other.write.status}, state {other.state})",
            )
        inst.seq_owner[rec.seq] = rec
        inst.max_seq = max(inst.max_seq, rec.seq)

    def _delete(self, c: httpx.Client, rng: random.Random, slot: Slot, kind: str) -> None:
        with slot.rw.shared():
            inst = slot.inst
            if inst is None or inst.status != "live" or self.stop.is_set():
                return
            body: dict[str, Any] = {}
            with self.m:
                head = inst.max_seq
                before: int | None = None
                match: tuple[str, str] | None = None
                if kind == "before" or rng.random() < 0.25:
                    x = rng.random()
                    if x < 0.1:
                        before = head + rng.randrange(2, 50)  # beyond the head: bound = head+1
                    elif x < 0.2:
                        before = head + 1  # everything
                    else:  # keep the newest 10..150
                        before = rng.randint(max(1, head - 150), max(1, head - 10))
                    body["before_seq"] = before
                if kind == "tag":
                    tagged = [r.tag for r in inst.recs[-200:] if r.tag is not None]
                    if tagged and rng.random() < 0.5:
                        match = ("Eq", rng.choice(tagged))
                        body["match"] = ["tag", "Eq", match[1]] if rng.random() < 0.5 else match[1]
                    else:
                        match = ("Glob", f"g{rng.randrange(4)}:")
                        body["match"] = (
                            ["tag", "Glob", match[1] + "*"]
                            if rng.random() < 0.5
                            else match[1] + "*"
                        )
                d = Delete(
                    time.monotonic(), before, match, before is not None and before <= head + 1
                )
                inst.deletes.append(d)
            res = self._send(c, "POST", f"/v0/topics/{inst.name}/delete", json=body)
            now = time.monotonic()
            with self.m:
                if isinstance(res, str):
                    d.status = res
                    return
                if res.status_code != 200:
                    d.status = FAILED
                    self.note_error(f"delete {res.status_code} {res.text[:120]}")
                    return
                d.status, d.ack_ts = ACKED, now
                self.counts.deletes_acked += 1
                j = res.json()
                self._floor(inst, j.get("earliest_seq"), f"delete response at round {self.rnd}")

    def _floor(self, inst: Instance, e: Any, src: str) -> None:
        if isinstance(e, int) and e > inst.floor_e and inst.klass in PERSISTENT:
            inst.floor_e, inst.floor_e_src = e, src

    def _change_class(self, c: httpx.Client, rng: random.Random, slot: Slot) -> None:
        with slot.ctl:
            inst = slot.inst
            if inst is None or inst.status != "live" or self.stop.is_set():
                return
            with self.m:
                ch = ClassChange(inst.klass, rng.choice(NEXT_CLASS[inst.klass]), time.monotonic())
                inst.pending_class = ch
                inst.changes.append(ch)
            res = self._send(c, "PUT", f"/v0/topics/{inst.name}", json=inst.config_body(ch.new))
            now = time.monotonic()
            with self.m:
                if isinstance(res, str):
                    ch.status = res
                    if res == FAILED:
                        inst.pending_class = None
                    return
                if res.status_code != 200:
                    ch.status = FAILED
                    inst.pending_class = None
                    self.note_error(f"class change {res.status_code} {res.text[:120]}")
                    return
                j = res.json()
                cfg = j.get("config", {})
                if j.get("created") is not False or cfg.get("durability") != ch.new:
                    raise OracleViolation(
                        "e", f"class change {ch.old}→{ch.new} on {inst.label()}: {j}"
                    )
                ch.status, ch.ack_ts = ACKED, now
                self._apply_class(inst, ch.new, now)
                inst.pending_class = None
                self.counts.class_changes_acked += 1

    def _apply_class(self, inst: Instance, klass: str, now: float) -> None:
        inst.klass = klass
        if klass in PERSISTENT and inst.persistent_since is None:
            inst.persistent_since = now

    def _create(self, c: httpx.Client, rng: random.Random, slot: Slot) -> None:
        with slot.ctl, slot.rw.exclusive():
            if slot.inst is not None or self.stop.is_set():
                return
            with self.m:
                if slot.initial is not None:
                    klass, cap = slot.initial
                    slot.initial = None
                else:
                    klass = rng.choice(("fsync", "disk", "ephemeral", "ephemeral"))
                    cap = rng.choice((0, 0, 5, 10, 25, 60))
                inst = Instance(slot.name, next(self.gen), klass, cap, "creating", self.rnd)
                slot.inst = inst
            res = self._send(c, "PUT", f"/v0/topics/{inst.name}", json=inst.config_body())
            now = time.monotonic()
            with self.m:
                if isinstance(res, str):
                    if res == FAILED:
                        slot.inst = None
                    return  # unknown: resolved after the restart
                if res.status_code not in (200, 201):
                    slot.inst = None
                    self.note_error(f"create {res.status_code} {res.text[:120]}")
                    return
                j = res.json()
                if res.status_code != 201 or j.get("created") is not True:
                    raise OracleViolation(
                        "e",
                        f"PUT of {inst.name!r}, which the model says is absent (dropped or never "
                        f"created), answered {res.status_code}: {j}",
                    )
                inst.status = "live"
                if klass in PERSISTENT:
                    inst.persistent_since = now
                self.counts.creates_acked += 1

    def _drop(self, c: httpx.Client, slot: Slot) -> None:
        with slot.ctl, slot.rw.exclusive():
            inst = slot.inst
            if inst is None or inst.status != "live" or self.stop.is_set():
                return
            inst.status = "dropping"
            res = self._send(c, "DELETE", f"/v0/topics/{inst.name}")
            with self.m:
                if isinstance(res, str):
                    if res == FAILED:
                        inst.status = "live"
                    return
                if res.status_code != 200:
                    inst.status = "live"
                    self.note_error(f"drop {res.status_code} {res.text[:120]}")
                    return
                j = res.json()
                if j.get("deleted") is not True:
                    raise OracleViolation("e", f"DELETE of live {inst.label()} answered {j}")
                self._forget(slot, inst)
                self.counts.drops_acked += 1

    def _forget(self, slot: Slot, inst: Instance) -> None:
        slot.inst = None
        for r in inst.recs:
            if r.state != FAILED:
                r.state = "gone"

    def _state(self, c: httpx.Client, slot: Slot) -> None:
        with slot.rw.shared():
            inst = slot.inst
            if inst is None or inst.status != "live" or self.stop.is_set():
                return
            with self.m:
                known = inst.max_seq
                klass = inst.klass
            res = self._send(c, "GET", f"/v0/topics/{inst.name}", params={"touch": "false"})
            with self.m:
                if isinstance(res, str):
                    return
                if res.status_code != 200:
                    self.note_error(f"state {res.status_code} {res.text[:120]}")
                    return
                j = res.json()
                self.counts.state_reads += 1
                if j["head_seq"] < known:
                    raise OracleViolation(
                        "f",
                        f"{inst.label()}: head_seq {j['head_seq']} below acked seq {known}: {j}",
                    )
                if inst.cap and j["count"] > inst.cap:
                    raise OracleViolation("d", f"{inst.label()} holds {j['count']} records: {j}")
                if klass == inst.klass:
                    self._floor(inst, j["earliest_seq"], f"state read at round {self.rnd}")

    # ------------------------------------------------------------------ verification

    def verify(self) -> None:
        """After a restart: resolve every unknown outcome and check (a)–(g) on every slot."""
        with httpx.Client(base_url=self.srv.url, timeout=30.0) as c:
            for slot in self.slots:
                try:
                    self._verify_slot(c, slot)
                except OracleViolation as v:
                    if v.check not in self.ignore:
                        raise
                    # --ignore: note it, drop the topic and go on with a clean slot
                    self.ignored.setdefault(v.check, []).append(f"round {self.rnd}: {v}")
                    self._get(c, "DELETE", f"/v0/topics/{slot.name}")
                    if slot.inst is not None:
                        self._forget(slot, slot.inst)

    def _get(self, c: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return c.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise OracleViolation(
                "recovery",
                f"{method} {path} failed after the restart: {e!r}\n{self.srv.log_text()[-3000:]}",
            ) from e

    def _ok(self, r: httpx.Response, what: str) -> dict[str, Any]:
        if r.status_code not in (200, 201):
            raise OracleViolation("recovery", f"{what}: {r.status_code} {r.text[:500]}")
        j: dict[str, Any] = r.json()
        return j

    def _verify_slot(self, c: httpx.Client, slot: Slot) -> None:
        inst = slot.inst
        r = self._get(c, "GET", f"/v0/topics/{slot.name}", params={"touch": "false"})
        exists = r.status_code == 200
        if r.status_code not in (200, 404):
            raise OracleViolation("recovery", f"GET {slot.name}: {r.status_code} {r.text[:300]}")
        self.counts.topics_verified += 1
        if inst is None:
            if exists:
                raise OracleViolation(
                    "e",
                    f"topic {slot.name!r} exists after the restart although its drop was acked "
                    f"(or it was never created): {r.json()}",
                )
            return
        if inst.status == "creating":
            if not exists:
                slot.inst = None
                return
            inst.status = "live"
            if inst.klass in PERSISTENT:
                inst.persistent_since = time.monotonic()
        elif inst.status == "dropping":
            if not exists:
                self._forget(slot, inst)
                return
            inst.status = "live"
        elif not exists:
            raise OracleViolation(
                "e",
                f"{inst.label()} is gone after the restart (created round {inst.created_rnd}, "
                "never dropped by an acked or pending DELETE)",
            )
        st: dict[str, Any] = r.json()
        self._check_config(inst, st)
        seen = self._scan(c, inst, st)
        if inst.klass == "ephemeral":
            self._ok(
                self._get(c, "DELETE", f"/v0/topics/{inst.name}"), "drop of an ephemeral topic"
            )
            self._forget(slot, inst)
            return
        self._check_absent(inst, seen, st)
        self._check_deletes(inst, seen, st)
        if inst.cap:
            if len(seen) > inst.cap:
                raise OracleViolation(
                    "d",
                    f"{inst.label()} holds {len(seen)} live records after recovery "
                    f"(seqs {ranges(seen)})",
                )
            self.counts.capped_topics_checked += 1
        if st["count"] != len(seen):
            raise OracleViolation(
                "d",
                f"{inst.label()}: state count {st['count']} but a full diff returned "
                f"{len(seen)} records (seqs {ranges(seen)}); state {st}",
            )
        # (f) head and the next seq
        if st["head_seq"] < inst.max_seq:
            raise OracleViolation(
                "f",
                f"{inst.label()}: recovered head_seq {st['head_seq']} is below seq "
                f"{inst.max_seq}, which was acked or seen earlier; state {st}",
            )
        self._probe(c, inst, st)

    def _check_config(self, inst: Instance, st: dict[str, Any]) -> None:
        cfg = st.get("config", {})
        got = cfg.get("durability")
        allowed = {inst.klass}
        ch = inst.pending_class
        if ch is not None:
            allowed.add(ch.new)
        if got not in allowed or cfg.get("cap_records") != inst.cap or st.get("type") != "log":
            hist = ", ".join(f"{x.old}→{x.new} ({x.status})" for x in inst.changes) or "none"
            raise OracleViolation(
                "e",
                f"{inst.label()}: recovered config durability={got!r} "
                f"cap_records={cfg.get('cap_records')!r}, expected durability in {sorted(allowed)} "
                f"and cap_records {inst.cap}; class changes: {hist}",
            )
        if ch is not None and got == ch.new and got != inst.klass:
            self._apply_class(inst, got, time.monotonic())
        inst.pending_class = None
        if any(x.status == ACKED for x in inst.changes):
            self.counts.class_changes_verified += sum(
                1 for x in inst.changes if x.status == ACKED and x.ack_ts is not None
            )
            for x in inst.changes:
                if x.status == ACKED:
                    x.status = "verified"

    def _scan(self, c: httpx.Client, inst: Instance, st: dict[str, Any]) -> dict[int, Rec]:
        """Read the whole topic and check every record against the model: (b), and resolve
        unknown writes."""
        seen: dict[int, Rec] = {}
        raw: list[dict[str, Any]] = []
        cursor = 0
        while True:
            d = self._ok(
                self._get(
                    c,
                    "POST",
                    f"/v0/topics/{inst.name}/diff",
                    json={
                        "from_seq": cursor,
                        "limit": 1000,
                        "include_tags": True,
                        "include_meta": True,
                    },
                ),
                f"diff of {inst.name}",
            )
            raw += d["records"]
            if d["next_from_seq"] <= cursor and not d["caught_up"]:
                raise OracleViolation("recovery", f"diff of {inst.name} does not advance: {d}")
            cursor = d["next_from_seq"]
            if d["caught_up"]:
                break
        now = time.monotonic()
        last_seq, last_ts = 0, 0
        surfaced: set[Write] = set()
        seen_ids: set[str] = set()
        for o in raw:
            seq, ts = o["$seq"], o["$ts"]
            if seq <= last_seq:
                raise OracleViolation(
                    "b", f"{inst.label()}: seqs not increasing: {seq} after {last_seq}"
                )
            if ts < last_ts:
                raise OracleViolation(
                    "b", f"{inst.label()}: $ts decreases at seq {seq}: {ts} < {last_ts}"
                )
            last_seq, last_ts = seq, ts
            data = o.get("data")
            rid = data.get("id") if isinstance(data, dict) else None
            rec = self.recs.get(rid) if isinstance(rid, str) else None
            where = f"{inst.label()} seq {seq}"
            if rec is None:
                raise OracleViolation("b", f"{where}: fabricated record (never attempted): {o}")
            if rec.write.gen != inst.gen:
                raise OracleViolation(
                    "b",
                    f"{where}: record {rid} belongs to another topic instance "
                    f"(written in round {rec.write.rnd}): {o}",
                )
            want = {"data": rec.data}
            got = {"data": data}
            if rec.tag is not None:
                want["$tag"] = rec.tag
            if "$tag" in o:
                got["$tag"] = o["$tag"]
            if rec.node is not None:
                want["$node"] = rec.node
            if "$node" in o:
                got["$node"] = o["$node"]
            if rec.meta is not None:
                want["meta"] = rec.meta
            if "meta" in o:
                got["meta"] = o["meta"]
            if want != got:
                raise OracleViolation(
                    "b", f"{where}: record {rid} altered:\n  written {want}\n  read    {got}"
                )
            if rec.state == FAILED:
                raise OracleViolation(
                    "b",
                    f"{where}: record {rid} of a rejected write (round {rec.write.rnd}) is visible",
                )
            if rec.state == "gone":
                raise OracleViolation(
                    "b",
                    f"{where}: record {rid} (round {rec.write.rnd}) came back after it had been "
                    "seen absent or its topic instance was dropped",
                )
            if seq in seen:
                raise OracleViolation("b", f"{where}: seq returned twice")
            if rec.seq is None:  # outcome-unknown write surfaced: the whole batch committed
                base = seq - rec.idx
                for x in rec.write.recs:
                    x.seq = base + x.idx
                    x.state, x.known_ts, x.must_survive = "live", now, True
                    self._own_seq(inst, x, "surfaced after an unknown-outcome write")
                surfaced.add(rec.write)
            elif rec.seq != seq:
                raise OracleViolation(
                    "b",
                    f"{where}: record {rid} was acked (or earlier seen) at seq {rec.seq}, "
                    f"now read at seq {seq}",
                )
            if rec.rid in seen_ids:
                raise OracleViolation("b", f"{where}: record {rid} returned twice")
            seen_ids.add(rec.rid)
            if rec.ts is None:
                rec.ts = ts
            elif rec.ts != ts:
                raise OracleViolation(
                    "b", f"{where}: record {rid} $ts changed from {rec.ts} to {ts}"
                )
            seen[seq] = rec
        # all records of one write share one $ts
        by_write: dict[Write, set[int]] = {}
        for rec in seen.values():
            if rec.ts is not None:
                by_write.setdefault(rec.write, set()).add(rec.ts)
        for tss in by_write.values():
            if len(tss) > 1:
                raise OracleViolation(
                    "b", f"{inst.label()}: records of one write carry different $ts {sorted(tss)}"
                )
        for w in surfaced:
            self.counts.unknown_present += len(w.recs)
        if inst.klass in PERSISTENT:
            for rec in seen.values():
                if not rec.must_survive:
                    rec.must_survive = True
                    if rec.known_ts is None:
                        rec.known_ts = now
        return seen

    def _why_absent_ok(
        self, inst: Instance, r: Rec, oldest_live: int | None, newer: Callable[[int], int]
    ) -> str | None:
        if not r.must_survive:
            return "may have been written while the topic was ephemeral"
        for d in reversed(inst.deletes):
            if d.may_have_deleted(r):
                return f"maybe deleted by {d.describe()} ({d.status})"
        if (
            inst.cap
            and r.seq is not None
            and (oldest_live is None or r.seq < oldest_live)
            and newer(r.seq) >= inst.cap
        ):
            return "evicted by the cap"
        return None

    def _check_absent(self, inst: Instance, seen: dict[int, Rec], st: dict[str, Any]) -> None:
        present = {id(x) for x in seen.values()}
        oldest_live = min(seen) if seen else None
        # Upper bound of the records that ever existed above a seq: every non-rejected record
        # with a higher known seq, plus every unknown-outcome record whose seq is unknown.
        known = sorted(x.seq for x in inst.recs if x.state != FAILED and x.seq is not None)
        unplaced = sum(1 for x in inst.recs if x.state != FAILED and x.seq is None)

        def newer(seq: int) -> int:
            return len(known) - bisect.bisect_right(known, seq) + unplaced

        lost: list[Rec] = []
        for r in inst.recs:
            if id(r) in present:
                continue
            if r.state == "live":
                why = self._why_absent_ok(inst, r, oldest_live, newer)
                if why is None:
                    lost.append(r)
                elif why.startswith("maybe deleted"):
                    self.counts.absent_deleted += 1
                elif why.startswith("evicted"):
                    self.counts.absent_evicted += 1
                else:
                    self.counts.absent_ephemeral += 1
                r.state = "gone"
            elif r.state in (UNKNOWN, INFLIGHT):  # an unknown-outcome write that did not surface
                r.state = "gone"
        for r in seen.values():
            if r.must_survive and r.write.status == ACKED:
                self.counts.records_verified += 1
        if lost:
            r = lost[0]
            check = "d" if inst.cap else "a"
            if r.write.status != ACKED and any(id(x) in present for x in r.write.recs):
                check = "b"  # part of an outcome-unknown write surfaced, this part did not
            hist = ", ".join(f"{x.old}→{x.new} ({x.status})" for x in inst.changes) or "none"
            dels = "; ".join(f"{d.describe()} [{d.status}]" for d in inst.deletes[-6:]) or "none"
            raise OracleViolation(
                check,
                f"{inst.label()}: {len(lost)} acked record(s) missing after the restart, "
                f"first {r.rid} at seq {r.seq} (tag {r.tag!r}, {'acked' if r.write.status == ACKED else 'surfaced'} "
                f"in round {r.write.rnd} while the topic was {r.write.klass}); none of them is "
                f"covered by a delete, evictable by the cap or ephemeral-era.\n"
                f"  missing seqs:   {ranges(x.seq for x in lost if x.seq is not None)}\n"
                f"  recovered seqs: {ranges(seen)} ({len(seen)} live)\n"
                f"  state: head_seq {st['head_seq']} earliest_seq {st['earliest_seq']} "
                f"count {st['count']}\n  class changes: {hist}\n  last deletes: {dels}",
            )

    def _check_deletes(self, inst: Instance, seen: dict[int, Rec], st: dict[str, Any]) -> None:
        # Deletes acked before this crash. Records they removed are `gone` from now on, so a
        # later comeback is caught by the `gone` check of (b).
        for d in inst.deletes:
            if d.status != ACKED:
                continue
            for seq, r in seen.items():
                if d.must_have_deleted(r):
                    raise OracleViolation(
                        "c",
                        f"{inst.label()}: record {r.rid} at seq {seq} (tag {r.tag!r}) is live "
                        f"after the restart, but an acked delete {d.describe()} removed it "
                        f"(delete sent in the round it was acked, the record was known visible before)",
                    )
            d.status = "verified"
            self.counts.deletes_verified += 1
            self.counts.deleted_records_checked += sum(
                1 for r in inst.recs if r.seq is not None and d.must_have_deleted(r, True)
            )
        if inst.floor_e:
            below = [s for s in seen if s < inst.floor_e]
            if below:
                raise OracleViolation(
                    "g",
                    f"{inst.label()}: live seqs {ranges(below)} after the restart are below "
                    f"earliest_seq {inst.floor_e} reported by a {inst.floor_e_src}; recovered "
                    f"seqs {ranges(seen)}, state earliest_seq {st['earliest_seq']}",
                )
        if st["earliest_seq"] < inst.floor_e:
            # No record came back, only the reported number went down (SEMANTICS §4.1 says it
            # never decreases): a warning unless --strict.
            self.soft(
                "h",
                f"{inst.label()}: earliest_seq went down from {inst.floor_e} "
                f"({inst.floor_e_src}) to {st['earliest_seq']} after the restart, although "
                f"no record below {inst.floor_e} is live (first live seq: "
                f"{min(seen) if seen else 'none'}, head_seq {st['head_seq']})",
            )

    def _probe(self, c: httpx.Client, inst: Instance, st: dict[str, Any]) -> None:
        w = Write(next(self.wid), self.rnd, time.monotonic(), inst.klass, inst.gen)
        rid = f"p{self.rnd}-{w.wid}"
        rec = Rec(rid, w, 0, {"id": rid, "probe": True}, None, None, None)
        w.recs.append(rec)
        self.recs[rid] = rec
        inst.recs.append(rec)
        inst.writes.append(w)
        r = self._get(
            c,
            "POST",
            f"/v0/topics/{inst.name}",
            json={"records": [{"data": rec.data}], "create": False},
        )
        if r.status_code != 200:
            w.status = rec.state = FAILED
            raise OracleViolation(
                "f",
                f"{inst.label()}: probe write after the restart: {r.status_code} {r.text[:300]}",
            )
        seq = r.json()["seqs"][0]
        w.status, w.ack_ts = ACKED, time.monotonic()
        rec.seq, rec.state, rec.known_ts, rec.must_survive = seq, "live", w.ack_ts, True
        if seq <= inst.max_seq or seq != st["head_seq"] + 1:
            old = inst.seq_owner.get(seq)
            raise OracleViolation(
                "f",
                f"{inst.label()}: first write after the restart got seq {seq}; expected "
                f"head_seq+1 = {st['head_seq'] + 1} and above every seq ever acked or seen "
                f"({inst.max_seq})"
                + (
                    f"; seq {seq} was acked for record {old.rid} in round {old.write.rnd}"
                    if old
                    else ""
                ),
            )
        self._own_seq(inst, rec, "probe")
        self.counts.probes += 1


# --------------------------------------------------------------------------- CLI


def run(
    rounds: int,
    seed: int,
    shards: int,
    data_dir: Path,
    *,
    quiet: bool = False,
    **options: Any,
) -> Counts:
    """Run `rounds` rounds on `data_dir` (`options`: the `Oracle` keywords); raises
    OracleViolation on the first violation. Returns the totals."""
    if data_dir.exists() and any(data_dir.iterdir()):
        raise ValueError(f"{data_dir} is not empty: the oracle needs a fresh data dir")
    data_dir.parent.mkdir(parents=True, exist_ok=True)  # the server log goes next to it
    o = Oracle(data_dir, seed=seed, shards=shards, **options)
    t0 = time.monotonic()
    try:
        for i in range(rounds):
            t = time.monotonic()
            cnt = o.run_round()
            if not quiet:
                print(
                    f"round {i + 1}/{rounds} {time.monotonic() - t:.2f}s "
                    f"({o.srv.wal_shards} shards): {cnt.line()}",
                    flush=True,
                )
    except OracleViolation as v:
        v.args = (
            f"{v.args[0]}\n  [round {o.rnd}, seed {seed}, data dir {data_dir}, "
            f"server log {o.srv.log_path}]",
        )
        raise
    finally:
        o.srv.stop()
    el = time.monotonic() - t0
    print(f"TOTAL {rounds} rounds in {el:.1f}s ({rounds / el:.2f} rounds/s): {o.total.line()}")
    if o.errors_seen:
        print("non-2xx answers during the workloads (not violations):")
        for what, n in sorted(o.errors_seen.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {n}x {what}")
    for k, msgs in sorted(o.warnings.items()):
        print(f"WARNING ({k}) {len(msgs)} time(s) (fatal only with --strict), first: {msgs[0]}")
    if o.ignored:
        lines = [
            f"({k}) {len(msgs)} violation(s) ignored, first: {msgs[0]}"
            for k, msgs in sorted(o.ignored.items())
        ]
        raise OracleViolation("ignored", "violations of ignored checks:\n" + "\n".join(lines))
    return o.total


def main() -> int:
    p = argparse.ArgumentParser(
        description="SIGKILL oracle against the real seglog server (see the module docstring)."
    )
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--shards", type=int, default=2, help="WAL shards (default 2)")
    p.add_argument("--workers", type=int, default=4, help="concurrent HTTP clients (default 4)")
    p.add_argument("--min-ms", type=int, default=150, help="shortest workload before the kill")
    p.add_argument("--max-ms", type=int, default=900, help="longest workload before the kill")
    p.add_argument("--segment-events", type=int, default=16, help="SEGLOG_SEGMENT_MAX_EVENTS")
    p.add_argument(
        "--clean-restarts",
        type=float,
        default=0.2,
        help="chance that a round starts with a graceful restart (snapshot); default 0.2",
    )
    p.add_argument(
        "--shard-changes",
        type=float,
        default=0.0,
        help="chance that a restart uses another WAL shard count (layout change); default 0",
    )
    p.add_argument(
        "--ignore",
        default="",
        metavar="LETTERS",
        help="checks (e.g. 'dg') whose post-restart violations are counted, not fatal: the "
        "topic is dropped and the run goes on; exit status 1 at the end (for surveys)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="also fail on (h): a reported earliest_seq went down although no record came back",
    )
    p.add_argument("--data-dir", type=Path, default=None, help="default: a fresh temp dir")
    p.add_argument("--keep", action="store_true", help="keep the data dir even on success")
    p.add_argument("--quiet", action="store_true", help="only the totals")
    a = p.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    tmp = None
    if a.data_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="seglog-oracle-"))
        data_dir = tmp / "data"
    else:
        data_dir = a.data_dir
    print(
        f"crash oracle: {a.rounds} rounds, seed {seed}, {a.shards} WAL shards, data dir {data_dir}",
        flush=True,
    )
    try:
        run(
            a.rounds,
            seed,
            a.shards,
            data_dir,
            quiet=a.quiet,
            workers=a.workers,
            min_ms=a.min_ms,
            max_ms=a.max_ms,
            segment_events=a.segment_events,
            clean_restarts=a.clean_restarts,
            shard_changes=a.shard_changes,
            ignore=a.ignore,
            strict=a.strict,
        )
    except OracleViolation as v:
        print(f"\nVIOLATION {v}", file=sys.stderr)
        return 1
    if tmp is not None and not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
