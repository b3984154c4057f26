"""The transport-free half of `watch()`: session requests, frame decoding, cursor bookkeeping
and the reconnect decision. `Watch` and `AsyncWatch` (`watch.py`) only move bytes and sleep.

Cursor invariant: `cursors[topic]` is the highest position of `topic` handed to the caller. It
moves as each event is pulled from `feed()` (a record sets it to its seq *before* it is yielded;
the rest of a batch's `to_seq`, which covers records the server skipped, is applied only once
every record of the batch has been pulled), so a caller that stops anywhere and resumes from
`cursors` / `last_event_id` neither skips nor repeats a record. Every resume sends these cursors
as `Last-Event-ID`, which the server only uses to rewind (API.md §7.4); a record at or below its
topic's cursor is dropped, so even a server that rewinds too far cannot cause a duplicate.

A tombstone sets the cursor to `gap_to`; but a gap that starts at or below the cursor (reason
`recreated`, or `from_seq_too_old` on the first read after a reopen) means the topic was
recreated and its seqs restarted, so the cursor moves *back* to just below the new instance's
`earliest_seq` (SEMANTICS §4.4 "continue the walk after E − 1") and the records that follow are
delivered, not mistaken for ones already handed out (`cursor_after_tombstone`).

Reconnect decisions (`stream_failed` / `create_failed` / `stream_ended`): transport errors,
5xx, 429, a clean end of the stream while topics remain, and the `server_shutting_down` error
frame reconnect with exponential backoff and jitter from the server's `retry:` (API.md §7.3);
`404` on the stream means the session is gone (expired, or the server restarted): a new session
is created from the cursors, immediately the first time. Anything else is raised.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from seglog.client._base import (
    JSON,
    Call,
    RandomSource,
    RequestSpec,
    _parser,
    retryable,
    transport_error,
)
from seglog.client.cursors import decode_cursor, encode_cursor
from seglog.client.events import (
    RECREATED,
    WatchCaughtUp,
    WatchEvent,
    WatchRecord,
    WatchSession,
    WatchTombstone,
    WatchTopicDeleted,
)
from seglog.client.exceptions import (
    SeglogClientError,
    SeglogConnectionError,
    SeglogHTTPError,
    SeglogProtocolError,
    in_band_error,
)
from seglog.client.sse import SSEComment, SSEEvent, SSEItem, SSERetry

SHUTDOWN_CODES = frozenset({"server_shutting_down", "shutting_down"})
DEFAULT_HEARTBEAT_MS = 15000


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """The session request's settings other than topics (API.md §7.1); None ⇒ server default."""

    node: str | list[str] | None = None
    topic_nodes: dict[str, str | list[str]] = field(default_factory=dict)
    limit: int | None = None
    max_batch_bytes: int | None = None
    heartbeat_ms: int | None = None
    include_meta: bool = True
    include_tags: bool = False
    include_data: bool = True
    lenient: bool = False

    def body(self, topics: dict[str, dict[str, Any]]) -> dict[str, Any]:
        for name, spec in topics.items():
            if name in self.topic_nodes:
                spec["node"] = self.topic_nodes[name]
        body: dict[str, Any] = {"topics": topics}
        for key in ("node", "limit", "max_batch_bytes", "heartbeat_ms"):
            value = getattr(self, key)
            if value is not None:
                body[key] = value
        body["include_meta"] = self.include_meta
        body["include_tags"] = self.include_tags
        body["include_data"] = self.include_data
        return body

    @property
    def read_timeout(self) -> float:
        """Seconds of silence after which the stream is presumed dead: heartbeats arrive at
        least every `heartbeat_ms` (clamped by the server to 1–60 s), so two missed ones and
        some slack mean the connection is gone even if TCP has not noticed."""
        hb = DEFAULT_HEARTBEAT_MS if self.heartbeat_ms is None else self.heartbeat_ms
        return 2 * min(max(hb, 1000), 60000) / 1000 + 5.0


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """Backoff between reconnects: `base · 2^attempt`, capped at `max_delay`, times a jitter
    factor in [0.5, 1). `base` is the server's `retry:` once seen, else `initial`. `attempts`
    bounds consecutive failures (None: reconnect forever, as a follower should)."""

    initial: float = 1.0
    max_delay: float = 30.0
    attempts: int | None = None

    def __post_init__(self) -> None:
        if (
            self.initial < 0
            or self.max_delay < 0
            or (self.attempts is not None and self.attempts < 0)
        ):
            raise ValueError("ReconnectPolicy: initial, max_delay and attempts must be >= 0")

    def delay(
        self, attempt: int, base: float, retry_after: float | None, rng: RandomSource
    ) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_delay)
        return min(self.max_delay, base * 2.0 ** min(attempt, 32)) * (0.5 + 0.5 * rng.random())


