"""`AsyncWebSocket`: the asyncio twin of `WebSocket` (see `websocket.py` for the protocol).

One reader task owns the socket: it resolves each command's future from the reply carrying its
`request_id` and queues pushed events (unbounded, so a task awaiting a reply is never stuck
behind events nobody has read yet). When the socket ends, every pending command and the
iterator get the same error (or a normal end).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from seglog.client import _ws
from seglog.client._base import USER_AGENT
from seglog.client.events import Subscribed, Unsubscribed, WatchEvent
from seglog.client.exceptions import SeglogClientError, SeglogConnectionError, SeglogTimeoutError
from seglog.client.types import Appended
from seglog.client.websocket import (
    MAX_MESSAGE_BYTES,
    SessionBase,
    closed_error,
    connect_error,
    typed_reply,
)

_END = object()


class AsyncWebSocket(SessionBase):
    """An asyncio WebSocket session from `AsyncClient.websocket()`; connects on first use."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float) -> None:
        self.url, self._headers, self.timeout = url, headers, timeout
        self._conn: ClientConnection | None = None
        self._proto = _ws.WsProtocol()
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._end: SeglogClientError | None = None

    async def connect(self) -> Self:
        if self._conn is None:
            try:
                self._conn = await connect(
                    self.url,
                    additional_headers=self._headers,
                    user_agent_header=USER_AGENT,
                    open_timeout=self.timeout,
                    compression=None,
                    max_size=MAX_MESSAGE_BYTES,
                )
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                raise connect_error(exc, self.url) from exc
            self._reader = asyncio.create_task(self._read(self._conn))
        return self

    async def _read(self, conn: ClientConnection) -> None:
        """The only reader of the socket: replies to their commands, events to the queue."""
        end: SeglogClientError | None = None
        try:
            async for text in conn:
                msg = self._proto.decode(text)
                if isinstance(msg, _ws.Pushed):
                    for event in msg.events:
                        self._queue.put_nowait(event)
                elif isinstance(msg, _ws.SessionError):
                    raise msg.error
                else:
                    fut = self._pending.pop(msg.request_id, None)
                    if fut is not None and not fut.done():
                        if msg.error is not None:
                            fut.set_exception(msg.error)
                        else:
                            fut.set_result(msg.body)
        except ConnectionClosed as exc:
            end = closed_error(exc)
        except SeglogClientError as exc:
            end = exc
        self._end = end
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(end or SeglogConnectionError("WebSocket closed"))
        self._pending.clear()
        self._queue.put_nowait(_END)

    async def _request(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        conn = (await self.connect())._conn
        assert conn is not None
        if self._reader is not None and self._reader.done():
            raise self._end or SeglogConnectionError("WebSocket closed")
        request_id, text = self._proto.command(op, fields)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = fut
        try:
            await conn.send(text)
            return await asyncio.wait_for(fut, self.timeout)
        except TimeoutError as exc:
            raise SeglogTimeoutError(f"no reply to {op!r} within {self.timeout}s") from exc
        except ConnectionClosed as exc:
            raise closed_error(exc) from exc
        finally:
            self._pending.pop(request_id, None)

    async def subscribe(
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
        """Start (or restart) pushes for `topics`, as for `AsyncClient.watch`."""
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
        return typed_reply(
            Subscribed.from_json, "subscribe", await self._request("subscribe", fields)
        )

    async def unsubscribe(self, topics: str | Sequence[str]) -> Unsubscribed:
        body = await self._request("unsubscribe", _ws.unsubscribe_fields(topics))
        return typed_reply(Unsubscribed.from_json, "unsubscribe", body)

    async def publish(
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
        fields = _ws.publish_fields(
            topic,
            records,
            node=node,
            idempotency_key=idempotency_key,
            create=create,
            config=config,
            return_seqs=return_seqs,
        )
        return typed_reply(Appended.from_json, "publish", await self._request("publish", fields))

    async def ping(self) -> float:
        start = time.monotonic()
        await self._request("ping", {})
        return time.monotonic() - start

    async def next_event(self, timeout: float | None = None) -> WatchEvent | None:
        """The next pushed event (None once the socket closed normally)."""
        await self.connect()
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError as exc:
            raise SeglogTimeoutError(f"no WebSocket event within {timeout}s") from exc
        if item is _END:
            self._queue.put_nowait(_END)  # every later call ends too
            if self._end is not None:
                raise self._end
            return None
        return item  # type: ignore[return-value]

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> WatchEvent:
        event = await self.next_event()
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._conn.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def close(self) -> None:
        await self.aclose()

    async def __aenter__(self) -> Self:
        return await self.connect()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
