"""`WebSocket`: a session on `GET /v0/ws` (API.md §8); `AsyncWebSocket` (`websocket_aio.py`)
is its asyncio twin and shares the helpers here.

Built on the `websockets` library: mature and actively maintained, no dependencies of its own,
and both a sync and an asyncio client with the same model (httpx has no WebSocket support). Commands (`subscribe`, `unsubscribe`,
`publish`, `ping`) return typed replies or raise the client's exception for the server's error
code; pushed data arrives by iterating the session, as the same `WatchEvent`s `watch()` yields.

Sync: single-threaded. A command reads the socket until its reply arrives and buffers any events
read meanwhile for the iterator. Async: one reader task routes replies to the awaiting command
and events to an unbounded queue, so one task may iterate while others publish. Either way the
server's outbound queue is small and delivery blocks (API.md §8): keep consuming events, or
unsubscribe, or the server stops sending. The session does not reconnect; resubscribe from
`cursors` after a `SeglogConnectionError`.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from websockets.exceptions import (
    ConnectionClosed,
    ConnectionClosedOK,
    InvalidHandshake,
    InvalidStatus,
)
from websockets.sync.client import ClientConnection, connect

from seglog.client import _ws
from seglog.client._base import USER_AGENT, error_from_response
from seglog.client.events import Subscribed, Unsubscribed, WatchEvent
from seglog.client.exceptions import (
    SeglogClientError,
    SeglogConnectionError,
    SeglogProtocolError,
    SeglogTimeoutError,
)
from seglog.client.types import Appended

T = TypeVar("T")

# A record push holds up to `max_batch_bytes` (clamped to 8 MiB) of JSON plus framing.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def ws_headers(headers: httpx.Headers) -> dict[str, str]:
    """The upgrade request's headers: the client's key (Bearer, API.md §8)."""
    auth = headers.get("authorization")
    return {} if auth is None else {"Authorization": auth}


def connect_error(exc: Exception, url: str) -> SeglogClientError:
    if isinstance(exc, InvalidStatus):  # refused before the upgrade: an HTTP error body
        r = exc.response
        body = bytes(r.body or b"")
        return error_from_response(
            httpx.Response(r.status_code, headers=list(r.headers.raw_items()), content=body)
        )
    kind = SeglogTimeoutError if isinstance(exc, TimeoutError) else SeglogConnectionError
    return kind(f"WebSocket {url}: {type(exc).__name__}: {exc}")


def closed_error(exc: ConnectionClosed) -> SeglogConnectionError:
    return SeglogConnectionError(f"WebSocket closed: {exc}")


def typed_reply(parse: Callable[[Mapping[str, Any]], T], op: str, body: dict[str, Any]) -> T:
    try:
        return parse(body)
    except (KeyError, TypeError, ValueError) as exc:
        raise SeglogProtocolError(f"malformed reply to {op!r}: {exc!r}") from exc


class SessionBase:
    """What both sessions share besides I/O."""

    _proto: _ws.WsProtocol

    @property
    def cursors(self) -> dict[str, int]:
        """Per-topic position of the last batch or gap pushed (resubscribe with these)."""
        return dict(self._proto.cursors)


class WebSocket(SessionBase):
    """A blocking WebSocket session from `Client.websocket()`; connects on first use."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float) -> None:
        self.url, self._headers, self.timeout = url, headers, timeout
        self._conn: ClientConnection | None = None
        self._stack = contextlib.ExitStack()
        self._proto = _ws.WsProtocol()
        self._events: deque[WatchEvent] = deque()

    def connect(self) -> Self:
        if self._conn is None:
            try:
                opening = connect(
                    self.url,
                    additional_headers=self._headers,
                    user_agent_header=USER_AGENT,
                    open_timeout=self.timeout,
                    compression=None,  # the server speaks uncompressed (ECOSYSTEM.md)
                    max_size=MAX_MESSAGE_BYTES,
                )
                # Entered as a context manager: websockets >= 17.1 deprecates using connect()'s
                # result directly, and earlier versions return the connection (its own manager).
                self._conn = self._stack.enter_context(opening)
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                raise connect_error(exc, self.url) from exc
        return self

    def _recv(self, timeout: float | None) -> _ws.Incoming:
        conn = self.connect()._conn
        assert conn is not None
        try:
            text = conn.recv(timeout=timeout)
        except TimeoutError as exc:
            raise SeglogTimeoutError(f"no WebSocket message within {timeout}s") from exc
        return self._proto.decode(text)

    def _request(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        request_id, text = self._proto.command(op, fields)
        conn = self.connect()._conn
        assert conn is not None
        deadline = time.monotonic() + self.timeout
        try:
            conn.send(text)
            while True:
                msg = self._recv(max(deadline - time.monotonic(), 0.0))
                if isinstance(msg, _ws.Pushed):
                    self._events.extend(msg.events)
                elif isinstance(msg, _ws.SessionError):
                    raise msg.error
                elif msg.request_id == request_id:
                    if msg.error is not None:
                        raise msg.error
                    return msg.body
                # else: a late reply to an earlier command that timed out; drop it.
        except ConnectionClosed as exc:
            raise closed_error(exc) from exc

    def subscribe(
        self,
        topics: str | Sequence[str] | Mapping[str, int | None],
        *,
        from_seq: int = 0,
        tail: bool = False,
        node: str | Sequence[str] | None = None,
        topic_nodes: Mapping[str, str | Sequence[str]] | None = None,
        limit: int | None = None,
        max_batch_bytes: int | None = None,
        include_data: bool = True,
        include_tags: bool = False,
        include_meta: bool = True,
        lenient: bool = False,
    ) -> Subscribed:
        """Start (or restart) pushes for `topics`, as for `Client.watch`."""
        fields = _ws.subscribe_fields(
            topics,
            from_seq=from_seq,
            tail=tail,
            node=node,
            topic_nodes=topic_nodes,
            limit=limit,
            max_batch_bytes=max_batch_bytes,
            include_data=include_data,
            include_tags=include_tags,
            include_meta=include_meta,
            lenient=lenient,
        )
        return typed_reply(Subscribed.from_json, "subscribe", self._request("subscribe", fields))

    def unsubscribe(self, topics: str | Sequence[str]) -> Unsubscribed:
        body = self._request("unsubscribe", _ws.unsubscribe_fields(topics))
        return typed_reply(Unsubscribed.from_json, "unsubscribe", body)

    def publish(
        self,
        topic: str,
        records: Sequence[Mapping[str, Any]],
        *,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: Mapping[str, Any] | None = None,
        return_seqs: bool = True,
    ) -> Appended:
        """Append atomically (API.md §3 semantics); the `ack` as `Appended`."""
        fields = _ws.publish_fields(
            topic,
            records,
            node=node,
            idempotency_key=idempotency_key,
            create=create,
            config=config,
            return_seqs=return_seqs,
        )
        return typed_reply(Appended.from_json, "publish", self._request("publish", fields))

    def ping(self) -> float:
        """Round trip of an application-level ping, in seconds."""
        start = time.monotonic()
        self._request("ping", {})
        return time.monotonic() - start

    def next_event(self, timeout: float | None = None) -> WatchEvent | None:
        """The next pushed event, waiting up to `timeout` seconds (None: forever); None when
        the server closed the socket normally. Raises `SeglogTimeoutError` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._events:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                msg = self._recv(left)
            except ConnectionClosedOK:
                return None
            except ConnectionClosed as exc:
                raise closed_error(exc) from exc
            if isinstance(msg, _ws.Pushed):
                self._events.extend(msg.events)
            elif isinstance(msg, _ws.SessionError):
                raise msg.error
        return self._events.popleft()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> WatchEvent:
        event = self.next_event()
        if event is None:
            raise StopIteration
        return event

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Self:
        return self.connect()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
