"""What a router reading or feeding a queue costs its acks (in process).

A delete on a topic that a router reads, and a durable one (an `fsync` queue's ack) on a
topic a router feeds, settles the router first: a snapshot whenever it moved since the
last one (docs/storage.md, "Router copies and floors across a crash"). Each round writes
10 jobs (into the queue, or into the router's source when it feeds the queue), forwards,
claims them and acks them, so every settled ack needs a snapshot; the baseline is the
same queue without a router, in the same run. Also reported: a backlog drained after one
snapshot saw it forwarded (acks of a queue a router reads then take no snapshot).

    python benchmarks/bench_settle.py [--rounds 300] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench_engine import open_engine

from seglog.core.leases import Claimer
from seglog.model import Durability, RecordIn, TopicConfig, TopicType
from seglog.router_model import RouterSpec

ROUTERS = {"read": RouterSpec("audit", "q", "log"), "fed": RouterSpec("feed", "events", "q")}


def acked_right_after_forwarding(root: Path, routed: str, durability: str, rounds: int) -> float:
    e = open_engine(root)
    try:
        e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability(durability)))
        if routed:
            e.put_router(ROUTERS[routed])
        into = "events" if routed == "fed" else "q"
        t0 = time.perf_counter()
        for i in range(rounds):
            e.write(into, [RecordIn.of({"j": i, "k": k}) for k in range(10)], create=True)
            if routed:
                e.forwarder.forward_all()
            jobs = e.queues.claim("q", [Claimer("w", 10)], None).jobs[0]
            e.queues.ack("q", "w", [j.record.seq for j in jobs], [j.lease_id for j in jobs])
        return rounds * 10 / (time.perf_counter() - t0)
    finally:
        e.close()


def backlog(root: Path, routed: str, durability: str, jobs: int) -> float:
    e = open_engine(root)
    try:
        e.put_topic("q", TopicConfig(type=TopicType.QUEUE, durability=Durability(durability)))
        if routed:
            e.put_router(ROUTERS["read"])
        e.write("q", [RecordIn.of({"j": i}) for i in range(jobs)])
        e.forwarder.forward_all()
        e.snapshot()
        t0 = time.perf_counter()
        while got := e.queues.claim("q", [Claimer("w", 10)], None).jobs[0]:
            e.queues.ack("q", "w", [j.record.seq for j in got], [j.lease_id for j in got])
        return jobs / (time.perf_counter() - t0)
    finally:
        e.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    for durability in ("disk", "fsync"):
        cells: dict[str, list[float]] = {}
        for _ in range(a.reps):
            for name, fn, n, routed in (
                ("acked after forwarding, plain", acked_right_after_forwarding, a.rounds, ""),
                ("acked after forwarding, read", acked_right_after_forwarding, a.rounds, "read"),
                ("acked after forwarding, fed", acked_right_after_forwarding, a.rounds, "fed"),
                ("backlog, plain", backlog, a.rounds * 10, ""),
                ("backlog, read", backlog, a.rounds * 10, "read"),
            ):
                with tempfile.TemporaryDirectory() as d:
                    rate = fn(Path(d) / "data", routed, durability, n)
                cells.setdefault(name, []).append(rate)
        for cell, rates in cells.items():
            runs = ", ".join(f"{r:,.0f}" for r in rates)
            print(
                f"{durability:5} {cell:32} median {statistics.median(rates):>9,.0f} jobs/s ({runs})"
            )


if __name__ == "__main__":
    main()
