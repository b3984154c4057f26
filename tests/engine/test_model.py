"""Stateful model test: the engine against a small reference model (hypothesis).

Rules: create / reconfigure topics (any class, with and without `cap_records`, including
ephemeral/memory → disk/fsync upgrades and downgrades), drop them, write, write with an
injected WAL fault (EIO on the write or on the fsync, torn writes, ENOSPC), delete by
`before_seq` and by tag (also with an EIO on the sealed delete-flag flip), snapshot, seal,
and restart: clean, after a process crash, after a power cut — each time with a WAL shard
count picked from 1–3, so layouts change between snapshots (1→2→1, 2→3→2, …).

After every step the live engine must equal the model exactly: same topics and configs,
same records (seq, data, tag) in order, live-record caps (SEMANTICS §4.2), failed writes
invisible with their seqs left as holes (§3.1: the next write's first seq is exact). After a
crash the recovered engine must keep every record its class promises (fsync always; disk
after a process crash), may drop the rest but never alter a record, never show a failed
write or an acked delete (fsync deletes always; buffered deletes after a process crash),
and must hand out seqs above every acked disk/fsync seq (§3.2).

Size: 60 derandomized examples × 30 steps by default (CI); `HYPOTHESIS_PROFILE=slow` runs
≥ 1000 examples × 60 steps (profiles in tests/conftest.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from seglog.clock import ManualClock
from seglog.engine.engine import Engine
from seglog.engine.maintenance import seal_topic
from seglog.errors import ErrorCode, SeglogError
from seglog.model import Durability, Record, RecordIn, Selector, TopicConfig
from tests.engine.oracle import RANK, Hooks, abandon, image, open_engine, read_all, snapshot
from tests.support.faultfs import FaultFs, WriteFault

NAMES = ("a", "b", "c")
CLASSES = (Durability.EPHEMERAL, Durability.MEMORY, Durability.DISK, Durability.FSYNC)
TAGS = ("x", "y", None)
FAULTS = ("write-eio", "write-torn", "write-enospc", "fsync-eio")
RESTARTS = ("clean", "process", "power")
OPTS = {"segment_max_events": 2, "segment_payload_cache": 1}

# data, tag, rank, why it left: evicted | deleted-buf | deleted-sync | maybe
Ghost = tuple[bytes, str | None, int, str]


@dataclass
class MTopic:
    cfg: TopicConfig
    live: dict[int, tuple[bytes, str | None, int]] = field(default_factory=dict)  # + rank
    ghosts: dict[int, Ghost] = field(default_factory=dict)  # may reappear after a crash
    fragile: set[int] = field(default_factory=set)  # live, but may vanish after a crash
    next_seq: int | None = 1  # exact within a session
    assigned: int = 0  # highest seq handed out (acked or failed) this session
    floor: int = 0  # no later write may get a seq ≤ this (acked disk/fsync seqs, survivors)

    @property
    def rank(self) -> int:
        return RANK[self.cfg.durability]


class EngineModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.fs = FaultFs()
        self.shards = 1
        self.e = self._open(self.fs, 1)
        self.topics: dict[str, MTopic] = {}
        self.failed: set[bytes] = set()
        self.n = 0

    def _open(self, fs: FaultFs, shards: int) -> Engine:
        e = open_engine(fs, shards, clock=self.clock, **OPTS)
        self.hooks = Hooks(fs)
        return e

    def teardown(self) -> None:
        abandon(self.e, self.fs)

    def _records(self, n: int, tag: str | None) -> list[RecordIn]:
        out = []
        for k in range(n):
            self.n += 1
            out.append(RecordIn.of({"n": self.n, "k": k, "pad": "p" * (self.n % 7)}, tag=tag))
        return out

    def _evict(self, m: MTopic) -> None:
        cap = m.cfg.cap_records
        while cap and len(m.live) > cap:
            s = min(m.live)
            data, tag, rank = m.live.pop(s)
            m.fragile.discard(s)
            m.ghosts[s] = (data, tag, rank, "evicted")

    def _kill(self, m: MTopic, seqs: list[int]) -> None:
        why = "deleted-sync" if m.cfg.durability is Durability.FSYNC else "deleted-buf"
        for s in seqs:
            data, tag, rank = m.live.pop(s)
            m.fragile.discard(s)
            m.ghosts[s] = (data, tag, rank, why)

    @initialize(
        classes=st.lists(st.sampled_from(CLASSES), min_size=2, max_size=2),
        caps=st.lists(st.sampled_from([0, 0, 3, 5]), min_size=2, max_size=2),
    )
    def start_with_topics(self, classes: list[Durability], caps: list[int]) -> None:
        for name, cls, cap in zip(NAMES, classes, caps, strict=False):
            self.put_topic(name, cls, cap)

    # ---- control plane ----------------------------------------------------------------
    @rule(
        name=st.sampled_from(NAMES),
        cls=st.sampled_from(CLASSES),
        cap=st.sampled_from([0, 0, 3, 5]),
    )
    def put_topic(self, name: str, cls: Durability, cap: int) -> None:
        cfg = TopicConfig(durability=cls, cap_records=cap)
        res = self.e.put_topic(name, cfg)
        m = self.topics.get(name)
        assert res.created == (m is None)
        if m is None:
            self.topics[name] = MTopic(cfg)
            return
        m.cfg = cfg
        if RANK[cls] <= 1:  # downgrade: earlier records may now vanish in a crash
            m.live = {s: (d, t, min(r, RANK[cls])) for s, (d, t, r) in m.live.items()}
            m.floor = 0
        self._evict(m)

    @rule(name=st.sampled_from(NAMES))
    def drop_topic(self, name: str) -> None:
        res = self.e.drop_topic(name)
        assert res.deleted == (name in self.topics)
        self.topics.pop(name, None)

    # ---- writes -----------------------------------------------------------------------
    @rule(name=st.sampled_from(NAMES), n=st.integers(1, 4), tag=st.sampled_from(TAGS))
    def write(self, name: str, n: int, tag: str | None) -> None:
        recs = self._records(n, tag)
        m = self.topics.get(name)
        if m is None:
            with pytest.raises(SeglogError) as err:
                self.e.write(name, recs, create=False)
            assert err.value.code is ErrorCode.TOPIC_NOT_FOUND
            return
        res = self.e.write(name, recs, create=False)
        assert res.seqs == list(range(res.first_seq, res.first_seq + n))
        if m.next_seq is not None:
            assert res.first_seq == m.next_seq, "seqs are reserved contiguously at the tail"
        assert res.first_seq > max(m.assigned, m.floor), (
            f"seq {res.first_seq} handed out again (assigned {m.assigned}, floor {m.floor})"
        )
        for s, r in zip(res.seqs, recs, strict=True):
            m.live[s] = (r.data_json, tag, m.rank)
            m.ghosts.pop(s, None)  # a memory seq lost in a crash may be handed out again
        m.next_seq = res.last_seq + 1
        m.assigned = res.last_seq
        if m.rank >= 2:
            m.floor = res.last_seq
        self._evict(m)

    @precondition(lambda self: any(m.rank >= 1 for m in self.topics.values()))
    @rule(data=st.data(), n=st.integers(1, 3), how=st.sampled_from(FAULTS))
    def failing_write(self, data: st.DataObject, n: int, how: str) -> None:
        persistent = sorted(k for k, m in self.topics.items() if m.rank >= 1)
        name = data.draw(st.sampled_from(persistent))
        m = self.topics[name]
        if how == "fsync-eio" and m.cfg.durability is not Durability.FSYNC:
            how = "write-eio"  # only an fsync-gated batch is sure to sync
        recs = self._records(n, "x")
        marker = recs[0].data_json
        if how == "fsync-eio":
            self.hooks.fail_sync_after(marker)
        elif how == "write-eio":
            self.hooks.fail_write(marker)
        else:
            errno_ = 28 if how == "write-enospc" else 5

            def torn(path: object, data: bytes) -> WriteFault | None:
                if marker in data and not fired:
                    fired.append(1)
                    return WriteFault(keep=len(data) - 1, errno=errno_)
                return None

            fired: list[int] = []
            self.hooks.write_rules.append(torn)
        try:
            with pytest.raises(SeglogError) as err:
                self.e.write(name, recs, create=False)
        finally:
            self.hooks.write_rules.clear()
            self.hooks.sync_rules.clear()
        assert err.value.code is ErrorCode.INTERNAL, err.value
        self.failed.update(r.data_json for r in recs)
        if m.next_seq is not None:
            m.next_seq += n  # its seqs stay holes (SEMANTICS §3.1)
            m.assigned = m.next_seq - 1

    # ---- deletes ----------------------------------------------------------------------
    @rule(name=st.sampled_from(NAMES), before=st.integers(1, 40))
    def delete_before(self, name: str, before: int) -> None:
        m = self.topics.get(name)
        if m is None:
            with pytest.raises(SeglogError):
                self.e.delete_records(name, before_seq=before)
            return
        res = self.e.delete_records(name, before_seq=before)
        killed = [s for s in m.live if s < before]
        assert res.deleted == len(killed)
        self._kill(m, killed)

    @rule(name=st.sampled_from(NAMES), tag=st.sampled_from(TAGS[:2]))
    def delete_tag(self, name: str, tag: str) -> None:
        m = self.topics.get(name)
        if m is None:
            return
        res = self.e.delete_records(name, match=Selector("Eq", tag))
        killed = [s for s, (_d, t, _r) in m.live.items() if t == tag]
        assert res.deleted == len(killed)
        self._kill(m, killed)

    @precondition(lambda self: bool(self.topics))
    @rule(data=st.data(), tag=st.sampled_from(TAGS[:2]))
    def delete_with_flag_flip_eio(self, data: st.DataObject, tag: str) -> None:
        """An EIO on a sealed record's delete-flag flip: a clean internal error at worst."""
        name = data.draw(st.sampled_from(sorted(self.topics)))
        m = self.topics[name]
        self.hooks.fail_path_write(
            lambda p, d: "/topics/" in str(p) and str(p).endswith(".data") and len(d) == 1,
            WriteFault(),
        )
        killed = [s for s, (_d, t, _r) in m.live.items() if t == tag]
        try:
            self.e.delete_records(name, match=Selector("Eq", tag))
            ok = True
        except SeglogError as err:
            assert err.code is ErrorCode.INTERNAL, err
            ok = False
        finally:
            self.hooks.write_rules.clear()
        if ok:
            self._kill(m, killed)
            return
        # outcome unknown: adopt what the engine shows, but a crash may go either way
        visible = set(read_all(self.e, name))
        if visible.isdisjoint(killed):
            self._kill(m, killed)
            for s in killed:
                d, t, r, _why = m.ghosts[s]
                m.ghosts[s] = (d, t, r, "maybe")
        else:
            m.fragile.update(killed)

    # ---- maintenance ------------------------------------------------------------------
    @rule()
    def take_snapshot(self) -> None:
        snapshot(self.e)

    @precondition(lambda self: bool(self.topics))
    @rule(data=st.data(), force=st.booleans())
    def seal(self, data: st.DataObject, force: bool) -> None:
        name = data.draw(st.sampled_from(sorted(self.topics)))
        seal_topic(self.e, self.e.topics[name], force=force)

    @rule(ms=st.integers(1, 5000))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    # ---- restarts ---------------------------------------------------------------------
    @rule(how=st.sampled_from(RESTARTS), shards=st.integers(1, 3))
    def restart(self, how: str, shards: int) -> None:
        if how == "clean":
            self.e.close()
            fs = self.fs
        else:
            fs = image(self.fs, "process" if how == "process" else "power")
            abandon(self.e, self.fs)
        self.fs, self.shards = fs, shards
        self.e = self._open(fs, shards)
        for name, m in self.topics.items():
            assert name in self.e.topics, f"acked topic {name} lost ({how})"
            assert self.e.topics[name].config == m.cfg, f"{name}: config reverted ({how})"
            self._reconcile(name, m, how, read_all(self.e, name))
        for name in set(self.e.topics) - set(self.topics):
            pytest.fail(f"dropped topic {name} is back after a {how} restart")

    def _reconcile(self, name: str, m: MTopic, how: str, got: dict[int, Record]) -> None:
        """Check a restarted topic against the model, then adopt the survivors."""
        power = how == "power"
        ranks: dict[int, int] = {}
        for s, r in got.items():
            assert r.data_json not in self.failed, f"{name}:{s} failed write resurrected ({how})"
            if s in m.live:
                data, tag, ranks[s] = m.live[s]
            else:
                assert s in m.ghosts, f"{name}:{s} {r.data_json!r} was never acked here ({how})"
                data, tag, ranks[s], why = m.ghosts[s]
                allowed = why in ("evicted", "maybe") or (why == "deleted-buf" and power)
                assert how != "clean" and allowed, f"{name}:{s} deleted record is back ({how})"
            assert (r.data_json, r.tag) == (data, tag), f"{name}:{s} altered ({how})"
        cap = m.cfg.cap_records
        if cap:
            assert len(got) <= cap, f"{name}: {len(got)} live records above cap {cap} ({how})"
        for s, (data, _tag, rank) in m.live.items():
            if s in got or s in m.fragile:
                continue
            # memory: "normally everything survives, no promise", even after a clean restart
            need = rank >= 2 if how == "clean" else rank == 3 or (rank == 2 and not power)
            if cap and sum(1 for x in got if x > s) >= cap:
                need = False  # the newest `cap` live records are kept, this one is older
            assert not need, f"{name}: acked record seq {s} {data!r} lost after a {how} restart"
        # adopt the survivors; what did not survive may still come back later
        for s, (data, tag, rank) in m.live.items():
            if s not in got:
                m.ghosts[s] = (data, tag, rank, "maybe")
        for s in got:
            m.ghosts.pop(s, None)
        m.live = {s: (r.data_json, r.tag, ranks[s]) for s, r in got.items()}
        m.fragile = set()
        if how == "clean":  # the shutdown snapshot keeps the head: no seq is reused
            m.floor = max([m.floor, m.assigned, *got])
        elif m.rank >= 2:
            m.floor = max([m.floor, *got])
        else:  # memory/ephemeral: the head may regress to the highest survivor
            m.floor = max(got, default=0)
        m.next_seq = None
        m.assigned = 0

    # ---- the live engine equals the model ---------------------------------------------
    @invariant()
    def engine_matches_model(self) -> None:
        e = self.e
        assert set(e.topics) == set(self.topics)
        for name, m in self.topics.items():
            assert e.topics[name].config == m.cfg
            got = {s: (r.data_json, r.tag) for s, r in read_all(e, name).items()}
            want = {s: (d, t) for s, (d, t, _r) in m.live.items()}
            assert got == want, f"{name}: live records differ from the model"
            assert e.get_topic(name, touch=False).count == len(want)


