"""`LiveFanout`: idle watch streams served from one shared read per wake (SEMANTICS §9).

The main property: a parked stream sends exactly the frames (events, data, ids) a stream
woken for its own read pass sends, through any mix of appends, node-filtered appends,
evictions (tombstones), limits and deletes — the fast path is an optimisation, never a
behaviour. Then the mechanics: nothing wakes a parked stream on the common path, frames are
built once per batch, a send that would block is finished by the stream's own task, and
everything off the path wakes the stream for its own pass.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.clock import ManualClock
from seglog.errors import SeglogError, topic_not_found
from seglog.http.live_fanout import BATCHES_PER_ROUND, IDLE_FACTOR, LiveFanout, Signal, start
from seglog.http.topic_feed import FeedBatch, TopicFeed
from seglog.http.watch_request import DeliveryOptions
from seglog.http.watch_sessions import WatchSession
from seglog.http.watch_stream import WatchStream
from seglog.model import Tombstone, TombstoneReason
from tests.http.test_live_watch import Frame, SseParser


class LogFeed(TopicFeed):
    """Topics of records 1..head; records at or below `evicted[t]` are gone (a read from
    before them gets a `cap` tombstone); records listed in `foreign[t]` come from node
    "x" and are skipped for readers that are node "x". Reads are pure functions of the
    state, as the real feed's are (it caches by read version)."""

    def __init__(self) -> None:
        self.heads: dict[str, int] = {}
        self.evicted: dict[str, int] = {}
        self.foreign: dict[str, set[int]] = {}
        self.deleted: set[str] = set()
        self.reads = 0

    async def read(self, topic: str, cursor: int, opts: DeliveryOptions) -> FeedBatch:
        self.reads += 1
        if topic in self.deleted:
            raise topic_not_found(topic)
        head, gone = self.heads[topic], self.evicted.get(topic, 0)
        tomb = None
        start_at = cursor
        if cursor < gone:
            tomb = Tombstone(
                gap_from=cursor + 1,
                gap_to=gone,
                reason=TombstoneReason.CAP,
                missed_estimate=gone - cursor,
                earliest_seq=gone + 1,
                head_seq=head,
            )
            start_at = gone
        examined = list(range(start_at + 1, head + 1))[: opts.limit]
        skip = self.foreign.get(topic, set()) if "x" in opts.nodes else set()
        seqs = [s for s in examined if s not in skip]
        return FeedBatch(
            topic=topic,
            topic_json=orjson.dumps(topic),
            tombstone=tomb,
            start=start_at,
            next_cursor=examined[-1] if examined else start_at,
            head_seq=head,
            earliest_seq=gone + 1,
            count=len(seqs),
            records_json=orjson.dumps([{"$seq": s, "data": s} for s in seqs]),
        )

    def head_of(self, topic: str) -> int:
        if topic in self.deleted:
            raise topic_not_found(topic)
        return self.heads[topic]


class Reader:
    """One watch stream over `feed`, either parked on `fanout` or woken by `bell`."""

    def __init__(
        self,
        feed: LogFeed,
        cursors: dict[str, int],
        opts: DeliveryOptions,
        bell: Bell,
        fanout: LiveFanout | None,
        send: Callable[[bytes], Awaitable[None]] | None = None,
    ) -> None:
        self.clock = ManualClock()
        session = WatchSession(
            wid="wid_t",
            owner_key=None,
            options={t: opts for t in cursors},
            heartbeat_ms=15_000,
            cursors=dict(cursors),
            last_access_ms=0,
        )
        self.parser = SseParser()
        self.frames: list[Frame] = []
        self.shutdown = False
        self.stream = WatchStream(
            session,
            feed,
            bell.wait,
            feed.head_of,
            self.clock,
            lambda: self.shutdown,
            park=fanout.park if fanout is not None else None,
        )
        self.task = asyncio.ensure_future(self.stream.run(send or self.receive))

    async def receive(self, data: bytes) -> None:
        self.frames.extend(self.parser.feed(data))

    def seen(self) -> list[tuple[str | None, Any, str | None]]:
        return [(f.event, f.data, f.id) for f in self.frames if f.event]


