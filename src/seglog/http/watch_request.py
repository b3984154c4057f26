"""The `POST /v0/watch` body (API §7.1) and the topic map it shares with the WebSocket
`subscribe` command (API §8), with defaults and clamps applied here."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from seglog.http.body_fields import bool_field, json_object, malformed, u64_field
from seglog.http.diff_request import parse_nodes
from seglog.model import MAX_BATCH_BYTES, MAX_DIFF_LIMIT

MAX_WATCH_TOPICS = 256
WATCH_DEFAULT_LIMIT = 256
WATCH_DEFAULT_BATCH_BYTES = 262_144
WATCH_ZERO_BATCH_BYTES = 1_048_576  # `max_batch_bytes: 0` means 1 MiB, not the default
HEARTBEAT_DEFAULT_MS = 15_000
HEARTBEAT_MIN_MS = 1_000
HEARTBEAT_MAX_MS = 60_000
CONSISTENCIES = ("eventual", "strong")


@dataclass(frozen=True, slots=True)
class TopicStart:
    """Where one watched topic starts: after `from_seq`, or at its head when `tail`; and
    the reader's own node ids in this topic's topology (loop prevention, added to the
    session's `node`)."""

    from_seq: int = 0
    tail: bool = False
    nodes: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class DeliveryOptions:
    """How records are read and rendered for one session or subscription."""

    nodes: frozenset[str] = frozenset()
    limit: int = WATCH_DEFAULT_LIMIT
    max_batch_bytes: int = WATCH_DEFAULT_BATCH_BYTES
    include_meta: bool = True
    include_tags: bool = False
    include_data: bool = True

    def for_topic(self, start: TopicStart) -> DeliveryOptions:
        if not start.nodes:
            return self
        return replace(self, nodes=self.nodes | start.nodes)


@dataclass(frozen=True, slots=True)
class WatchRequest:
    topics: dict[str, TopicStart]
    options: DeliveryOptions
    heartbeat_ms: int = HEARTBEAT_DEFAULT_MS
    consistency: str = "eventual"


def parse_topic_map(value: Any, field: str = "topics") -> dict[str, TopicStart]:
    """`{name: {"from_seq": u64 = 0, "tail": bool = false, "node": str | [str]}}` (`node`
    per topic is seglog's addition to API §7.1); names are checked later
    (scope, allowlist, existence) by the caller, in the API's order."""
    if not isinstance(value, dict):
        raise malformed(f"{field} must be an object mapping topic names to start positions")
    out: dict[str, TopicStart] = {}
    for name, spec in value.items():
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise malformed(f"{field}.{name} must be an object")
        nodes = (
            frozenset(parse_nodes(spec["node"], f"{field}.{name}.node"))
            if "node" in spec
            else frozenset()
        )
        out[name] = TopicStart(
            u64_field(spec, "from_seq", 0), bool_field(spec, "tail", False), nodes
        )
    return out


def check_topic_count(topics: dict[str, TopicStart]) -> None:
    if not topics:
        raise malformed("topics must name at least one topic")
    if len(topics) > MAX_WATCH_TOPICS:
        raise malformed(f"at most {MAX_WATCH_TOPICS} topics per watch ({len(topics)} given)")


def parse_watch(obj: Any) -> WatchRequest:
    body = json_object(obj)
    if "topics" not in body:
        raise malformed("topics is required")
    topics = parse_topic_map(body["topics"])
    check_topic_count(topics)
    limit = u64_field(body, "limit", 0)
    batch = u64_field(body, "max_batch_bytes", WATCH_DEFAULT_BATCH_BYTES)
    heartbeat = u64_field(body, "heartbeat_ms", HEARTBEAT_DEFAULT_MS)
    consistency = body.get("consistency", "eventual")
    if consistency not in CONSISTENCIES:
        raise malformed('consistency must be "eventual" or "strong"')
    options = DeliveryOptions(
        nodes=frozenset(parse_nodes(body["node"])) if "node" in body else frozenset(),
        limit=min(limit, MAX_DIFF_LIMIT) if limit else WATCH_DEFAULT_LIMIT,
        max_batch_bytes=min(batch, MAX_BATCH_BYTES) if batch else WATCH_ZERO_BATCH_BYTES,
        include_meta=bool_field(body, "include_meta", True),
        include_tags=bool_field(body, "include_tags", False),
        include_data=bool_field(body, "include_data", True),
    )
    return WatchRequest(
        topics=topics,
        options=options,
        heartbeat_ms=min(max(heartbeat, HEARTBEAT_MIN_MS), HEARTBEAT_MAX_MS),
        consistency=consistency,
    )