# The default ("ci") profile runs a small, reproducible sample; other profiles
# (HYPOTHESIS_PROFILE=slow: >= 1000 examples, see tests/conftest.py) set the count.
CI = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci"
EngineModel.TestCase.settings = settings(
    max_examples=60 if CI else settings().max_examples,
    deadline=None,
    derandomize=CI,
    # CI: report the first failing history as found (≤ 30 steps); shrinking several distinct
    # engine bugs can take minutes. The slow profile shrinks.
    phases=[p for p in Phase if p is not Phase.shrink] if CI else list(Phase),
    report_multiple_bugs=not CI,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestEngineModel = EngineModel.TestCase


def test_a_record_batch_is_its_records_as_columns() -> None:
    from seglog.model import RecordBatch, RecordIn

    records = [
        RecordIn(b"1"),
        RecordIn(b"[2]", b'{"m":1}', "n", "t"),
        RecordIn(b'"3"', None, None, "u"),
    ]
    batch = RecordBatch.of(records)
    assert RecordBatch.of(batch) is batch
    assert list(batch) == records and [batch[i] for i in range(3)] == records
    assert len(batch) == 3 and batch == RecordBatch.of(list(records))
    assert batch.sizes() == [1, 3 + 7, 3]
    filled = batch.with_node("b")
    assert [r.node for r in filled] == ["b", "n", "b"] and [r.node for r in batch] == [
        None,
        "n",
        None,
    ]
    assert filled.with_node("c") is filled  # every record has a node already
    copy = batch.copy()
    assert copy == batch and copy.data is not batch.data
    with pytest.raises(ValueError, match="differ in length"):
        RecordBatch([b"1"], [], [None], [None])
