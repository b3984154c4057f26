"""Property tests: random write / evict / expire / delete / read / restart sequences.

Model: every written record (seq → bytes) and every voluntary delete. Checked after each
step for readers at arbitrary cursors:
- seqs strictly increase and stay above the cursor;
- every returned record is byte-identical to what was written and not deleted;
- a record that is still live in the model is never silently skipped: it is returned or a
  tombstone's gap covers it (loss is never silent) — and with no cap/TTL configured there is
  never a tombstone at all (deleted gaps are silent);
- after a restart (clean or crash-like) state, floors, config and reads are unchanged.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from seglog.engine.maintenance import seal_topic
from seglog.model import Durability, RecordIn, Selector, TopicConfig

write = st.tuples(st.just("write"), st.integers(1, 8), st.sampled_from(["a", "b", None]))
advance = st.tuples(st.just("advance"), st.integers(1, 400), st.none())
delete_before = st.tuples(st.just("delete_before"), st.integers(0, 60), st.none())
delete_tag = st.tuples(st.just("delete_tag"), st.integers(0, 0), st.sampled_from(["a", "b"]))
restart = st.tuples(st.just("restart"), st.integers(0, 1), st.none())
seal = st.tuples(st.just("seal"), st.integers(0, 0), st.none())
ops = st.lists(
    st.one_of(write, write, advance, delete_before, delete_tag, restart, seal), max_size=25
)

configs = st.sampled_from(
    [
        TopicConfig(),
        TopicConfig(durability=Durability.FSYNC, cap_records=7),
        TopicConfig(ttl_ms=500),
        TopicConfig(durability=Durability.MEMORY, cap_bytes=60, ttl_ms=700),
    ]
)


class Harness:
    def __init__(self, root: Path, cfg: TopicConfig) -> None:
        self.root = root
        self.clock = ManualClock()
        self.cfg = cfg
        self.written: dict[int, tuple[bytes, str | None]] = {}
        self.deleted: set[int] = set()
        self.engine = self._open()
        self.engine.put_topic("p", cfg)

    def _open(self) -> Engine:
        e = Engine(
            EngineOptions(
                data_dir=self.root, wal_shards=2, segment_max_events=4, segment_payload_cache=3
            ),
            clock=self.clock,
        )
        e.open()
        return e

    def state(self) -> tuple[object, ...]:
        t = self.engine.topics["p"]
        return (
            t.earliest(),
            t.count,
            t.bytes,
            t.evict_floor,
            t.expiry_floor,
            t.delete_floor,
            t.config,
        )

    def read_from(self, cursor: int, limit: int = 3, max_bytes: int = 1_048_576) -> None:
        e = self.engine
        head = e.topics["p"].head
        seen: list[int] = []
        gaps: list[tuple[int, int]] = []
        pos = cursor
        for _ in range(400):
            r = e.read("p", pos, limit=limit, max_bytes=max_bytes)
            if r.tombstone is not None:
                assert self.cfg.has_retention or pos > head, r.tombstone
                gaps.append((r.tombstone.gap_from, r.tombstone.gap_to))
            for rec in r.records:
                assert rec.seq > pos and (not seen or rec.seq > seen[-1])
                assert rec.seq not in self.deleted
                assert self.written[rec.seq] == (rec.data_json, rec.tag)
                seen.append(rec.seq)
            assert r.next_from_seq >= pos or r.tombstone is not None
            pos = r.next_from_seq
            if r.caught_up:
                break
        assert pos == head
        live = set(self.engine.topics["p"].live_records())
        for s in live:
            if s > cursor:
                assert s in seen or any(a <= s <= b for a, b in gaps), (s, seen, gaps)
        if not self.cfg.has_retention:
            expect = [s for s in sorted(self.written) if s > cursor and s not in self.deleted]
            assert seen == expect

    def step(self, op: tuple[str, int, str | None]) -> None:
        kind, n, arg = op
        e = self.engine
        if kind == "write":
            res = e.write(
                "p", [RecordIn.of({"v": i, "pad": "x" * (i % 5)}, tag=arg) for i in range(n)]
            )
            for i, s in enumerate(res.seqs):
                self.written[s] = (RecordIn.of({"v": i, "pad": "x" * (i % 5)}).data_json, arg)
        elif kind == "advance":
            self.clock.advance(n)
        elif kind == "delete_before":
            e.delete_records("p", before_seq=n)
            self.deleted |= {s for s in self.written if s < n}
        elif kind == "delete_tag":
            assert arg is not None
            e.delete_records("p", match=Selector("Eq", arg))
            self.deleted |= {s for s, (_, tag) in self.written.items() if tag == arg}
        elif kind == "seal":
            seal_topic(e, e.topics["p"], force=True)
        elif kind == "restart":
            before = self.state()
            reads_before = [(x.seq, x.data_json) for x in e.read("p", 0, limit=1000).records]
            head_before = e.topics["p"].head
            crash = n == 1
            e.close(snapshot=not crash)
            self.engine = self._open()
            t = self.engine.topics["p"]
            reads_after = [
                (x.seq, x.data_json) for x in self.engine.read("p", 0, limit=1000).records
            ]
            if crash and self.cfg.durability is Durability.DISK:
                assert t.head >= head_before
            else:
                assert t.head == head_before
            if not (crash and self.cfg.durability is Durability.DISK and t.head != head_before):
                assert self.state() == before
            assert reads_after == reads_before
            # seqs above the recovered head were never acked by this model unless lost
            for s in list(self.written):
                if s > t.head:
                    del self.written[s]

    def check(self) -> None:
        head = self.engine.topics["p"].head
        for cursor in {0, 1, head // 2, max(head - 1, 0), head}:
            self.read_from(cursor)
        self.read_from(0, limit=1000, max_bytes=24)  # the byte budget ends most reads


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, steps=ops)
def test_random_histories_keep_reader_invariants(
    cfg: TopicConfig, steps: list[tuple[str, int, str | None]]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        h = Harness(Path(d) / "data", cfg)
        try:
            for op in steps:
                h.step(op)
                h.check()
        finally:
            if h.engine.wal is not None:
                h.engine.close(snapshot=False)
