"""`ServerState` and the handlers' access to it.

It lives below both the route table (`app`) and the route modules (`topics`, `records`,
`health`, `metrics_snapshot`) so that every one of them imports it and none imports `app`:
the package's import graph stays acyclic (tests/http/test_import_graph.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass, field

from starlette.requests import Request

from seglog.config import Settings
from seglog.engine.aio import AppendWaiters, Kick
from seglog.engine.engine import Engine
from seglog.errors import throttled
from seglog.http.async_engine import AsyncEngine
from seglog.http.auth import KeyRing
from seglog.http.live_fanout import LiveFanout, ParkedStream, ParkResult, Signal
from seglog.http.metrics_text import DeliveryMetrics
from seglog.http.stream_slots import StreamSlots
from seglog.http.topic_feed import TopicFeed
from seglog.http.watch_sessions import WatchSessions

log = logging.getLogger("seglog.http")
GATHER_WINDOW_S = 0.002
RAW_SEND = "seglog.raw_send"  # scope key: the server's own `send`, set by `app.Guard`
STATE = "seglog.state"  # scope key: the `ServerState`, set by `app.Guard`


@dataclass
class ServerState:
    """Owner of the server-wide mutable state that is not the engine's: per-key in-flight
    counters, the asyncio append waiters, the shutdown flag. Touched only on the loop."""

    engine: Engine
    settings: Settings
    keyring: KeyRing
    recovery_done: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: AppendWaiters | None = None
    shutting_down: bool = False
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set with shutting_down
    inflight: dict[str, int] = field(default_factory=dict)
    # Per queue topic, per `/work` connection: set when the stream may refill (its jobs
    # acked, or jobs released for anyone), so it refills at once instead of at its next
    # 250 ms re-check.
    work_kicks: dict[str, dict[int, Kick]] = field(default_factory=dict)
    started_monotonic: float = 0.0

    def __post_init__(self) -> None:
        self.db = AsyncEngine(self.engine)  # how handlers reach the engine
        s = self.settings
        self.watch = WatchSessions(self.engine.clock, s.max_watch_sessions)
        self.slots = StreamSlots(s.max_sse_connections, s.max_sse_connections_per_key)
        self.feed = TopicFeed(self.db)
        self.fanout = LiveFanout(self.feed, writers_active=self.db.writers_active)

    async def wait_for_append(
        self, topics: list[str], timeout_s: float, kick: Kick | None = None
    ) -> bool:
        """Wait for an append to (or the deletion of) any of `topics`, shutdown, or `kick`."""
        if self.shutting_down:
            return False
        self.start(asyncio.get_running_loop())  # a stream may open before `serve` calls it
        assert self.waiters is not None
        return await self.waiters.wait(topics, timeout_s, kick)

    def queue_settled(self, topic: str, conns: Collection[int] | None = None) -> None:
        """Jobs of `topic` were settled: wake the `/work` streams of `conns` (an ack only
        frees room on the streams that held the jobs), or all of the topic's (a nack or a
        release makes jobs claimable by any of them). Waking every stream on every ack
        made each one re-check its leases for nothing (BENCHMARKS.md, "Queues: the request
        path")."""
        streams = self.work_kicks.get(topic)
        if not streams:
            return
        if conns is None:
            for kick in streams.values():
                kick.set()
            return
        for conn in conns:
            held = streams.get(conn)
            if held is not None:
                held.set()

    def work_kick(self, topic: str, conn: int) -> Kick:
        """The flag `queue_settled` sets for the `/work` stream `conn` of `topic`."""
        streams = self.work_kicks.setdefault(topic, {})
        kick = streams.get(conn)
        if kick is None:
            kick = streams[conn] = Kick()
        return kick

    def drop_work_kick(self, topic: str, conn: int) -> None:
        streams = self.work_kicks.get(topic)
        if streams is not None:
            streams.pop(conn, None)
            if not streams:
                del self.work_kicks[topic]

    async def park(
        self, stream: ParkedStream, topics: list[str], timeout_s: float, kick: bool
    ) -> ParkResult:
        """Park an idle watch stream on `topics` (see `live_fanout`)."""
        if self.shutting_down:
            return Signal.WAKE
        self.start(asyncio.get_running_loop())
        return await self.fanout.park(stream, topics, timeout_s, kick)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.waiters is None:
            self.waiters = AppendWaiters(self.engine, loop, self._on_pressure)
            self.waiters.hook = self.fanout
            self.waiters.scheduler.start_probe()

    def _on_pressure(self, level: int) -> None:
        """The pressure ladder's second rung: widen the group-commit window."""
        wal = self.engine.wal
        if wal is not None:
            wal.set_gather_window(GATHER_WINDOW_S if level >= 2 else 0.0)
        # Levels 1-3 come and go many times a second under a write burst: not worth a
        # line each (`topics_delivery_pressure_level` shows them). Refusing writes is.
        if level >= 4:
            log.warning("delivery pressure level %d: new writes are refused (429)", level)
        else:
            log.debug("delivery pressure level %d", level)

    def check_write_pressure(self) -> None:
        """The ladder's last rung: refuse new record writes while delivery is overloaded."""
        sch = self.waiters.scheduler if self.waiters is not None else None
        if sch is not None and sch.refuses_writes:
            sch.counters.throttled_writes += 1
            raise throttled("delivery is overloaded; retry shortly", {"limit": "delivery_pressure"})

    def delivery_metrics(self) -> DeliveryMetrics:
        if self.waiters is None:
            return DeliveryMetrics()
        sch = self.waiters.scheduler
        c = sch.counters
        return DeliveryMetrics(
            pressure_level=sch.level,
            lag_ms=max(sch.lag_ms(), sch.loop_lag_ms),
            band_depths=sch.depths,
            marked=c.marked,
            coalesced=c.coalesced,
            woken=c.woken,
            deferred_passes=c.deferred_passes,
            throttled_writes=c.throttled_writes,
            max_wait_ms=c.max_wait_ms,
            fanout_broadcasts=self.fanout.counters.broadcasts,
            fanout_served=self.fanout.counters.served,
            fanout_handed=self.fanout.counters.handed,
            fanout_woken=self.fanout.counters.woken,
        )

    async def begin_shutdown(self, grace_s: float = 2.0) -> None:
        """Tell open streams and sockets to say goodbye (`server_shutting_down`), and give
        them up to `grace_s` to do it before the HTTP server cuts connections."""
        self.shutting_down = True
        self.stopping.set()
        if self.waiters is not None:
            self.waiters.wake_all()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self.slots.total and loop.time() < deadline:
            await asyncio.sleep(0.01)


def server_state(request: Request) -> ServerState:
    """Read from the scope, where `app.Guard` put it: several times cheaper than Starlette's
    `request.app.state`, and handlers ask for it more than once per request."""
    st = request.scope[STATE]
    assert isinstance(st, ServerState)
    return st
