"""Units of the SSE watch: `WatchSessions` reclamation and cap (API §7.1, §11) on a
`ManualClock`, `StreamSlots` accounting (API §11), `parse_watch` defaults and clamps
(API §7.1), and the `WatchStream` loop (API §7.3; SEMANTICS §9) driven with a fake feed, a
fake append wait and a `ManualClock`: heartbeats, no lost wake-up, per-pass fairness."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from seglog.clock import ManualClock
from seglog.core.sse import encode_cursor_map
from seglog.errors import ErrorCode, SeglogError, topic_not_found
from seglog.http.stream_slots import StreamSlots
from seglog.http.topic_feed import FeedBatch, TopicFeed
from seglog.http.watch_request import DeliveryOptions, TopicStart, parse_watch
from seglog.http.watch_sessions import SESSION_TTL_MS, WatchSession, WatchSessions
from seglog.http.watch_stream import WatchStream
from seglog.model import Tombstone, TombstoneReason
from tests.http.test_live_watch import Frame, SseParser

# --------------------------------------------------------------------------- sessions


def counter_bytes() -> Callable[[int], bytes]:
    n = itertools.count()
    return lambda k: next(n).to_bytes(k, "big")


def make_sessions(clock: ManualClock, cap: int = 0) -> WatchSessions:
    return WatchSessions(clock, cap, random_bytes=counter_bytes())


def new_session(ws: WatchSessions, topics: dict[str, int] | None = None) -> WatchSession:
    cursors = dict(topics or {"a": 0})
    return ws.create(None, {t: DeliveryOptions() for t in cursors}, 15_000, cursors)


def test_session_ttl_is_300000() -> None:
    assert SESSION_TTL_MS == 300_000


def test_create_and_lookup(clock: ManualClock) -> None:
    ws = make_sessions(clock)
    opts = {"a": DeliveryOptions(limit=5), "b": DeliveryOptions()}
    s = ws.create("key1", opts, 2000, {"a": 3, "b": 0})
    assert s.wid.startswith("wid_") and len(s.wid) == 26
    assert (s.owner_key, s.heartbeat_ms, s.cursors, s.open_streams) == (
        "key1",
        2000,
        {"a": 3, "b": 0},
        0,
    )
    assert s.last_access_ms == clock.now_ms()
    assert ws.lookup(s.wid) is s and len(ws) == 1
    assert ws.lookup("wid_nope") is None


def test_idle_session_reclaimed_on_lookup_after_ttl(clock: ManualClock) -> None:
    ws = make_sessions(clock)
    s = new_session(ws)
    clock.advance(SESSION_TTL_MS)
    assert ws.lookup(s.wid) is s  # exactly the TTL old: still alive ("more than")
    clock.advance(1)
    assert ws.lookup(s.wid) is None
    assert len(ws) == 0


def test_idle_session_reclaimed_on_create(clock: ManualClock) -> None:
    ws = make_sessions(clock)
    old = new_session(ws)
    clock.advance(200_000)
    young = new_session(ws)
    clock.advance(100_001)
    fresh = new_session(ws)  # reclaims `old` only
    assert len(ws) == 2
    assert ws.lookup(young.wid) is young and ws.lookup(fresh.wid) is fresh
    assert ws.lookup(old.wid) is None


def test_lookup_does_not_refresh_last_access(clock: ManualClock) -> None:
    ws = make_sessions(clock)
    s = new_session(ws)
    clock.advance(200_000)
    assert ws.lookup(s.wid) is s
    clock.advance(100_001)
    assert ws.lookup(s.wid) is None


def test_open_stream_never_reclaimed(clock: ManualClock) -> None:
    ws = make_sessions(clock)
    s = new_session(ws)
    ws.stream_opened(s)
    ws.stream_opened(s)  # two streams of one session
    clock.advance(10 * SESSION_TTL_MS)
    assert ws.lookup(s.wid) is s
    new_session(ws)
    assert ws.lookup(s.wid) is s
    ws.stream_closed(s)  # one stream still open
    clock.advance(10 * SESSION_TTL_MS)
    assert ws.lookup(s.wid) is s
    ws.stream_closed(s)  # last access = the close
    clock.advance(SESSION_TTL_MS)
    assert ws.lookup(s.wid) is s
    clock.advance(1)
    assert ws.lookup(s.wid) is None


def test_session_cap(clock: ManualClock) -> None:
    ws = make_sessions(clock, cap=2)
    a = new_session(ws)
    new_session(ws)
    with pytest.raises(SeglogError) as ei:
        new_session(ws)
    e = ei.value
    assert e.code is ErrorCode.THROTTLED
    assert e.detail == {"limit": "max_watch_sessions", "max": 2}
    assert e.retry_after == 1
    assert len(ws) == 2
    # reclaimed sessions free their places; open ones do not
    ws.stream_opened(a)
    clock.advance(SESSION_TTL_MS + 1)
    new_session(ws)
    assert len(ws) == 2
    with pytest.raises(SeglogError):
        new_session(ws)


def test_session_cap_zero_is_unbounded(clock: ManualClock) -> None:
    ws = make_sessions(clock, cap=0)
    wids = {new_session(ws).wid for _ in range(300)}
    assert len(wids) == 300 == len(ws)


def test_wid_collision_draws_again(clock: ManualClock) -> None:
    draws = iter([b"\x01" * 16, b"\x01" * 16, b"\x01" * 16, b"\x02" * 16])
    ws = WatchSessions(clock, 0, random_bytes=lambda n: next(draws))
    a, b = new_session(ws), new_session(ws)
    assert a.wid != b.wid and len(ws) == 2


# --------------------------------------------------------------------------- slots


def test_slots_total_cap() -> None:
    sl = StreamSlots(max_total=2, max_per_key=0)
    sl.acquire(None)
    sl.acquire("k")
    with pytest.raises(SeglogError) as ei:
        sl.acquire("j")
    assert ei.value.code is ErrorCode.THROTTLED and ei.value.retry_after == 1
    assert ei.value.detail is None
    assert sl.total == 2 and sl.held_by("j") == 0
    sl.release("k")
    assert sl.total == 1 and sl.held_by("k") == 0
    sl.acquire("j")
    assert sl.total == 2


def test_slots_per_key_cap() -> None:
    sl = StreamSlots(max_total=0, max_per_key=2)
    sl.acquire("k")
    sl.acquire("k")
    with pytest.raises(SeglogError) as ei:
        sl.acquire("k")
    assert ei.value.code is ErrorCode.THROTTLED and ei.value.retry_after == 1
    assert (sl.total, sl.held_by("k")) == (2, 2)  # a refusal takes nothing
    sl.acquire("j")
    for _ in range(5):
        sl.acquire(None)  # auth disabled: no per-key accounting
    assert (sl.total, sl.held_by("k"), sl.held_by("j")) == (8, 2, 1)
    sl.release("k")
    sl.acquire("k")
    for key in ("k", "k", "j", None, None, None, None, None):
        sl.release(key)
    assert (sl.total, sl.held_by("k"), sl.held_by("j")) == (0, 0, 0)


def test_slots_zero_caps_unbounded() -> None:
    sl = StreamSlots(0, 0)
    for _ in range(100):
        sl.acquire("k")
    assert sl.total == 100 and sl.held_by("k") == 100


def test_slots_total_checked_before_per_key() -> None:
    sl = StreamSlots(max_total=1, max_per_key=5)
    sl.acquire("a")
    with pytest.raises(SeglogError):
        sl.acquire("b")
    assert sl.held_by("b") == 0 and sl.total == 1


# --------------------------------------------------------------------------- parse_watch


def test_parse_defaults() -> None:
    req = parse_watch({"topics": {"a": {}, "b": {"from_seq": 7}, "c": {"tail": True}}})
    assert req.topics == {
        "a": TopicStart(0, False),
        "b": TopicStart(7, False),
        "c": TopicStart(0, True),
    }
    assert req.options == DeliveryOptions(
        nodes=frozenset(),
        limit=256,
        max_batch_bytes=262_144,
        include_meta=True,
        include_tags=False,
        include_data=True,
    )
    assert (req.heartbeat_ms, req.consistency) == (15_000, "eventual")


@pytest.mark.parametrize(
    ("limit", "want"),
    [(0, 256), (1, 1), (256, 256), (999, 999), (1000, 1000), (1001, 1000), (2**63, 1000)],
)
def test_parse_limit_clamps(limit: int, want: int) -> None:
    assert parse_watch({"topics": {"a": {}}, "limit": limit}).options.limit == want


@pytest.mark.parametrize(
    ("budget", "want"),
    [
        (0, 1_048_576),
        (1, 1),
        (262_144, 262_144),
        (8_388_608, 8_388_608),
        (8_388_609, 8_388_608),
        (2**64 - 1, 8_388_608),
    ],
)
def test_parse_batch_bytes_clamps(budget: int, want: int) -> None:
    req = parse_watch({"topics": {"a": {}}, "max_batch_bytes": budget})
    assert req.options.max_batch_bytes == want


@pytest.mark.parametrize(
    ("hb", "want"),
    [
        (0, 1000),
        (1, 1000),
        (999, 1000),
        (1000, 1000),
        (15_000, 15_000),
        (60_000, 60_000),
        (60_001, 60_000),
        (10**12, 60_000),
    ],
)
def test_parse_heartbeat_clamps(hb: int, want: int) -> None:
    assert parse_watch({"topics": {"a": {}}, "heartbeat_ms": hb}).heartbeat_ms == want


def test_parse_flags_nodes_consistency() -> None:
    req = parse_watch(
        {
            "topics": {"a": {}},
            "node": ["x", "y", "x"],
            "include_meta": False,
            "include_tags": True,
            "include_data": False,
            "consistency": "strong",
        }
    )
    assert req.options.nodes == frozenset({"x", "y"})
    assert (req.options.include_meta, req.options.include_tags, req.options.include_data) == (
        False,
        True,
        False,
    )
    assert req.consistency == "strong"
    assert parse_watch({"topics": {"a": {}}, "node": "solo"}).options.nodes == frozenset({"solo"})
    assert parse_watch({"topics": {"a": {}}, "node": []}).options.nodes == frozenset()


def test_parse_topic_count_bounds() -> None:
    assert len(parse_watch({"topics": {f"t{i}": {} for i in range(256)}}).topics) == 256
    for n in (0, 257):
        with pytest.raises(SeglogError) as ei:
            parse_watch({"topics": {f"t{i}": {} for i in range(n)}})
        assert ei.value.code is ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {},
        {"topics": []},
        {"topics": {"a": 1}},
        {"topics": {"a": {"from_seq": -1}}},
        {"topics": {"a": {"from_seq": 2**64}}},
        {"topics": {"a": {"tail": "true"}}},
        {"topics": {"a": {}}, "limit": True},
        {"topics": {"a": {}}, "limit": 1.0},
        {"topics": {"a": {}}, "heartbeat_ms": -1},
        {"topics": {"a": {}}, "include_data": 1},
        {"topics": {"a": {}}, "node": [None]},
        {"topics": {"a": {}}, "consistency": "EVENTUAL"},
    ],
)
def test_parse_type_errors(body: Any) -> None:
    with pytest.raises(SeglogError) as ei:
        parse_watch(body)
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert ei.value.message.startswith("malformed JSON body:")


# --------------------------------------------------------------------------- the loop


class FakeFeed(TopicFeed):
    """Topics whose records are just their seqs (1..head); no eviction unless `tombs`."""

    def __init__(self, heads: dict[str, int]) -> None:
        self.heads = dict(heads)
        self.deleted: set[str] = set()
        self.reads_log: list[tuple[str, int]] = []
        self.after_read: Callable[[str, int], None] = lambda topic, cursor: None
        self.tombs: dict[str, Tombstone] = {}  # served once by the next read of the topic

    async def read(self, topic: str, cursor: int, opts: DeliveryOptions) -> FeedBatch:
        self.reads_log.append((topic, cursor))
        if topic in self.deleted:
            raise topic_not_found(topic)
        head = self.heads[topic]
        tomb = self.tombs.pop(topic, None)
        start = cursor if tomb is None else max(tomb.gap_to, cursor)
        seqs = list(range(start + 1, head + 1))[: opts.limit]
        batch = FeedBatch(
            topic=topic,
            topic_json=orjson.dumps(topic),
            tombstone=tomb,
            start=start,
            next_cursor=seqs[-1] if seqs else start,
            head_seq=head,
            earliest_seq=1 if tomb is None else tomb.earliest_seq,
            count=len(seqs),
            records_json=orjson.dumps([{"$seq": s, "$ts": 0, "data": s} for s in seqs]),
        )
        self.after_read(topic, cursor)
        return batch

    def head_of(self, topic: str) -> int:
        if topic in self.deleted:
            raise topic_not_found(topic)
        return self.heads[topic]


class Harness:
    def __init__(
        self,
        heads: dict[str, int],
        *,
        heartbeat_ms: int = 15_000,
        limit: int = 256,
        cursors: dict[str, int] | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.feed = FakeFeed(heads)
        self.session = WatchSession(
            wid="wid_test",
            owner_key=None,
            options={t: DeliveryOptions(limit=limit) for t in heads},
            heartbeat_ms=heartbeat_ms,
            cursors=dict(cursors or {t: 0 for t in heads}),
            last_access_ms=self.clock.now_ms(),
        )
        self.shutdown = False
        self.waits: list[float] = []
        self.on_wait: Callable[[Harness, float], bool] = Harness.stop
        self.parser = SseParser()
        self.frames: list[Frame] = []
        self.sent_at: list[int] = []
        self.stream = WatchStream(
            self.session,
            self.feed,
            self._wait,
            self.feed.head_of,
            self.clock,
            lambda: self.shutdown,
        )

    def stop(self, _timeout_s: float) -> bool:
        self.shutdown = True
        return False

    async def _wait(self, topics: list[str], timeout_s: float) -> bool:
        assert timeout_s > 0
        self.waits.append(timeout_s)
        return self.on_wait(self, timeout_s)

    async def _send(self, data: bytes) -> None:
        new = self.parser.feed(data)
        self.frames.extend(new)
        self.sent_at.extend([self.clock.now_ms()] * len(new))

    async def run(self) -> list[Frame]:
        await self.stream.run(self._send)
        assert self.parser.pending == b""
        return self.frames

    def events(self) -> list[str | None]:
        return [f.event if f.event else ("hb" if f.comments else "retry") for f in self.frames]


def rec_seqs(frames: list[Frame], topic: str) -> list[int]:
    return [
        r["$seq"]
        for f in frames
        if f.event == "record" and f.topic == topic
        for r in f.data["records"]
    ]


async def test_loop_heartbeat_after_silence() -> None:
    h = Harness({"a": 0}, heartbeat_ms=15_000)
    t0 = h.clock.now_ms()
    calls = 0

    def on_wait(hh: Harness, timeout_s: float) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:  # 10 s in, a record arrives
            hh.clock.advance(10_000)
            hh.feed.heads["a"] = 1
            return True
        if calls >= 4:
            hh.shutdown = True
            return False
        hh.clock.advance(round(timeout_s * 1000))  # slept the whole timeout
        return False

    h.on_wait = on_wait
    frames = await h.run()
    assert h.events() == ["retry", "caught-up", "record", "caught-up", "hb", "hb", "error"]
    hbs = [f for f in frames if f.comments]
    # silence is measured from the last frame written (the record at t0 + 10 s)
    assert [f.raw for f in hbs] == [b": hb %d\n\n" % (t0 + 25_000), b": hb %d\n\n" % (t0 + 40_000)]
    assert h.waits[0] == pytest.approx(15.0)
    assert h.waits[1:] == [pytest.approx(15.0)] * 3
    err = frames[-1]
    assert err.id == encode_cursor_map({"a": 1})
    assert err.data == {
        "code": "server_shutting_down",
        "message": "server is shutting down; reconnect",
    }


async def test_loop_heartbeat_clamped_session_value() -> None:
    h = Harness({"a": 0}, heartbeat_ms=1000)
    t0 = h.clock.now_ms()

    def on_wait(hh: Harness, timeout_s: float) -> bool:
        if len(hh.waits) > 2:
            hh.shutdown = True
            return False
        hh.clock.advance(round(timeout_s * 1000))
        return False

    h.on_wait = on_wait
    frames = await h.run()
    assert [f.raw for f in frames if f.comments] == [
        b": hb %d\n\n" % (t0 + 1000),
        b": hb %d\n\n" % (t0 + 2000),
    ]


async def test_loop_no_lost_wakeup_between_read_and_wait() -> None:
    """A publish that lands after the caught-up read but before the waiter registers (its
    wake-up went nowhere) must not be slept through: the loop re-checks the heads."""
    h = Harness({"a": 0, "b": 0})
    slept_through: list[dict[str, int]] = []

    def publish_after_read(topic: str, cursor: int) -> None:
        if topic == "b" and cursor == 0 and h.feed.heads["a"] == 0:
            h.feed.heads["a"] = 3  # lands after a's read, before the wait

    def on_wait(hh: Harness, timeout_s: float) -> bool:
        behind = {
            t: hh.feed.heads[t] for t in hh.feed.heads if hh.feed.heads[t] > hh.session.cursors[t]
        }
        if behind:
            slept_through.append(behind)
        hh.shutdown = True
        return False

    h.feed.after_read = publish_after_read
    h.on_wait = on_wait
    frames = await h.run()
    assert not slept_through, f"the loop waited with unread records: {slept_through}"
    assert rec_seqs(frames, "a") == [1, 2, 3]


async def test_loop_no_lost_wakeup_same_topic() -> None:
    h = Harness({"a": 0})
    slept_through: list[int] = []

    def publish_after_read(topic: str, cursor: int) -> None:
        if h.feed.heads["a"] < 2:
            h.feed.heads["a"] += 1

    def on_wait(hh: Harness, timeout_s: float) -> bool:
        if hh.feed.heads["a"] > hh.session.cursors["a"]:
            slept_through.append(hh.feed.heads["a"])
        hh.shutdown = True
        return False

    h.feed.after_read = publish_after_read
    h.on_wait = on_wait
    frames = await h.run()
    assert not slept_through
    assert rec_seqs(frames, "a") == [1, 2]


async def test_loop_one_batch_per_topic_per_pass() -> None:
    h = Harness({"big": 5000, "small": 1}, limit=10)
    small_late_at: list[int] = []

    def after_read(topic: str, cursor: int) -> None:
        big_reads = sum(1 for t, _ in h.feed.reads_log if t == "big")
        if topic == "big" and big_reads == 50 and h.feed.heads["small"] == 1:
            h.feed.heads["small"] = 2  # a new record on the small topic mid-backlog
            small_late_at.append(big_reads)

    h.feed.after_read = after_read
    frames = await h.run()
    assert h.feed.reads_log[:2] == [("big", 0), ("small", 0)]
    recs = [f for f in frames if f.event == "record"]
    assert [f.topic for f in recs[:2]] == ["big", "small"]
    # small's new record goes out within one pass of its arrival, long before big drains
    i_small2 = next(
        i for i, f in enumerate(recs) if f.topic == "small" and f.data["records"][0]["$seq"] == 2
    )
    big_before = sum(1 for f in recs[:i_small2] if f.topic == "big")
    assert big_before <= small_late_at[0] + 1, (big_before, small_late_at)
    assert rec_seqs(frames, "big") == list(range(1, 5001))
    assert rec_seqs(frames, "small") == [1, 2]
    assert all(len(f.data["records"]) == 10 for f in recs if f.topic == "big")


async def test_loop_cursor_before_each_id_and_caught_up_transitions() -> None:
    h = Harness({"a": 3, "b": 0}, limit=2)
    frames = await h.run()
    assert h.events() == ["retry", "record", "caught-up", "record", "caught-up", "error"]
    ids = [f.id for f in frames if f.event]
    assert ids == [
        encode_cursor_map({"a": 2, "b": 0}),
        encode_cursor_map({"a": 2, "b": 0}),
        encode_cursor_map({"a": 3, "b": 0}),
        encode_cursor_map({"a": 3, "b": 0}),
        encode_cursor_map({"a": 3, "b": 0}),
    ]
    assert [f.topic for f in frames[1:5]] == ["a", "b", "a", "a"]
    assert h.session.cursors == {"a": 3, "b": 0}


async def test_loop_tombstone_first_read_reason_then_computed() -> None:
    h = Harness({"a": 10})
    h.feed.tombs["a"] = Tombstone(1, 7, TombstoneReason.CAP, 7, 8, 10)
    calls = 0

    def on_wait(hh: Harness, timeout_s: float) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            hh.feed.heads["a"] = 20
            hh.feed.tombs["a"] = Tombstone(11, 17, TombstoneReason.TTL, 7, 18, 20)
            return True
        hh.shutdown = True
        return False

    h.on_wait = on_wait
    frames = await h.run()
    assert h.events() == [
        "retry",
        "tombstone",
        "record",
        "caught-up",
        "tombstone",
        "record",
        "caught-up",
        "error",
    ]
    t1, t2 = frames[1], frames[4]
    assert t1.data == {
        "topic": "a",
        "reason": "from_seq_too_old",
        "gap_from": 1,
        "gap_to": 7,
        "earliest_seq": 8,
        "head_seq": 10,
    }
    assert t1.id == encode_cursor_map({"a": 7})
    assert t2.data["reason"] == "ttl" and t2.id == encode_cursor_map({"a": 17})
    assert rec_seqs(frames, "a") == [8, 9, 10, 18, 19, 20]
    assert frames[5].data["from_seq"] == 17


async def test_loop_topic_deleted_not_read_again_and_end() -> None:
    h = Harness({"a": 1, "b": 1})
    calls = 0

    def on_wait(hh: Harness, timeout_s: float) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            hh.feed.deleted.add("a")
        elif calls == 2:
            hh.feed.heads["b"] = 2
        else:
            hh.feed.deleted.add("b")
        return True

    h.on_wait = on_wait
    frames = await h.run()  # ends by itself: every topic deleted
    events = h.events()
    assert events == [
        "retry",
        "record",
        "caught-up",
        "record",
        "caught-up",
        "topic-deleted",
        "record",
        "caught-up",
        "topic-deleted",
    ]
    assert frames[5].data == {"topic": "a", "head_seq": 0, "reason": "deleted"}
    assert frames[5].id == encode_cursor_map({"a": 1, "b": 1})
    reads_of_a = [c for t, c in h.feed.reads_log if t == "a"]
    assert len(reads_of_a) == 2  # the first read, then the one that found it gone
    assert not h.shutdown


async def test_loop_shutdown_during_backlog() -> None:
    h = Harness({"a": 100}, limit=10)

    def after_read(topic: str, cursor: int) -> None:
        if cursor >= 30:
            h.shutdown = True

    h.feed.after_read = after_read
    frames = await h.run()
    assert frames[-1].event == "error"
    assert frames[-1].id == encode_cursor_map({"a": 40})
    assert rec_seqs(frames, "a") == list(range(1, 41))


async def test_loop_superseded_mid_read_leaves_the_rewound_cursors_alone() -> None:
    """A reconnect takes the session over (and may rewind it) while an old stream is in the
    middle of a read: the old stream must not write its read's cursor back, nor send it."""
    h = Harness({"a": 100}, limit=10)
    sessions = make_sessions(h.clock)

    def after_read(topic: str, cursor: int) -> None:
        if len(h.feed.reads_log) == 3:  # third read in flight: a new stream opens
            sessions.take_over(h.session)
            h.session.cursors = {"a": 5}  # its Last-Event-ID rewind

    h.feed.after_read = after_read
    frames = await h.run()
    assert h.session.cursors == {"a": 5}
    assert rec_seqs(frames, "a") == list(range(1, 21))  # two batches sent, not the third
    assert h.stream.superseded