class WatchState:
    """One watch's state. Owned by its driver; not thread-safe."""

    def __init__(
        self,
        starts: Mapping[str, int | None],
        options: WatchOptions,
        policy: ReconnectPolicy,
        rng: RandomSource,
    ) -> None:
        if not starts:
            raise ValueError("watch needs at least one topic")
        self.options, self.policy, self._rng = options, policy, rng
        self._starts = dict(starts)  # None ⇒ tail
        self.cursors: dict[str, int] = {}
        self.live: list[str] = list(starts)
        self.session: WatchSession | None = None
        self.retry_ms: int | None = None
        self.attempt = 0
        self._expired_streak = 0
        self.done = False
        self.restart = False  # the server asked us to reconnect (shutdown error frame)

    # --- session ------------------------------------------------------------------------------

    def create_call(self) -> Call[WatchSession]:
        """`POST /v0/watch`: the caller's starts the first time, the cursors afterwards. A
        re-create is always lenient so a topic deleted meanwhile does not fail the resume."""
        recreate = bool(self.cursors)
        topics: dict[str, dict[str, Any]] = {}
        for name in self.live:
            start = self.cursors.get(name, self._starts.get(name))
            topics[name] = {"tail": True} if start is None else {"from_seq": start}
        lenient = recreate or self.options.lenient
        spec = RequestSpec(
            "POST",
            "/v0/watch",
            params={"lenient": "true"} if lenient else {},
            body=orjson.dumps(self.options.body(topics)),
            headers={"Content-Type": JSON},
            # Resending a create after a broken connection at worst leaves an unused session,
            # which the server reclaims after its TTL.
            idempotent=True,
        )
        return Call(spec, _parser(WatchSession.from_json))

    def created(self, session: WatchSession) -> list[WatchEvent]:
        """Adopt a new session; topics it dropped (deleted while we were away) are reported."""
        recreate = bool(self.cursors)
        self.session = session
        self.restart = False
        gone = [t for t in self.live if t not in session.topics]
        self.live = [t for t in self.live if t in session.topics]
        for name in self.live:
            self.cursors.setdefault(name, session.topics[name].from_seq)
        if not self.live:
            self.done = True
        if not recreate:  # the caller's own lenient request: unknown names just drop out
            return []
        return [WatchTopicDeleted(t, 0, "deleted") for t in gone]

    def stream_spec(self) -> RequestSpec:
        assert self.session is not None
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
        if self.cursors:
            headers["Last-Event-ID"] = self.last_event_id()
        return RequestSpec("GET", self.session.stream_url, headers=headers)

    def last_event_id(self) -> str:
        return encode_cursor({t: self.cursors[t] for t in self.live if t in self.cursors})

    # --- frames -------------------------------------------------------------------------------

    def feed(self, item: SSEItem) -> Iterator[WatchEvent]:
        """Events for one decoded SSE item, updating cursors as each is pulled."""
        if isinstance(item, SSERetry):
            self.retry_ms = item.ms
            return
        if isinstance(item, SSEComment):
            return
        self.attempt, self._expired_streak = 0, 0  # a real frame: the stream works
        obj = _frame_json(item)
        try:
            if item.event == "record":
                yield from self._records(obj)
            elif item.event == "tombstone":
                tomb = WatchTombstone.from_json(obj)
                if tomb.topic in self.live:
                    prev = self.cursors.get(tomb.topic, 0)
                    self.cursors[tomb.topic] = cursor_after_tombstone(prev, tomb)
                    yield tomb
            elif item.event == "caught-up":
                yield WatchCaughtUp.from_json(obj)
            elif item.event == "topic-deleted":
                yield from self._deleted(WatchTopicDeleted.from_json(obj))
            elif item.event == "error":
                self._error(obj)
            # Other event names are ignored: the protocol only grows (API.md §0.1).
        except (KeyError, TypeError, ValueError) as exc:
            raise SeglogProtocolError(f"malformed {item.event!r} frame: {exc!r}") from exc

    def _records(self, obj: dict[str, Any]) -> Iterator[WatchRecord]:
        topic, head = str(obj["topic"]), int(obj["head_seq"])
        if topic not in self.live:
            return
        for raw in obj["records"]:
            rec = WatchRecord.from_json(topic, head, raw)
            if rec.seq <= self.cursors.get(topic, 0):
                continue  # already handed out (a server rewound further than asked)
            self.cursors[topic] = rec.seq
            yield rec
        self.cursors[topic] = max(self.cursors.get(topic, 0), int(obj["to_seq"]))

    def _deleted(self, ev: WatchTopicDeleted) -> Iterator[WatchTopicDeleted]:
        if ev.topic not in self.live:
            return
        self.live.remove(ev.topic)
        self.cursors.pop(ev.topic, None)
        self.done = not self.live
        yield ev

    def _error(self, obj: dict[str, Any]) -> None:
        code = str(obj.get("code", ""))
        if code in SHUTDOWN_CODES:
            self.restart = True
            return
        raise in_band_error(code, str(obj.get("message") or obj.get("error") or code), obj)

    # --- failures -----------------------------------------------------------------------------

    def _backoff(self, failure: Exception, retry_after: float | None = None) -> float:
        attempts = self.policy.attempts
        if attempts is not None and self.attempt >= attempts:
            raise failure
        base = self.policy.initial if self.retry_ms is None else self.retry_ms / 1000
        delay = self.policy.delay(self.attempt, base, retry_after, self._rng)
        self.attempt += 1
        return delay

    def stream_ended(self) -> float:
        """The stream closed (or asked us to go) while topics remain: delay before reopening."""
        self.restart = False
        return self._backoff(SeglogConnectionError("watch stream ended"))

    def stream_failed(self, failure: Exception) -> float:
        """Delay before reopening after the stream GET failed, or raise `failure` (typed)."""
        if isinstance(failure, httpx.TransportError):
            return self._backoff(_connection_error(failure, "GET watch stream"))
        if isinstance(failure, SeglogHTTPError) and failure.status == 404:
            self.session = None  # expired or the server restarted: re-create from the cursors
            self._expired_streak += 1
            if self._expired_streak == 1:
                return 0.0
            return self._backoff(failure)
        return self._http_failure(failure)

    def create_failed(self, failure: Exception) -> float:
        """Delay before re-creating after `POST /v0/watch` failed (the client's own retries are
        spent), or raise. Only a re-create retries: the first create's errors are the caller's."""
        if not self.cursors:
            raise failure
        if isinstance(failure, SeglogConnectionError):
            return self._backoff(failure)
        return self._http_failure(failure)

    def _http_failure(self, failure: Exception) -> float:
        if isinstance(failure, SeglogHTTPError) and (retryable(failure) or failure.status >= 500):
            return self._backoff(failure, failure.retry_after)
        raise failure


