"""Property: whatever the interleaving of source writes, forwarding passes, snapshots,
crashes (no final snapshot) and graceful restarts, a router from an `fsync` source with no
other dest writers keeps SEMANTICS §8.4's promises: per-source FIFO, no silent loss (an
evicted record surfaces as a `source_trim` hole), and deterministic dest seqs — with no
filter and no source deletes the k-th source seq lands at dest seq k exactly."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.clock import ManualClock
from seglog.engine.engine import Engine, EngineOptions
from seglog.model import Durability, RecordIn, TopicConfig
from seglog.router_model import RouterSpec

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 5)),
        st.tuples(st.just("forward"), st.just(0)),
        st.tuples(st.just("snapshot"), st.just(0)),
        st.tuples(st.just("crash"), st.just(0)),
        st.tuples(st.just("restart"), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


def _open(path: Path, clock: ManualClock) -> Engine:
    e = Engine(EngineOptions(data_dir=path, wal_shards=2), clock=clock)
    e.open()
    return e


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.sampled_from([0, 3, 7]))
def test_router_dest_mirrors_the_source(ops: list[tuple[str, int]], cap: int) -> None:
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data"
        e = _open(path, clock)
        try:
            e.put_topic("src", TopicConfig(durability=Durability.FSYNC, cap_records=cap))
            e.put_router(RouterSpec("r", "src", "dst"))
            written: dict[int, Any] = {}
            n = 0
            for op, k in ops:
                if op == "write":
                    res = e.write("src", [RecordIn.of(n + i) for i in range(k)])
                    written.update(zip(res.seqs, range(n, n + k), strict=True))
                    n += k
                elif op == "forward":
                    e.forwarder.forward_all()
                elif op == "snapshot":
                    e.snapshot()
                else:
                    e.close(snapshot=op == "restart")
                    e = _open(path, clock)
            e.forwarder.forward_all()
            d = e.topics["dst"]
            head = e.topics["src"].head
            assert d.head == head == max(written, default=0)
            live = {}
            cursor = 0
            while True:
                r = e.read("dst", cursor, limit=1000)
                live.update({x.seq: x.data for x in r.records})
                cursor = r.next_from_seq
                if r.caught_up:
                    break
            for seq, value in live.items():
                assert written[seq] == value, (seq, value)  # same seq, same record
            for seq in written:
                # every source record is in the dest, or behind a source-trim floor
                assert seq in live or seq <= d.source_trim_floor, seq
            if cap == 0:
                assert live == written and d.source_trim_floor == 0
            router = e.routers.get("r")
            assert router is not None and router.forwarded_total == head
        finally:
            e.close(snapshot=False)
