"""Live-delivery values: what `watch()` and a WebSocket session hand out (API.md §7, §8).

The SSE watch and the WebSocket push the same four kinds of event, so both yield these types:
one `WatchRecord` per record (a server batch is flattened, each record carrying its topic),
`WatchTombstone` for data loss (a value, never an exception), `WatchCaughtUp` when a topic
drains to its head, and `WatchTopicDeleted` (terminal for that topic). Frozen and slotted like
`seglog.client.types`; unknown fields are ignored, a missing required one raises `KeyError`
(turned into `SeglogProtocolError` by the decoders).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

FROM_SEQ_TOO_OLD = "from_seq_too_old"
RECREATED = "recreated"


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class WatchRecord:
    """One delivered record. `head_seq` is the topic head when its batch was read; `data` is
    None when the session set `include_data=False`, `tag` only with `include_tags`."""

    topic: str
    seq: int
    ts: int
    data: Any
    head_seq: int
    node: str | None = None
    tag: str | None = None
    meta: Any = None

    @classmethod
    def from_json(cls, topic: str, head_seq: int, obj: Mapping[str, Any]) -> Self:
        return cls(
            topic=topic,
            seq=int(obj["$seq"]),
            ts=int(obj["$ts"]),
            data=obj.get("data"),
            head_seq=head_seq,
            node=_opt_str(obj.get("$node")),
            tag=_opt_str(obj.get("$tag")),
            meta=obj.get("meta"),
        )


@dataclass(frozen=True, slots=True)
class WatchTombstone:
    """Seqs `gap_from..gap_to` of `topic` will never be delivered.

    `reason`: `from_seq_too_old` (the first read after a stream opened, whatever the cause),
    `cap`, `ttl`, `mixed`, `recreated` (the topic is a new instance; seqs restarted) or
    `source_trim`. The range is authoritative, the reason informational.
    """

    topic: str
    reason: str
    gap_from: int
    gap_to: int
    earliest_seq: int
    head_seq: int

    @property
    def missed(self) -> int:
        """How many seqs the gap spans (0 for an empty `recreated` gap)."""
        return max(self.gap_to - self.gap_from + 1, 0)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(
            topic=str(obj["topic"]),
            reason=str(obj["reason"]),
            gap_from=int(obj["gap_from"]),
            gap_to=int(obj["gap_to"]),
            earliest_seq=int(obj["earliest_seq"]),
            head_seq=int(obj["head_seq"]),
        )

    def describe(self) -> str:
        """The gap in words, for people (the CLI prints this)."""
        why = {
            FROM_SEQ_TOO_OLD: "the start position was already gone",
            "cap": "the topic's size cap evicted them",
            "ttl": "they expired (TTL)",
            "mixed": "size cap and TTL evicted them",
            RECREATED: "the topic was deleted and recreated; seqs restarted",
            "source_trim": "the router source was trimmed before they were forwarded",
        }.get(self.reason, f"reason {self.reason!r}")
        if self.missed == 0:
            span = "no records"
        elif self.missed == 1:
            span = f"record {self.gap_from}"
        else:
            span = f"records {self.gap_from}..{self.gap_to} ({self.missed})"
        return (
            f"{self.topic}: {span} lost: {why}; "
            f"earliest is now {self.earliest_seq}, head {self.head_seq}"
        )


@dataclass(frozen=True, slots=True)
class WatchCaughtUp:
    """`topic` drained to `head_seq`; sent once per transition from backlog to tailing."""

    topic: str
    head_seq: int

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(str(obj["topic"]), int(obj["head_seq"]))


@dataclass(frozen=True, slots=True)
class WatchTopicDeleted:
    """`topic` no longer exists; nothing more will come for it."""

    topic: str
    head_seq: int
    reason: str = "deleted"

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(
            str(obj["topic"]), int(obj.get("head_seq") or 0), str(obj.get("reason", "deleted"))
        )


WatchEvent = WatchRecord | WatchTombstone | WatchCaughtUp | WatchTopicDeleted


@dataclass(frozen=True, slots=True)
class TopicStart:
    """Where a topic's delivery starts, as the server resolved it (`tail` ⇒ the head)."""

    from_seq: int
    head_seq: int
    earliest_seq: int

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(int(obj["from_seq"]), int(obj["head_seq"]), int(obj["earliest_seq"]))


def _starts(obj: Any) -> dict[str, TopicStart]:
    return {str(name): TopicStart.from_json(v) for name, v in dict(obj).items()}


@dataclass(frozen=True, slots=True)
class WatchSession:
    """A created watch session (`POST /v0/watch`). `topics` lacks names dropped by `lenient`."""

    wid: str
    stream_url: str
    session_ttl_ms: int
    topics: dict[str, TopicStart]
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        perf = obj.get("performance")
        return cls(
            wid=str(obj["wid"]),
            stream_url=str(obj["stream_url"]),
            session_ttl_ms=int(obj["session_ttl_ms"]),
            topics=_starts(obj["topics"]),
            performance=dict(perf) if isinstance(perf, Mapping) else {},
        )


@dataclass(frozen=True, slots=True)
class Subscribed:
    """WebSocket `subscribed` reply: where each topic's delivery starts."""

    topics: dict[str, TopicStart]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(_starts(obj.get("topics") or {}))


@dataclass(frozen=True, slots=True)
class Unsubscribed:
    """WebSocket `unsubscribed` reply."""

    topics: list[str]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls([str(t) for t in obj.get("topics") or []])
