"""Result values returned by `Client` and `AsyncClient`.

Each is a frozen, slotted dataclass built from one success body by its `from_json`, except
`ReadRecord`: a frozen `msgspec.Struct`, decoded with its diff page straight from the
response bytes (`decode_diff`). Field names follow API.md; record metadata keys (`$seq`,
`$ts`, `$node`, `$tag`) lose their `$`. Unknown response fields are ignored (API.md §0.1,
additive evolution); a missing required field raises `KeyError` (or msgspec's
`ValidationError`), which the decoder turns into `SeglogProtocolError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import msgspec


def _perf(obj: Mapping[str, Any]) -> dict[str, Any]:
    perf = obj.get("performance")
    return dict(perf) if isinstance(perf, Mapping) else {}


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Health:
    status: str
    version: str
    uptime_ms: int

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(str(obj["status"]), str(obj["version"]), int(obj["uptime_ms"]))


@dataclass(frozen=True, slots=True)
class Ready:
    status: str
    wal_replay_complete: bool
    topics: int

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(str(obj["status"]), bool(obj["wal_replay_complete"]), int(obj["topics"]))


@dataclass(frozen=True, slots=True)
class TopicPut:
    topic: str
    created: bool
    config: dict[str, Any]
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(str(obj["topic"]), bool(obj["created"]), dict(obj["config"]), _perf(obj))


@dataclass(frozen=True, slots=True)
class TopicState:
    topic: str
    type: str
    head_seq: int
    earliest_seq: int
    next_seq: int
    count: int
    bytes: int
    config: dict[str, Any]
    effective_priority: int
    last_write_ts: int | None
    last_read_ts: int | None
    queue: dict[str, Any] | None = None
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        queue = obj.get("queue")
        return cls(
            topic=str(obj["topic"]),
            type=str(obj["type"]),
            head_seq=int(obj["head_seq"]),
            earliest_seq=int(obj["earliest_seq"]),
            next_seq=int(obj["next_seq"]),
            count=int(obj["count"]),
            bytes=int(obj["bytes"]),
            config=dict(obj["config"]),
            effective_priority=int(obj["effective_priority"]),
            last_write_ts=_opt_int(obj.get("last_write_ts")),
            last_read_ts=_opt_int(obj.get("last_read_ts")),
            queue=None if queue is None else dict(queue),
            performance=_perf(obj),
        )


@dataclass(frozen=True, slots=True)
class TopicSummary:
    topic: str
    head_seq: int
    earliest_seq: int
    count: int
    bytes: int
    durable: bool
    effective_priority: int

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(
            topic=str(obj["topic"]),
            head_seq=int(obj["head_seq"]),
            earliest_seq=int(obj["earliest_seq"]),
            count=int(obj["count"]),
            bytes=int(obj["bytes"]),
            durable=bool(obj["durable"]),
            effective_priority=int(obj["effective_priority"]),
        )


@dataclass(frozen=True, slots=True)
class TopicPage:
    topics: list[TopicSummary]
    next_cursor: str | None
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        topics = [TopicSummary.from_json(t) for t in obj["topics"]]
        return cls(topics, _opt_str(obj.get("next_cursor")) or None, _perf(obj))


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    topic: str
    deleted: bool
    routers_removed: list[str]
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        routers = [str(r) for r in obj.get("routers_removed") or []]
        return cls(str(obj["topic"]), bool(obj["deleted"]), routers, _perf(obj))


@dataclass(frozen=True, slots=True)
class Appended:
    topic: str
    first_seq: int
    last_seq: int
    seqs: list[int] | None
    head_seq: int
    count: int
    created: bool
    deduped: bool
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        seqs = obj.get("seqs")
        return cls(
            topic=str(obj["topic"]),
            first_seq=int(obj["first_seq"]),
            last_seq=int(obj["last_seq"]),
            seqs=None if seqs is None else [int(s) for s in seqs],
            head_seq=int(obj["head_seq"]),
            count=int(obj["count"]),
            created=bool(obj["created"]),
            deduped=bool(obj["deduped"]),
            performance=_perf(obj),
        )


@dataclass(frozen=True, slots=True)
class AppendedChunk:
    """One atomic chunk of a streamed append: its seqs and record count."""

    first_seq: int
    last_seq: int
    count: int


@dataclass(frozen=True, slots=True)
class StreamAppended:
    """The answer to a streamed (NDJSON) append, API §13.2: every chunk it committed."""

    topic: str
    count: int
    head_seq: int
    chunks: list[AppendedChunk]
    created: bool
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_response(cls, obj: Mapping[str, Any], status: int) -> Self:
        chunks = [
            AppendedChunk(int(c["first_seq"]), int(c["last_seq"]), int(c["count"]))
            for c in obj["chunks"]
        ]
        return cls(
            topic=str(obj["topic"]),
            count=int(obj["count"]),
            head_seq=int(obj["head_seq"]),
            chunks=chunks,
            created=status == 201,
            performance=_perf(obj),
        )


class ReadRecord(
    msgspec.Struct,
    frozen=True,
    rename={"seq": "$seq", "ts": "$ts", "node": "$node", "tag": "$tag"},
):
    """One record as read: `$seq`/`$ts`/`$node`/`$tag` → seq/ts/node/tag; absent keys → None.

    Immutable, compared and hashed by value, built positionally or by keyword like the
    dataclass it was; a `msgspec.Struct` so that a page of them is decoded in C straight
    from the response (a page of 1,000 records: ~0.99 ms as dataclasses over parsed JSON,
    ~0.22 ms decoded; BENCHMARKS.md, "Reads through the Python client")."""

    seq: int
    ts: int
    data: Any = None
    node: str | None = None
    tag: str | None = None
    meta: Any = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        get = obj.get
        return cls(obj["$seq"], obj["$ts"], get("data"), get("$node"), get("$tag"), get("meta"))


@dataclass(frozen=True, slots=True)
class Tombstone:
    """In-band data-loss signal: seqs `gap_from..gap_to` will never be delivered.

    `reason` is one of `cap`, `ttl`, `mixed`, `recreated`, `source_trim` (SEMANTICS §4.4); on
    `recreated` the topic is a new instance and its seqs restarted.
    """

    gap_from: int
    gap_to: int
    reason: str
    missed_estimate: int
    earliest_seq: int
    head_seq: int

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(
            gap_from=int(obj["gap_from"]),
            gap_to=int(obj["gap_to"]),
            reason=str(obj["reason"]),
            missed_estimate=int(obj["missed_estimate"]),
            earliest_seq=int(obj["earliest_seq"]),
            head_seq=int(obj["head_seq"]),
        )


class DiffPage(msgspec.Struct, kw_only=True):
    """A diff response as `decode_diff` reads it (the wire shape, API §5)."""

    topic: str
    records: list[ReadRecord]
    next_from_seq: int
    head_seq: int
    earliest_seq: int
    caught_up: bool
    tombstone: dict[str, Any] | None = None
    lag: int
    performance: dict[str, Any] | None = None


_DIFF_PAGE = msgspec.json.Decoder(DiffPage)


def decode_diff(body: bytes) -> DiffResult:
    """A diff response body as a `DiffResult`, records decoded in one pass; msgspec's
    errors (not JSON, wrong shape) propagate for the caller to report."""
    return DiffResult.from_page(_DIFF_PAGE.decode(body))


@dataclass(frozen=True, slots=True)
class DiffResult:
    topic: str
    records: list[ReadRecord]
    next_from_seq: int
    head_seq: int
    earliest_seq: int
    caught_up: bool
    tombstone: Tombstone | None
    lag: int
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_page(cls, page: DiffPage) -> Self:
        tomb = page.tombstone
        return cls(
            topic=page.topic,
            records=page.records,
            next_from_seq=page.next_from_seq,
            head_seq=page.head_seq,
            earliest_seq=page.earliest_seq,
            caught_up=page.caught_up,
            tombstone=None if tomb is None else Tombstone.from_json(tomb),
            lag=page.lag,
            performance=dict(page.performance or {}),
        )

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        """From a parsed diff response (the client itself decodes the bytes: `decode_diff`)."""
        return cls.from_page(msgspec.convert(obj, DiffPage))


@dataclass(frozen=True, slots=True)
class Deleted:
    topic: str
    deleted: int
    earliest_seq: int
    head_seq: int
    count: int
    bytes: int
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls(
            topic=str(obj["topic"]),
            deleted=int(obj["deleted"]),
            earliest_seq=int(obj["earliest_seq"]),
            head_seq=int(obj["head_seq"]),
            count=int(obj["count"]),
            bytes=int(obj["bytes"]),
            performance=_perf(obj),
        )


# --- queues (API §9) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """One leased job: the record plus its lease. `lease_id` fences an ack, nack or extend to
    this delivery; `deadline` (epoch ms) is when the lease expires unless extended."""

    topic: str
    seq: int
    lease_id: str
    deadline: int
    ts: int
    deliveries: int
    data: Any
    tag: str | None = None
    meta: Any = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], topic: str | None = None) -> Self:
        return cls(
            topic=str(obj["topic"]) if topic is None else topic,
            seq=int(obj["$seq"]),
            lease_id=str(obj["lease_id"]),
            deadline=int(obj["deadline"]),
            ts=int(obj["$ts"]),
            deliveries=int(obj["deliveries"]),
            data=obj["data"],
            tag=_opt_str(obj.get("$tag")),
            meta=obj.get("meta"),
        )


@dataclass(frozen=True, slots=True)
class Claimed:
    topic: str
    jobs: list[Job]
    ready: int
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        topic = str(obj["topic"])
        jobs = [Job.from_json(j, topic) for j in obj["claimed"]]
        return cls(topic, jobs, int(obj["ready"]), _perf(obj))


@dataclass(frozen=True, slots=True)
class Settled:
    """The answer to an ack, nack or extend. `done` counts the seqs acted on; `skipped` lists
    the others in request order (not leased to this node, a fence mismatch, expired, already
    acked). `deadlines` (extend only) maps each extended seq to its new deadline; `ready` and
    `in_flight` are None for extend (the server does not report them there)."""

    topic: str
    done: int
    skipped: list[int]
    ready: int | None = None
    in_flight: int | None = None
    deadlines: dict[int, int] = field(default_factory=dict)
    performance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        done = next(int(obj[k]) for k in ("acked", "nacked", "extended") if k in obj)
        deadlines = {int(k): int(v) for k, v in (obj.get("deadlines") or {}).items()}
        return cls(
            str(obj["topic"]),
            done,
            [int(s) for s in obj["skipped"]],
            _opt_int(obj.get("ready")),
            _opt_int(obj.get("in_flight")),
            deadlines,
            _perf(obj),
        )