class Bell:
    """The plain wake-up (`AppendWaiters.wait` without the scheduler)."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[bool]] = []

    async def wait(self, topics: list[str], timeout_s: float) -> bool:
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        return await fut

    def ring(self) -> None:
        for fut in self.waiting:
            if not fut.done():
                fut.set_result(True)
        self.waiting.clear()


async def settle(gates: list[asyncio.Future[None]] | None = None) -> None:
    """Let every ready callback and task run (no clock involved: fan-out pacing is off),
    opening any `gates` (sends waiting for their client) as they appear."""
    for _ in range(60):
        while gates:
            gate = gates.pop()
            if not gate.done():
                gate.set_result(None)
        await asyncio.sleep(0)


def gated_send(reader: list[Reader], gates: list[asyncio.Future[None]]) -> Any:
    """A send that waits for its client on every other record frame (as a full socket
    does), so that parked streams hand sends over to their own tasks."""
    n = 0

    async def send(data: bytes) -> None:
        nonlocal n
        if b"event: record" in data:
            n += 1
            if n % 2:
                gate = asyncio.get_running_loop().create_future()
                gates.append(gate)
                await gate
        await reader[0].receive(data)

    return send


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from("ab"), st.integers(1, 5)),
        st.tuples(st.just("foreign"), st.sampled_from("ab"), st.integers(1, 3)),
        st.tuples(st.just("evict"), st.sampled_from("ab"), st.integers(1, 4)),
        st.tuples(st.just("delete"), st.sampled_from("ab"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(
    ops=OPS,
    topics=st.sampled_from([("a",), ("a", "b")]),
    limit=st.sampled_from([2, 256]),
    node_x=st.booleans(),
)
def test_parked_streams_send_what_woken_streams_send(
    ops: list[tuple[str, str, int]], topics: tuple[str, ...], limit: int, node_x: bool
) -> None:
    async def scenario() -> None:
        feed = LogFeed()
        for t in topics:
            feed.heads[t] = 3
        fanout = LiveFanout(feed, idle_factor=0.0)
        bell = Bell()
        opts = DeliveryOptions(limit=limit, nodes=frozenset({"x"}) if node_x else frozenset())
        cursors = {t: 0 for t in topics}
        gates: list[asyncio.Future[None]] = []
        parked = [Reader(feed, cursors, opts, bell, fanout) for _ in range(2)]
        slow_ref: list[Reader] = []
        slow = Reader(feed, cursors, opts, bell, fanout, gated_send(slow_ref, gates))
        slow_ref.append(slow)
        parked.append(slow)
        plain = Reader(feed, cursors, opts, bell, None)
        await settle(gates)
        for op, topic, n in ops:
            if topic not in topics or topic in feed.deleted:
                continue
            if op == "append":
                feed.heads[topic] += n
            elif op == "foreign":
                first = feed.heads[topic] + 1
                feed.heads[topic] += n
                feed.foreign.setdefault(topic, set()).update(range(first, first + n))
            elif op == "evict":  # a burst that a cap cuts down before anyone reads it
                feed.heads[topic] += n
                feed.evicted[topic] = feed.heads[topic] - 1
            else:
                feed.deleted.add(topic)
            fanout.wake(topic)
            bell.ring()
            await settle(gates)
        for r in (*parked, plain):
            r.shutdown = True
        fanout.wake_all()
        bell.ring()
        await settle(gates)
        want = plain.seen()
        assert plain.task.done()
        plain.task.result()
        for r in parked:
            assert r.seen() == want
            assert r.task.done()
            r.task.result()

    asyncio.run(scenario())


async def one_topic(n_streams: int, send: Any = None) -> tuple[LogFeed, LiveFanout, list[Reader]]:
    feed = LogFeed()
    feed.heads["a"] = 0
    fanout = LiveFanout(feed, idle_factor=0.0)
    readers = [
        Reader(feed, {"a": 0}, DeliveryOptions(), Bell(), fanout, send) for _ in range(n_streams)
    ]
    await settle()
    return feed, fanout, readers


async def test_one_read_and_one_frame_build_for_every_parked_stream() -> None:
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    feed, fanout, readers = await one_topic(3, send)
    reads, sent_before = feed.reads, len(sent)
    feed.heads["a"] = 2
    fanout.wake("a")
    await settle()
    assert feed.reads == reads + 1  # one read for the three streams
    new = sent[sent_before:]
    assert len(new) == 3 and new[0] is new[1] is new[2]  # the same bytes object
    assert b"event: record" in new[0] and b"event: caught-up" in new[0]
    assert fanout.counters.served == 3 and fanout.counters.woken == 0
    assert all(r.stream.session.cursors == {"a": 2} for r in readers)
    for r in readers:
        r.task.cancel()


async def test_a_send_that_would_block_is_finished_by_the_streams_own_task() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    got: list[bytes] = []
    blocking = True

    async def send(data: bytes) -> None:
        if blocking and b"event: record" in data:
            await gate  # the connection's body channel is full
        got.append(data)

    feed, fanout, (reader,) = await one_topic(1, send)
    feed.heads["a"] = 1
    fanout.wake("a")
    await settle()
    assert fanout.counters.handed == 1
    assert not any(b"event: record" in d for d in got)
    blocking = False
    gate.set_result(None)
    await settle()
    assert sum(b"event: record" in d for d in got) == 1
    feed.heads["a"] = 2  # parked again afterwards: served without waking
    fanout.wake("a")
    await settle()
    assert fanout.counters.served == 1
    assert reader.stream.session.cursors == {"a": 2}
    reader.task.cancel()


async def test_after_a_handed_send_a_backlog_is_still_walked_to_the_head() -> None:
    gates: list[asyncio.Future[None]] = []
    ref: list[Reader] = []
    feed = LogFeed()
    feed.heads["a"] = 0
    fanout = LiveFanout(feed, idle_factor=0.0)
    reader = Reader(feed, {"a": 0}, DeliveryOptions(), Bell(), fanout, gated_send(ref, gates))
    ref.append(reader)
    await settle()
    feed.heads["a"] = 256 * 3  # three batches; the first one's send has to wait
    fanout.wake("a")
    await settle(gates)  # no further append, no heartbeat: nothing else wakes it
    assert fanout.counters.handed >= 1
    assert reader.stream.session.cursors == {"a": 768}
    assert [f.event for f in reader.frames if f.event][-1] == "caught-up"
    reader.task.cancel()


async def test_a_failing_send_raises_in_the_streams_task() -> None:
    async def send(data: bytes) -> None:
        if b"event: record" in data:
            raise ConnectionError("gone")

    feed, fanout, (reader,) = await one_topic(1, send)
    feed.heads["a"] = 1
    fanout.wake("a")
    await settle()
    assert reader.task.done()
    with pytest.raises(ConnectionError):
        reader.task.result()


async def test_a_backlog_is_walked_by_the_broadcast_over_several_rounds() -> None:
    feed, fanout, readers = await one_topic(2)
    feed.heads["a"] = 256 * (BATCHES_PER_ROUND + 2)  # more than one round of batches
    fanout.wake("a")
    await settle()
    assert fanout.counters.woken == 0
    assert fanout.counters.broadcasts == -(-(BATCHES_PER_ROUND + 2) // BATCHES_PER_ROUND)
    assert fanout.counters.served == 2 * (BATCHES_PER_ROUND + 2)
    for r in readers:
        assert r.stream.session.cursors == {"a": feed.heads["a"]}
        events = [f.event for f in r.frames if f.event]
        assert events == ["caught-up"] + ["record"] * (BATCHES_PER_ROUND + 2) + ["caught-up"]
        r.task.cancel()


async def test_off_the_common_path_wakes_the_stream_for_its_own_pass() -> None:
    feed, fanout, (reader,) = await one_topic(1)
    feed.heads["a"] = 10
    feed.evicted["a"] = 9  # a tombstone: its reason depends on the stream's own history
    fanout.wake("a")
    await settle()
    assert fanout.counters.woken == 1 and fanout.counters.served == 0
    assert [f.event for f in reader.frames if f.event][-3:] == ["tombstone", "record", "caught-up"]
    assert reader.stream.session.cursors == {"a": 10}
    feed.deleted.add("a")
    fanout.wake("a")
    await settle()
    assert fanout.counters.woken == 2
    assert reader.task.done()
    assert [f.event for f in reader.frames][-1] == "topic-deleted"


async def test_park_times_out_and_wake_all_wakes() -> None:
    class Idle:
        def cursor_of(self, topic: str) -> int | None:
            return 0

        def options_of(self, topic: str) -> DeliveryOptions:
            return DeliveryOptions()

        def take_parked(self, topic: str, cursor: int, batch: FeedBatch) -> bytes | None:
            return None

        def push(self, frames: bytes) -> Awaitable[None]:
            raise AssertionError("nothing to push")

    fanout = LiveFanout(LogFeed(), idle_factor=0.0)
    assert await fanout.park(Idle(), ["a"], 0.0) is Signal.TIMEOUT
    assert not fanout.has_waiters("a")
    parked = asyncio.ensure_future(fanout.park(Idle(), ["a", "b"], 60.0))
    await settle()
    assert fanout.has_waiters("a") and fanout.has_waiters("b")
    fanout.wake_all()
    assert await parked is Signal.WAKE
    assert not fanout.has_waiters("a") and not fanout.has_waiters("b")
    idle = Idle()
    parked = asyncio.ensure_future(fanout.park(idle, ["a"], 60.0))
    await settle()
    fanout.release(Idle())  # another stream: nothing happens
    await settle()
    assert not parked.done()
    fanout.release(idle)
    assert await parked is Signal.WAKE
    assert not fanout.has_waiters("a")


async def test_feed_errors_wake_instead_of_breaking_the_round() -> None:
    class Broken(LogFeed):
        async def read(self, topic: str, cursor: int, opts: DeliveryOptions) -> FeedBatch:
            raise SeglogError(topic_not_found(topic).code, "gone")

    feed = Broken()
    feed.heads["a"] = 0
    fanout = LiveFanout(feed, idle_factor=0.0)
    reader = Reader(feed, {"a": 0}, DeliveryOptions(), Bell(), fanout)
    await settle()  # its first pass fails: a real feed raises the same to the stream
    assert reader.task.done()
    fanout.wake("a")  # nobody parked: nothing happens
    assert fanout.counters.broadcasts == 0


# --------------------------------------------------------------------------- start()


async def test_start_completes_at_once_or_hands_over_the_rest() -> None:
    async def immediate() -> int:
        return 7

    assert start(immediate()) is None

    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def later() -> int:
        return await fut + 1

    rest = start(later())
    assert rest is not None
    task = asyncio.ensure_future(rest)
    await settle()
    assert not task.done()
    fut.set_result(41)
    assert await task == 42


async def test_start_passes_cancellation_into_the_awaitable() -> None:
    cleaned: list[bool] = []
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def waits() -> None:
        try:
            await fut
        finally:
            cleaned.append(True)

    rest = start(waits())
    assert rest is not None
    task = asyncio.ensure_future(rest)
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


async def test_a_failing_round_wakes_its_streams_for_their_own_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Flaky(LogFeed):
        fail_next = False

        async def read(self, topic: str, cursor: int, opts: DeliveryOptions) -> FeedBatch:
            if self.fail_next:
                self.fail_next = False
                await asyncio.sleep(0)  # fail after suspending: the round runs in a task
                raise RuntimeError("bug in a round")
            return await super().read(topic, cursor, opts)

    feed = Flaky()
    feed.heads["a"] = 0
    fanout = LiveFanout(feed, idle_factor=0.0)
    reader = Reader(feed, {"a": 0}, DeliveryOptions(), Bell(), fanout)
    await settle()
    feed.heads["a"] = 2
    feed.fail_next = True
    fanout.wake("a")
    await settle()
    assert "live fan-out round failed" in caplog.text
    assert fanout.counters.woken == 1
    assert reader.stream.session.cursors == {"a": 2}  # its own pass delivered them
    assert [f.event for f in reader.frames if f.event][-2:] == ["record", "caught-up"]
    reader.task.cancel()


async def test_only_record_writes_count_as_writers_for_pacing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fan-out paces itself while writers are active: a record write counts from its
    start to its ack (or failure) and for RECENT_WRITE_S after it, and nothing else does
    (a diff long-poll is a POST but not a write)."""
    from seglog.http import async_engine

    release = asyncio.Event()

    async def finish(_engine: Any, pw: Any) -> Any:
        await release.wait()
        if pw == "fail":
            raise topic_not_found("t")
        return "acked"

    class Engine:
        def write_begin(self, name: str, records: Any, **_: Any) -> str:
            return name

    monkeypatch.setattr(async_engine, "finish_write", finish)
    db = async_engine.AsyncEngine(Engine())  # type: ignore[arg-type]
    kw: dict[str, Any] = {"node": None, "idempotency_key": None, "create": None, "config": None}
    ok = asyncio.ensure_future(db.write("ok", [], **kw))
    bad = asyncio.ensure_future(db.write("fail", [], **kw))
    await asyncio.sleep(0)
    assert db.writes_in_flight == 2
    release.set()
    assert await ok == "acked"
    with pytest.raises(SeglogError):
        await bad
    assert db.writes_in_flight == 0
    # A write that completed without waiting (a buffered write written inline) still
    # counts for a short while: a steady stream of them never shows up as "in flight".
    ended = db.last_write_end
    assert ended > 0
    assert db.writers_active(ended + async_engine.RECENT_WRITE_S / 2)
    assert not db.writers_active(ended + async_engine.RECENT_WRITE_S * 1.5)


