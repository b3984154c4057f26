"""The transport-free half of the WebSocket session (API.md §8): commands out, messages in.

`WsProtocol` numbers each command with its own `request_id` and turns each server message into
one of three things: a `Reply` to a command (`subscribed`, `unsubscribed`, `ack`, `pong`, or an
`error` carrying a `request_id`), pushed `WatchEvent`s (the same types the SSE watch yields), or
a `SessionError` (an `error` that answers no command: `invalid_json` with `request_id: null`,
`unsupported_message`, and `server_shutting_down`). The drivers in `websocket.py` only send and
receive text.

Per-topic cursors follow the push stream (a batch's `to_seq`, a tombstone's `gap_to`) so a
caller can re-subscribe with `from_seq` after a reconnect; the socket itself has no resume.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from seglog.client._watch import cursor_after_tombstone, nodes_value, topic_starts
from seglog.client.events import (
    WatchCaughtUp,
    WatchEvent,
    WatchRecord,
    WatchTombstone,
    WatchTopicDeleted,
)
from seglog.client.exceptions import SeglogHTTPError, SeglogProtocolError, in_band_error

REPLY_OPS = frozenset({"subscribed", "unsubscribed", "ack", "pong"})


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to command `request_id`: its body, or the error it failed with."""

    request_id: str
    op: str
    body: dict[str, Any]
    error: SeglogHTTPError | None = None


@dataclass(frozen=True, slots=True)
class Pushed:
    events: list[WatchEvent]


@dataclass(frozen=True, slots=True)
class SessionError:
    """An error about the socket rather than a command; the session cannot go on."""

    error: SeglogHTTPError


Incoming = Reply | Pushed | SessionError


def _drop_none(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class WsProtocol:
    """Command encoding and message decoding for one socket. Not thread-safe."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.cursors: dict[str, int] = {}

    def command(self, op: str, fields: Mapping[str, Any]) -> tuple[str, str]:
        """`(request_id, text)` for one command; None-valued fields are left to defaults."""
        request_id = f"c{next(self._ids)}"
        body = {"op": op, "request_id": request_id, **_drop_none(fields)}
        return request_id, orjson.dumps(body).decode()

    def decode(self, text: str | bytes) -> Incoming:
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise SeglogProtocolError(f"websocket message is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise SeglogProtocolError("websocket message is not a JSON object")
        op = obj.get("op")
        try:
            if op in REPLY_OPS:
                return Reply(str(obj.get("request_id")), str(op), obj)
            if op == "error":
                return self._error(obj)
            return Pushed(self._events(str(op), obj))
        except (KeyError, TypeError, ValueError) as exc:
            raise SeglogProtocolError(f"malformed websocket {op!r} message: {exc!r}") from exc

    def _error(self, obj: dict[str, Any]) -> Reply | SessionError:
        code = str(obj.get("code") or "")
        detail = {k: v for k, v in obj.items() if k not in ("op", "request_id", "code", "message")}
        err = in_band_error(code, str(obj.get("message") or code), detail or None)
        request_id = obj.get("request_id")
        if request_id is None:
            return SessionError(err)
        return Reply(str(request_id), "error", obj, err)

    def _events(self, op: str, obj: dict[str, Any]) -> list[WatchEvent]:
        if op == "record":
            topic, head = str(obj["topic"]), int(obj["head_seq"])
            events: list[WatchEvent] = [
                WatchRecord.from_json(topic, head, r) for r in obj["records"]
            ]
            self.cursors[topic] = int(obj["to_seq"])
            return events
        if op == "tombstone":
            tomb = WatchTombstone.from_json(obj)
            prev = self.cursors.get(tomb.topic, 0)
            self.cursors[tomb.topic] = cursor_after_tombstone(prev, tomb)
            return [tomb]
        if op == "caught_up":
            return [WatchCaughtUp.from_json(obj)]
        if op == "topic_deleted":
            gone = WatchTopicDeleted.from_json(obj)
            self.cursors.pop(gone.topic, None)
            return [gone]
        return []  # an op this client does not know: the protocol only grows


def subscribe_fields(
    topics: str | Sequence[str] | Mapping[str, int | None],
    *,
    from_seq: int,
    tail: bool,
    node: str | Sequence[str] | None,
    topic_nodes: Mapping[str, str | Sequence[str]] | None,
    limit: int | None,
    max_batch_bytes: int | None,
    include_data: bool,
    include_tags: bool,
    include_meta: bool,
    lenient: bool,
) -> dict[str, Any]:
    starts = topic_starts(topics, from_seq=from_seq, tail=tail, resume=None)
    if not starts:
        raise ValueError("subscribe needs at least one topic")
    specs: dict[str, dict[str, Any]] = {}
    for name, seq in starts.items():
        specs[name] = {"tail": True} if seq is None else {"from_seq": seq}
        if topic_nodes and name in topic_nodes:
            specs[name]["node"] = nodes_value(topic_nodes[name])
    return {
        "topics": specs,
        "node": None if node is None else nodes_value(node),
        "limit": limit,
        "max_batch_bytes": max_batch_bytes,
        "include_data": include_data,
        "include_tags": include_tags,
        "include_meta": include_meta,
        "lenient": lenient,
    }


def unsubscribe_fields(topics: str | Sequence[str]) -> dict[str, Any]:
    names = [topics] if isinstance(topics, str) else list(topics)
    if not names:
        raise ValueError("unsubscribe needs at least one topic")
    return {"topics": names}


def publish_fields(
    topic: str,
    records: Sequence[Mapping[str, Any]],
    *,
    node: str | None,
    idempotency_key: str | None,
    create: bool | None,
    config: Mapping[str, Any] | None,
    return_seqs: bool,
) -> dict[str, Any]:
    return {
        "topic": topic,
        "records": [dict(r) for r in records],
        "node": node,
        "idempotency_key": idempotency_key,
        "create": create,
        "config": None if config is None else dict(config),
        "return_seqs": return_seqs,
    }


def ws_url(base_url: str) -> str:
    """`http://h:p[/prefix]` → `ws://h:p[/prefix]/v0/ws` (`https` → `wss`)."""
    scheme, sep, rest = base_url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise ValueError(f"cannot derive a WebSocket URL from {base_url!r}")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest.rstrip('/')}/v0/ws"
