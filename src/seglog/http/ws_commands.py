"""WebSocket client commands (API §8): parsing, defaults and the error message shape.

A command is one JSON text message with an `op`; `request_id` is any JSON value, echoed
back (`null` when absent). Parsing reuses the HTTP body rules, so a field has the same
type rules and limits on both transports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from seglog.errors import SeglogError
from seglog.http.body_fields import bool_field, malformed, u64_field
from seglog.http.diff_request import parse_nodes
from seglog.http.json_body import check_integers
from seglog.http.watch_request import (
    DeliveryOptions,
    TopicStart,
    check_topic_count,
    parse_topic_map,
)
from seglog.model import DEFAULT_BATCH_BYTES, MAX_BATCH_BYTES, MAX_DIFF_LIMIT

WS_DEFAULT_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: dict[str, TopicStart]
    options: DeliveryOptions
    lenient: bool


def parse_subscribe(cmd: dict[str, Any]) -> Subscribe:
    """`topic` (+ `from_seq`/`tail`) and/or `topics` (a §7.1 map); the rest as §8 says."""
    topics: dict[str, TopicStart] = {}
    if "topic" in cmd:
        name = cmd["topic"]
        if not isinstance(name, str):
            raise malformed("topic must be a string")
        topics[name] = TopicStart(u64_field(cmd, "from_seq", 0), bool_field(cmd, "tail", False))
    if "topics" in cmd:
        topics.update(parse_topic_map(cmd["topics"]))
    if not topics:
        raise malformed("subscribe needs topic or topics")
    check_topic_count(topics)
    limit = u64_field(cmd, "limit", WS_DEFAULT_LIMIT)
    batch = u64_field(cmd, "max_batch_bytes", DEFAULT_BATCH_BYTES)
    options = DeliveryOptions(
        nodes=frozenset(parse_nodes(cmd["node"])) if "node" in cmd else frozenset(),
        limit=min(limit, MAX_DIFF_LIMIT) if limit else WS_DEFAULT_LIMIT,
        max_batch_bytes=min(batch, MAX_BATCH_BYTES) if batch else DEFAULT_BATCH_BYTES,
        include_meta=bool_field(cmd, "include_meta", True),
        include_tags=bool_field(cmd, "include_tags", False),
        include_data=bool_field(cmd, "include_data", True),
    )
    return Subscribe(topics, options, bool_field(cmd, "lenient", False))


def parse_unsubscribe(cmd: dict[str, Any]) -> list[str]:
    names: list[str] = []
    if "topic" in cmd:
        if not isinstance(cmd["topic"], str):
            raise malformed("topic must be a string")
        names.append(cmd["topic"])
    if "topics" in cmd:
        given = cmd["topics"]
        if not isinstance(given, list) or not all(isinstance(t, str) for t in given):
            raise malformed("topics must be an array of topic names")
        names.extend(t for t in given if t not in names)
    if not names:
        raise malformed("unsubscribe needs topic or topics")
    return names


def request_id_of(cmd: Any, text: str) -> Any:
    """The `request_id` to echo (API §8: any JSON value, echoed back): as orjson parsed
    it, unless the command holds an integer beyond 64 bits, which orjson reads as a float;
    then the value's exact JSON text, from a parse that keeps integers exact, as an
    `orjson.Fragment` that the replies embed as it is."""
    rid = cmd.get("request_id") if isinstance(cmd, dict) else None
    if rid is None or isinstance(rid, str | bool | int):  # orjson's ints are exact
        return rid
    try:
        try:
            check_integers(text.encode())
        except SeglogError:
            rid = json.loads(text).get("request_id")
        else:
            orjson.dumps(rid)  # orjson writes 255 levels (it reads 1024)
            return rid
    except TypeError:
        pass  # deeper than orjson writes: the standard library's encoder echoes it
    except RecursionError:
        raise malformed("request_id is nested too deeply to echo back") from None
    try:
        return orjson.Fragment(json.dumps(rid, separators=(",", ":"), ensure_ascii=False))
    except RecursionError:
        raise malformed("request_id is nested too deeply to echo back") from None


def error_message(request_id: Any, err: SeglogError, with_request_id: bool = True) -> bytes:
    return coded_error(request_id, err.code.value, err.message, err.detail, with_request_id)


def coded_error(
    request_id: Any,
    code: str,
    message: str,
    detail: dict[str, Any] | None = None,
    with_request_id: bool = True,
) -> bytes:
    """An `error` message; WebSocket-only codes (`invalid_json`, `unsupported_message`)
    have no `ErrorCode`, so the code is a plain string here."""
    body: dict[str, Any] = {"op": "error"}
    if with_request_id:
        body["request_id"] = request_id
    body["code"] = code
    body["message"] = message
    if detail:
        body["detail"] = detail
    return orjson.dumps(body)
