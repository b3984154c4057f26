"""In-process cost of live fan-out: the server's own Python per delivered SSE frame, without
sockets, granian or a load generator. An engine (`memory` topic), N `WatchStream`s tailing
one topic with a send that only builds the ASGI message (granian copies the bytes into its
channel and returns a done awaitable, so that is what the loop pays per chunk), and one
writer appending single records paced at `--rate`/s on the same uvloop loop.

Reported: the loop thread's CPU per second, frames and records delivered, and µs of loop
CPU per frame after subtracting the writer-alone run measured first in the same process.

usage: python benchmarks/bench_fanout.py [--watchers 100] [--rate 1000] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from seglog.clock import SystemClock
from seglog.engine.aio import AppendWaiters
from seglog.engine.engine import Engine, EngineOptions
from seglog.http.async_engine import AsyncEngine
from seglog.http.live_fanout import LiveFanout
from seglog.http.topic_feed import TopicFeed
from seglog.http.watch_request import DeliveryOptions
from seglog.http.watch_sessions import WatchSessions
from seglog.http.watch_stream import WatchStream
from seglog.model import RecordIn, TopicConfig


async def run(
    watchers: int, rate: int, seconds: float, data_dir: Path, park: bool
) -> dict[str, Any]:
    engine = Engine(EngineOptions(data_dir=data_dir))
    engine.open()
    try:
        db = AsyncEngine(engine)
        loop = asyncio.get_running_loop()
        waiters = AppendWaiters(engine, loop)
        feed = TopicFeed(db)
        fanout = LiveFanout(feed, idle_factor=0.0)  # per-frame cost, not the pacing
        if park:
            waiters.hook = fanout
        clock = SystemClock()
        sessions = WatchSessions(clock, 0)
        topic = "fan"
        await db.put_topic(topic, TopicConfig.from_dict({"durability": "memory"}))
        frames = 0
        nbytes = 0

        async def send(data: bytes) -> None:
            nonlocal frames, nbytes
            _msg = {"type": "http.response.body", "body": data, "more_body": True}
            frames += 1
            nbytes += len(data)

        tasks = []
        for _ in range(watchers):
            s = sessions.create(None, {topic: DeliveryOptions()}, 15_000, {topic: 0})
            st = WatchStream(
                s,
                feed,
                waiters.wait,
                db.head_of,
                clock,
                lambda: False,
                None,
                fanout.park if park else None,
            )
            tasks.append(asyncio.ensure_future(st.run(send)))
        await asyncio.sleep(0.2)
        f0, b0 = frames, nbytes
        rec = [
            RecordIn(data_json=b'{"k":"%d","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}' % i)
            for i in range(10)
        ]
        kw = {"node": None, "idempotency_key": None, "create": None, "config": None}
        c0 = time.thread_time()
        t0 = time.perf_counter()
        n = 0
        while (now := time.perf_counter()) - t0 < seconds:
            due = t0 + n / rate
            if due > now:
                await asyncio.sleep(due - now)
            await db.write(topic, rec[n % 10 : n % 10 + 1], **kw)
            n += 1
        await asyncio.sleep(0.3)  # let the last deliveries go out
        c1 = time.thread_time()
        dt = time.perf_counter() - t0
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        waiters.close()
        return {
            "watchers": watchers,
            "writes": n,
            "loop_cpu": round((c1 - c0) / dt, 3),
            "cpu_s": c1 - c0,
            "frames": frames - f0,
            "bytes": nbytes - b0,
            "feed_reads": feed.reads,
            "fanout": fanout.counters,
        }
    finally:
        engine.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--watchers", type=int, default=100)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    uvloop.install()
    with tempfile.TemporaryDirectory() as d:
        base = asyncio.run(run(0, a.rate, a.seconds, Path(d) / "a", False))
        print(f"writer alone: {base['writes']} writes, loop CPU {base['loop_cpu']:.3f}")
        for i, park in enumerate((False, True)):
            res = asyncio.run(run(a.watchers, a.rate, a.seconds, Path(d) / f"b{i}", park))
            extra = res["cpu_s"] - base["cpu_s"] * res["writes"] / max(base["writes"], 1)
            print(
                f"{a.watchers} watchers, {'parked' if park else 'woken'}: {res['writes']} writes, "
                f"loop CPU {res['loop_cpu']:.3f}, {res['frames']} frames "
                f"({res['frames'] / max(res['writes'], 1):.1f}/write), "
                f"{extra / max(res['frames'], 1) * 1e6:.1f} µs loop CPU per frame beyond the "
                f"writes, feed reads {res['feed_reads']}, {res['fanout']}"
            )


if __name__ == "__main__":
    main()
