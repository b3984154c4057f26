"""What one live fan-out round costs seglog's own Python per parked WebSocket, in process:
N `WsSession`s subscribed to one topic and parked in a `LiveFanout`, a feed that answers
each read with one new 60-byte record, and a server `send` that does nothing (returns a
completed future-like object, as granian's does once its I/O thread is done). The
difference from a round's cost in the server (bench_live) is the HTTP server's own send.

usage: python benchmarks/bench_ws_round.py [sockets] [rounds]
"""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace
from typing import Any

import orjson

from seglog.clock import ManualClock
from seglog.http.app_state import RAW_SEND
from seglog.http.live_fanout import LiveFanout
from seglog.http.topic_feed import FeedBatch, TopicFeed
from seglog.http.watch_request import DeliveryOptions
from seglog.http.ws_session import WsSession, _Sub


class OneRecordFeed(TopicFeed):
    def __init__(self) -> None:
        self.head = 0
        self._last: tuple[int, FeedBatch] | None = None

    async def read(self, topic: str, cursor: int, opts: DeliveryOptions) -> FeedBatch:
        if self._last is not None and self._last[0] == cursor:
            return self._last[1]  # shared by every socket at this cursor, as the cache does
        records = [{"$seq": s, "data": "x" * 60} for s in range(cursor + 1, self.head + 1)]
        batch = FeedBatch(
            topic=topic,
            topic_json=orjson.dumps(topic),
            tombstone=None,
            start=cursor,
            next_cursor=self.head,
            head_seq=self.head,
            earliest_seq=1,
            count=len(records),
            records_json=orjson.dumps(records),
        )
        self._last = (cursor, batch)
        return batch


class DoneSend:
    """A completed future-like answer (what `asyncio.isfuture` accepts)."""

    __slots__ = ()
    _asyncio_future_blocking = False

    def done(self) -> bool:
        return True

    def cancelled(self) -> bool:
        return False

    def exception(self) -> None:
        return None


def send(message: dict[str, Any]) -> DoneSend:
    return DoneSend()


async def run(sockets: int, rounds: int) -> float:
    feed = OneRecordFeed()
    fanout = LiveFanout(feed, writers_active=lambda: False)
    parked = []
    for _ in range(sockets):
        ws = SimpleNamespace(scope={RAW_SEND: send}, send=None)
        st = SimpleNamespace(engine=SimpleNamespace(clock=ManualClock()), fanout=fanout)
        session = WsSession(ws, st, None)  # type: ignore[arg-type]
        session._outbound.start("subscribed")  # its first send: the server's are futures
        session._subs = {"t": _Sub(0, DeliveryOptions(), tailing=True)}
        parked.append(asyncio.ensure_future(fanout.park(session, ["t"], 3600)))
    await asyncio.sleep(0)
    spent = 0.0
    for _ in range(rounds):
        feed.head += 1
        t0 = time.perf_counter()
        fanout.wake("t")  # runs the round here: its reads complete at once
        spent += time.perf_counter() - t0
    served = fanout.counters.served
    for p in parked:
        p.cancel()
    await asyncio.gather(*parked, return_exceptions=True)
    if served != sockets * rounds:
        raise SystemExit(f"served {served} of {sockets * rounds}: the rounds did not run")
    return spent / rounds


def main() -> None:
    sockets = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    for _ in range(3):
        per_round = asyncio.run(run(sockets, rounds))
        print(
            f"{sockets} sockets: {per_round * 1e6:,.0f} µs per round, "
            f"{per_round / sockets * 1e6:.2f} µs per socket",
            flush=True,
        )


if __name__ == "__main__":
    main()