def test_only_a_costly_round_with_writers_active_is_followed_by_a_pause() -> None:
    from seglog.http.live_fanout import IDLE_FACTOR, MIN_PACED_ROUND_S, pause_after_round

    big = MIN_PACED_ROUND_S * 5
    assert pause_after_round(big, IDLE_FACTOR, True) == big * IDLE_FACTOR
    assert pause_after_round(big, IDLE_FACTOR, False) == 0.0
    assert pause_after_round(MIN_PACED_ROUND_S / 2, IDLE_FACTOR, True) == 0.0
    assert pause_after_round(big, 0.0, True) == 0.0


def test_the_pause_follows_how_busy_the_rest_of_the_loop_kept_it() -> None:
    from seglog.http.live_fanout import (
        IDLE_BUSY,
        IDLE_FACTOR,
        MIN_PACED_ROUND_S,
        MIN_PAUSE_SHARE,
        SATURATED_BUSY,
        pause_after_round,
    )

    big = MIN_PACED_ROUND_S * 5
    full = big * IDLE_FACTOR
    least = full * MIN_PAUSE_SHARE  # a loop that reads idle may be a starved one
    assert 0.0 < least < full
    assert pause_after_round(big, IDLE_FACTOR, True, 1.0) == full
    assert pause_after_round(big, IDLE_FACTOR, True, SATURATED_BUSY) == full
    assert pause_after_round(big, IDLE_FACTOR, True, IDLE_BUSY) == pytest.approx(least)
    assert pause_after_round(big, IDLE_FACTOR, True, 0.0) == pytest.approx(least)
    middle = (IDLE_BUSY + SATURATED_BUSY) / 2
    assert pause_after_round(big, IDLE_FACTOR, True, middle) == pytest.approx((least + full) / 2)
    assert pause_after_round(big, IDLE_FACTOR, False, 1.0) == 0.0  # no writers: never


