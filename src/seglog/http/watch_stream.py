"""The stream loop of one open `GET /v0/watch/:wid` (API §7.3, §7.4; SEMANTICS §9).

Each pass reads one batch per live topic from the session's cursors and sends its frames
(tombstone, record, caught-up, topic-deleted), updating the cursor before each frame's id
is computed. Topics with backlog are read again at once, one batch per topic per pass so
that no topic starves the others; when every topic is caught up the loop sleeps until an
append to (or the deletion of) a watched topic, the server's shutdown, or the heartbeat.

The loop only pulls: it reads from the log at its own pace and blocks in `send` when the
client does not read (granian's body channel holds 4 chunks), so a slow consumer delays
nothing but its own stream and later catches up from the log — with a tombstone if its
position was evicted meanwhile.

Owner: the event loop. The session's cursors are shared by every stream of the session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson

from seglog.clock import Clock
from seglog.core.sse import (
    encode_cursor_map,
    frame,
    heartbeat,
    record_data,
    retry_frame,
)
from seglog.errors import ErrorCode, SeglogError
from seglog.http.live_fanout import SEND_BYTE_COST_S, ParkResult, Signal
from seglog.http.loop_share import LoopShare
from seglog.http.topic_feed import FeedBatch, TopicFeed
from seglog.http.watch_request import DeliveryOptions
from seglog.http.watch_sessions import WatchSession

SendBytes = Callable[[bytes], Awaitable[None]]
WaitForAppend = Callable[[list[str], float], Awaitable[bool]]
# Park an idle stream on its topics (see `live_fanout`).
Park = Callable[["WatchStream", list[str], float, bool], Awaitable[ParkResult]]
FIRST_READ_REASON = "from_seq_too_old"
COALESCE_BYTES = 64 * 1024
COALESCE_S = 0.02
SHUTDOWN_ERROR = orjson.dumps(
    {"code": "server_shutting_down", "message": "server is shutting down; reconnect"}
)


@dataclass(slots=True)
class _Pending:
    """Frames of a backlog not sent yet. A backlog read in small batches (`limit` 1, or
    a topic of tiny records) makes a frame per read, and each `send` is a hand-off to the
    HTTP server's I/O thread: sent one by one, they took a quarter of a `limit` 1
    backlog's time (60,000 records: 5.7 s, coalesced 4.2 s). So a backlog goes out in
    chunks of about `COALESCE_BYTES`, or what `COALESCE_S` gathered; the frames that
    reach the head are sent at once."""

    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    since: float | None = None

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)

    def due(self, now: float) -> bool:
        if self.since is None:
            self.since = now
        return self.size >= COALESCE_BYTES or now - self.since >= COALESCE_S

    def take(self, now: float) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        self.size = 0
        self.since = now
        return out


@dataclass(slots=True)
class _TopicState:
    first_read: bool = True  # the first read after the stream opened reports from_seq_too_old
    tailing: bool = False  # caught-up was sent and nothing new was sent since


class WatchStream:
    def __init__(
        self,
        session: WatchSession,
        feed: TopicFeed,
        wait_for_append: WaitForAppend,
        head_of: Callable[[str], int],
        clock: Clock,
        shutting_down: Callable[[], bool],
        generation: int | None = None,
        park: Park | None = None,
    ) -> None:
        self.session = session
        self._feed = feed
        self._wait = wait_for_append
        self._head_of = head_of
        self._clock = clock
        self._shutting_down = shutting_down
        self._topics = {t: _TopicState() for t in session.cursors}
        self._live = list(session.cursors)
        self._heads: dict[str, int] = {}  # head seen by the last read of each topic
        self._last_sent = clock.monotonic()
        self._generation = session.generation if generation is None else generation
        self._park = park
        self._sender: SendBytes | None = None
        self._share = LoopShare(clock)

    @property
    def all_deleted(self) -> bool:
        """Every watched topic was deleted (the stream ended for good)."""
        return not self._live

    def _id(self) -> str:
        return encode_cursor_map(self.session.cursors)

    async def _send(self, send: SendBytes, data: bytes) -> None:
        await send(data)
        self._last_sent = self._clock.monotonic()

    @property
    def superseded(self) -> bool:
        """A newer stream of the same session opened: this one must stop moving the
        session's cursors (its client reconnected, or is about to be gone)."""
        return self.session.generation != self._generation

    async def run(self, send: SendBytes) -> None:
        """Stream until every watched topic is deleted, the server shuts down or a newer
        stream of the session takes over; the caller cancels the task when the client
        goes away."""
        self._sender = send
        await self._send(send, retry_frame())
        pending = _Pending()
        while self._live and not self.superseded:
            if self._shutting_down():
                pending.add(frame("error", SHUTDOWN_ERROR, self._id()))
                await self._flush(send, pending)
                return
            backlog = False
            for topic in list(self._live):
                if self.superseded:
                    break
                out = await self._pass(topic)
                if out and not self.superseded:
                    pending.add(out)
                backlog |= self._topics[topic].tailing is False and topic in self._live
            if backlog and not self.superseded:
                if pending.due(self._clock.monotonic()):
                    await self._flush(send, pending)
                # Pause every pass: reads of hot data run on the loop without awaiting, and
                # sends to a vanished client return at once, so without this a long backlog
                # would hold the loop (and the GIL, see `loop_share`) and hide the client's
                # disconnect from us.
                await self._share.pause()
                if self._clock.monotonic() - self._last_sent >= self.session.heartbeat_ms / 1e3:
                    pending.add(heartbeat(self._clock.now_ms()))
                    await self._flush(send, pending)
                continue
            await self._flush(send, pending)
            if self._live and not self.superseded:
                await self._idle(send)
                self._share.rested()

    async def _flush(self, send: SendBytes, pending: _Pending) -> None:
        if pending.parts:
            await self._send(send, pending.take(self._clock.monotonic()))

    async def _pass(self, topic: str) -> bytes:
        """One read of `topic`: the frames it produces, cursor updated before each id."""
        st = self._topics[topic]
        try:
            cursor = self.session.cursors[topic]
            batch = await self._feed.read(topic, cursor, self.session.options[topic])
        except SeglogError as e:
            if e.code is not ErrorCode.TOPIC_NOT_FOUND:
                raise
            if self.superseded:
                return b""
            self._live.remove(topic)
            data = b'{"topic":%b,"head_seq":0,"reason":"deleted"}' % orjson.dumps(topic)
            return frame("topic-deleted", data, self._id())
        if self.superseded:
            return b""  # a newer stream took over (and may have rewound) while we read
        out = b""
        if batch.tombstone is not None:
            self.session.cursors[topic] = batch.start
            out = frame("tombstone", _tombstone_data(batch, st.first_read), self._id())
            st.tailing = False
        st.first_read = False
        return out + self._apply(topic, st, batch)

    def _apply(self, topic: str, st: _TopicState, batch: FeedBatch) -> bytes:
        """The `record` and `caught-up` frames of a read past any tombstone, the cursor moved
        before each id is computed (shared by `_pass` and the parked path)."""
        cursors = self.session.cursors
        self._heads[topic] = batch.head_seq
        moved = batch.next_cursor != cursors[topic]
        cursors[topic] = batch.next_cursor
        out = b""
        if batch.count:
            out = self._record_frames(batch)  # with its caught-up when it reaches the head
            st.tailing = batch.caught_up
        elif moved:
            st.tailing = st.tailing and batch.caught_up  # skipped records only
        if batch.caught_up and not st.tailing:
            data = b'{"topic":%b,"head_seq":%d}' % (batch.topic_json, batch.head_seq)
            out += frame("caught-up", data, self._id())
            st.tailing = True
        return out

    def _changed(self) -> bool:
        """Whether a watched topic moved since its last read (or vanished)."""
        for topic in self._live:
            try:
                if self._head_of(topic) != self._heads.get(topic):
                    return True
            except SeglogError:
                return True
        return False

    def _record_frames(self, batch: FeedBatch) -> bytes:
        """The `record` frame of a non-empty batch, and the `caught-up` frame after it when
        the batch reaches the head; cursor already moved. A single-topic session's id
        depends only on the batch, so those bytes are built once and shared by every
        watcher of the batch."""
        shared = len(self.session.cursors) == 1
        if shared:
            cached = batch.frames.get("")
            if cached is not None:
                return cached
        event_id = self._id()
        data = record_data(
            batch.topic_json, batch.start, batch.head_seq, batch.records_json, batch.next_cursor
        )
        out = frame("record", data, event_id)
        if batch.caught_up:
            up = b'{"topic":%b,"head_seq":%d}' % (batch.topic_json, batch.head_seq)
            out += frame("caught-up", up, event_id)
        if shared:
            batch.frames[""] = out
        return out

    # ---- parked (see live_fanout) -------------------------------------------------------
    def cursor_of(self, topic: str) -> int | None:
        return None if self.superseded else self.session.cursors.get(topic)

    def options_of(self, topic: str) -> DeliveryOptions:
        return self.session.options[topic]

    def take_parked(self, topic: str, cursor: int, batch: FeedBatch) -> bytes | None:
        """Apply a batch that a broadcast read after `cursor` while we are parked: the same
        cursor moves and frames as `_pass` makes of it (b"" when there is nothing to send).
        None — wake for `_pass` — for a tombstone (its reason depends on our own history),
        when our cursor moved meanwhile, or when we are superseded."""
        st = self._topics.get(topic)
        if (
            st is None
            or self.superseded
            or topic not in self._live
            or batch.tombstone is not None
            or self.session.cursors.get(topic) != cursor
        ):
            return None
        return self._apply(topic, st, batch)

    def send_cost(self, frames: bytes) -> float:
        return len(frames) * SEND_BYTE_COST_S

    def push(self, frames: bytes) -> Awaitable[None]:
        assert self._sender is not None
        self._last_sent = self._clock.monotonic()
        return self._sender(frames)

    async def _idle(self, send: SendBytes) -> None:
        """Sleep until an append, a deletion, shutdown or the heartbeat is due. Parked (with
        a `park`), the frames of appends are sent by the broadcasts while we sleep on;
        we return only when a read pass of our own is due."""
        hb_s = self.session.heartbeat_ms / 1000.0
        while not self.superseded:
            due = self._last_sent + hb_s - self._clock.monotonic()
            if due <= 0:
                await self._send(send, heartbeat(self._clock.now_ms()))
                return
            if self._shutting_down():
                return
            # No await between this check and the waiter's registration: a publish after
            # the check wakes the waiter, one before it is seen here.
            changed = self._changed() or not all(self._topics[t].tailing for t in self._live)
            if self._park is None:
                if changed:
                    return
                await self._wait(list(self._live), due)
                return
            # Parked even when a head moved since our read, or a parked read of ours stopped
            # short of the head: the next broadcast round reads on for us (`kick`). Reading it ourselves would keep a busy topic's watchers
            # in their own read passes for good, each paying what the broadcast shares.
            got = await self._park(self, list(self._live), due, changed)
            if got is Signal.WAKE:
                return
            if got is not Signal.TIMEOUT:
                await got  # a broadcast's send that had to wait for the client
                self._last_sent = self._clock.monotonic()


def _tombstone_data(batch: FeedBatch, first_read: bool) -> bytes:
    t = batch.tombstone
    assert t is not None
    return orjson.dumps(
        {
            "topic": batch.topic,
            "reason": FIRST_READ_REASON if first_read else t.reason.value,
            "gap_from": t.gap_from,
            "gap_to": t.gap_to,
            "earliest_seq": t.earliest_seq,
            "head_seq": t.head_seq,
        }
    )