def check_event_stream(resp: httpx.Response) -> None:
    """A 2xx stream that is not `text/event-stream` (a proxy's page, a wrong route) would
    decode to nothing and be reopened forever: refuse it."""
    ctype = resp.headers.get("content-type", "")
    if ctype.split(";")[0].strip().lower() != "text/event-stream":
        raise SeglogProtocolError(f"watch stream answered {ctype!r}, not text/event-stream")


def cursor_after_tombstone(cursor: int, tomb: WatchTombstone) -> int:
    """Where a topic's cursor stands once `tomb` is handed out (see the module docstring)."""
    if tomb.reason == RECREATED or tomb.gap_from <= cursor:
        return max(min(tomb.gap_to, tomb.earliest_seq - 1), 0)
    return tomb.gap_to


def _frame_json(item: SSEEvent) -> dict[str, Any]:
    try:
        obj = orjson.loads(item.data)
    except orjson.JSONDecodeError as exc:
        raise SeglogProtocolError(f"{item.event!r} frame data is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise SeglogProtocolError(f"{item.event!r} frame data is not a JSON object")
    return obj


def _connection_error(exc: httpx.TransportError, what: str) -> SeglogClientError:
    return transport_error(exc, RequestSpec("GET", what))


def topic_starts(
    topics: str | Sequence[str] | Mapping[str, int | None],
    *,
    from_seq: int,
    tail: bool,
    resume: Mapping[str, int] | None,
) -> dict[str, int | None]:
    """Normalize `watch()`'s topic argument to name → from_seq (None = tail); a `resume`
    cursor (a previous watch's `last_event_id`, decoded) overrides the start of its topics."""
    if isinstance(topics, str):
        starts: dict[str, int | None] = {topics: None if tail else from_seq}
    elif isinstance(topics, Mapping):
        starts = dict(topics)
    else:
        starts = {name: None if tail else from_seq for name in topics}
    for name, seq in starts.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"topic names must be non-empty strings, got {name!r}")
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
            raise ValueError(f"from_seq for {name!r} must be an int >= 0 or None (tail)")
    for name, seq in (resume or {}).items():
        if name in starts:
            starts[name] = seq
    return starts


def nodes_value(node: str | Sequence[str]) -> str | list[str]:
    """A `node` field: one id, or several (API.md §4)."""
    return node if isinstance(node, str) else list(node)


def new_state(
    topics: str | Sequence[str] | Mapping[str, int | None],
    rng: RandomSource,
    *,
    from_seq: int,
    tail: bool,
    last_event_id: str | None,
    node: str | Sequence[str] | None,
    topic_nodes: Mapping[str, str | Sequence[str]] | None,
    limit: int | None,
    max_batch_bytes: int | None,
    heartbeat_ms: int | None,
    include_meta: bool,
    include_tags: bool,
    include_data: bool,
    lenient: bool,
    reconnect: ReconnectPolicy | None,
) -> WatchState:
    """The state behind one `watch()` call (both clients build it here)."""
    resume = None if last_event_id is None else decode_cursor(last_event_id)
    starts = topic_starts(topics, from_seq=from_seq, tail=tail, resume=resume)
    options = WatchOptions(
        node=None if node is None else nodes_value(node),
        topic_nodes={t: nodes_value(n) for t, n in (topic_nodes or {}).items()},
        limit=limit,
        max_batch_bytes=max_batch_bytes,
        heartbeat_ms=heartbeat_ms,
        include_meta=include_meta,
        include_tags=include_tags,
        include_data=include_data,
        lenient=lenient,
    )
    return WatchState(starts, options, reconnect or ReconnectPolicy(), rng)