@given(
    st.floats(0.0, 1.0),
    st.floats(0.0, 10.0),
    st.floats(-1.0, 10.0),
    st.floats(0.0, 10.0),
)
def test_the_busy_estimate_is_a_clamped_average_weighted_by_the_gap(
    previous: float, wall0: float, gap: float, cpu_used: float
) -> None:
    from seglog.http.live_fanout import BUSY_TAU_S, smoothed_busy

    start = (wall0 + gap, 5.0 + cpu_used)
    got = smoothed_busy(previous, (wall0, 5.0), start)
    wall, cpu = start[0] - wall0, start[1] - 5.0  # as the readings' floats give them
    if wall <= 0.0:
        assert got == previous  # no gap to measure
    else:
        busy = min(cpu / wall, 1.0)
        assert min(previous, busy) - 1e-12 <= got <= max(previous, busy) + 1e-12
        weight = 1.0 - math.exp(-wall / BUSY_TAU_S)
        assert got == pytest.approx(previous + weight * (busy - previous))
    assert 0.0 <= got <= 1.0


def test_a_short_gap_hardly_moves_the_busy_estimate_and_a_long_one_mostly() -> None:
    from seglog.http.live_fanout import BUSY_TAU_S, smoothed_busy

    short = smoothed_busy(0.2, (0.0, 0.0), (BUSY_TAU_S / 250, BUSY_TAU_S / 250))  # all busy
    assert short == pytest.approx(0.2, abs=0.01)
    long = smoothed_busy(0.9, (0.0, 0.0), (BUSY_TAU_S * 10, 0.0))  # all idle
    assert long == pytest.approx(0.0, abs=0.001)


async def test_a_round_after_an_idle_loop_gets_the_least_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writers count as active, but the loop's CPU clock stood still between rounds (the
    rest of its work left it idle): after a few rounds the pause is down to its floor; a
    loop kept saturated still gets all of it. The clocks are the test's: 50 ms pass
    between rounds, none inside one (a round's cost is the bytes it hands over)."""
    from seglog.http.live_fanout import MIN_PAUSE_SHARE

    per_byte = 1e-3
    monkeypatch.setattr("seglog.http.watch_stream.SEND_BYTE_COST_S", per_byte)
    assert LiveFanout(LogFeed()).cpu_clock is time.thread_time  # the loop thread's own

    async def pauses(loop_busy: bool) -> list[float]:
        wall = [100.0]
        feed = LogFeed()
        feed.heads["a"] = 0
        fanout = LiveFanout(
            feed,
            wall_clock=lambda: wall[0],
            cpu_clock=(lambda: wall[0]) if loop_busy else (lambda: 0.0),
        )
        sent: list[int] = []

        async def send(data: bytes) -> None:
            sent.append(len(data))

        readers = [Reader(feed, {"a": 0}, DeliveryOptions(), Bell(), fanout, send)]
        await settle()
        loop = asyncio.get_running_loop()
        out = []
        for head in range(1, 6):
            wall[0] += 0.05
            fanout._next_ok = 0.0  # each wake runs its round now: only the pause is read
            sent.clear()
            feed.heads["a"] = head
            before = loop.time()
            fanout.wake("a")
            await settle()
            assert sent  # the round sent this head's frame
            # Every round hands over the same bytes, so each round's cost is also the
            # average the pause is computed from (COST_WEIGHT).
            out.append((fanout._next_ok - before) / (per_byte * sum(sent) * IDLE_FACTOR))
        for r in readers:
            r.shutdown = True
        fanout.wake_all()
        await settle()
        return out  # each pause as a share of the full one

    idle = await pauses(loop_busy=False)
    saturated = await pauses(loop_busy=True)
    assert idle[-1] == pytest.approx(MIN_PAUSE_SHARE, abs=0.02) and idle[0] > idle[-1]
    assert all(share == pytest.approx(1.0, abs=0.02) for share in saturated)


async def test_the_bytes_a_round_hands_over_lengthen_the_pause_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop's clock misses the copies of an SSE round's bytes (I/O threads, kernel):
    each byte a watch stream is handed is charged to the round, so the pause after it
    covers them (the first paced round: later ones are paused by the average, which its
    charge moves by COST_WEIGHT)."""
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    feed = LogFeed()
    feed.heads["a"] = 0
    per_byte = 1e-3  # large enough that nothing else in the round comes close
    monkeypatch.setattr("seglog.http.watch_stream.SEND_BYTE_COST_S", per_byte)
    # Writers count as active, and the loop as saturated (its CPU clock runs with the wall
    # clock): the whole pause.
    fanout = LiveFanout(feed, cpu_clock=time.perf_counter)
    readers = [Reader(feed, {"a": 0}, DeliveryOptions(), Bell(), fanout, send) for _ in range(3)]
    await settle()
    sent.clear()
    feed.heads["a"] = 5
    loop = asyncio.get_running_loop()
    before = loop.time()
    fanout.wake("a")
    await settle()
    handed = sum(map(len, sent))
    assert len(sent) == 3 and handed > 0
    assert fanout._next_ok - before >= IDLE_FACTOR * per_byte * handed  # the paced start
    for r in readers:
        r.shutdown = True
    fanout.wake_all()
    await settle()
    assert all(r.task.done() for r in readers)


async def test_the_pause_follows_the_rounds_cpu_time_averaged_not_a_stall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A round's cost is the loop thread's CPU time in it (a stall — descheduled, or
    waiting for the GIL — is not the fan-out's work), averaged over the rounds that are
    paced (COST_WEIGHT): one expensive round lengthens the next pauses a little instead
    of one pause a lot. The pause itself is `pause_after_round` of that average (tested
    above); here the cost each round is paused by is read off it, on the test's clocks."""
    from seglog.http import live_fanout
    from seglog.http.live_fanout import COST_WEIGHT

    monkeypatch.setattr("seglog.http.watch_stream.SEND_BYTE_COST_S", 0.0)
    paced_by: list[float] = []
    real_pause = live_fanout.pause_after_round

    def pause_spy(cost_s: float, *rest: Any) -> float:
        paced_by.append(cost_s)
        return real_pause(cost_s, *rest)

    monkeypatch.setattr(live_fanout, "pause_after_round", pause_spy)
    wall, cpu = [100.0], [50.0]
    per_read = {"work": 0.001, "stall": 0.0}

    class TimedFeed(LogFeed):
        waits = False  # the read waits (a cold read: the round goes on in a task)

        async def read(self, topic: str, cursor: int, opts: DeliveryOptions) -> FeedBatch:
            wall[0] += per_read["work"] + per_read["stall"]
            cpu[0] += per_read["work"]
            if self.waits:
                await asyncio.sleep(0)
            return await super().read(topic, cursor, opts)

    feed = TimedFeed()
    feed.heads["a"] = 0
    fanout = LiveFanout(feed, wall_clock=lambda: wall[0], cpu_clock=lambda: cpu[0])
    sent: list[int] = []

    async def send(data: bytes) -> None:
        sent.append(len(data))

    readers = [Reader(feed, {"a": 0}, DeliveryOptions(), Bell(), fanout, send)]
    await settle()

    async def round_with(work: float, stall: float = 0.0) -> float | None:
        """Run one round; the cost it was paused by (None: no pause)."""
        per_read.update(work=work, stall=stall)
        wall[0] += 0.05
        cpu[0] += 0.05
        fanout._next_ok = 0.0
        feed.heads["a"] += 1
        paced_by.clear()
        fanout.wake("a")
        await settle()
        assert sent, "the round sent the new record"
        sent.clear()
        assert len(paced_by) <= 1
        return paced_by[0] if paced_by else None

    def near(x: float) -> Any:
        return pytest.approx(x, rel=1e-9)

    for _ in range(3):
        assert await round_with(0.001) == near(0.001)
    assert await round_with(0.001, stall=0.020) == near(0.001)  # 21 ms of wall, 1 of CPU
    smoothed = 0.001 + COST_WEIGHT * 0.010
    assert await round_with(0.011) == near(smoothed)  # 11 ms of CPU: a fifth of the spike
    smoothed += COST_WEIGHT * (0.001 - smoothed)
    assert await round_with(0.001) == near(smoothed)
    # A round too cheap to pace gets no pause and leaves the average alone, and so does a
    # round while no writer is active (those pauses are not owed): the next paced round
    # is paused by the average the paced rounds made.
    assert await round_with(0.0001) is None
    fanout.writers_active = lambda: False
    assert await round_with(0.020) is None
    fanout.writers_active = lambda: True
    smoothed += COST_WEIGHT * (0.001 - smoothed)
    assert await round_with(0.001) == near(smoothed)
    # A round that waited for a read ran in a task, and its clocks ran on through the
    # loop's other work meanwhile (here 30 ms): it is paused by the average, untouched.
    feed.waits = True
    assert await round_with(0.030) == near(smoothed)
    feed.waits = False
    smoothed += COST_WEIGHT * (0.001 - smoothed)
    assert await round_with(0.001) == near(smoothed)
    for r in readers:
        r.shutdown = True
    fanout.wake_all()
    await settle()
