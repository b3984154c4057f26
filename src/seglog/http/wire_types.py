"""Every request and response body of the `/v0` API (API §2-§13) as a type.

The response encoders build their bodies as these typed dicts, so the type checker holds
each encoder to its shape; the request parsers are held to the request types by
`tests/http/test_wire_types.py`, which records the fields each parser reads. The OpenAPI
document's component schemas are generated from this module (`openapi_schemas`), so the
document, the encoders and the parsers cannot drift apart. Typed dicts cost nothing at
runtime: the bodies stay plain dicts for orjson. API.md stays normative.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from msgspec import Meta

from seglog.errors import ErrorCode
from seglog.model import TombstoneFields, TopicConfigFields
from seglog.router_model import RouterFields
from seglog.wire_fields import U32, U64, Predicate, TopicName

Nodes = str | list[str]
NonEmpty = Annotated[str, Meta(min_length=1)]
LeaseWireId = Annotated[str, Meta(pattern="^(|lease_[0-9a-f]+)$")]
Fraction = Annotated[float, Meta(ge=0, le=1)]


# ---- shared pieces -----------------------------------------------------------------------
class ErrorBody(TypedDict):
    code: ErrorCode
    message: NonEmpty
    detail: NotRequired[dict[str, Any]]


class Error(TypedDict):
    """Every non-2xx answer (API §0.5): exactly this object, no other field."""

    error: ErrorBody


class Performance(TypedDict):
    """Server-side timings and counters (API §0.7); only `server_total_ms` is always there."""

    server_total_ms: float
    wal_append_ms: NotRequired[float]
    fsync_ms: NotRequired[float]
    records_scanned: NotRequired[U64]
    throttle_wait_ms: NotRequired[float]
    cold_segments_read: NotRequired[U64]


class TopicConfigRequest(TypedDict, total=False):
    """A topic config as sent: any subset of the fields, the rest take their defaults."""

    type: Literal["log", "queue"]
    ttl_ms: U64
    cap_records: U64
    cap_bytes: U64
    discard: Literal["old", "reject"]
    durable: bool
    durability: Literal["ephemeral", "memory", "disk", "fsync"]
    priority: Annotated[int, Meta(ge=-(2**31), le=2**31 - 1)] | None
    auto_priority: bool
    auto_create: bool
    idempotency_window_ms: U64
    dedupe_node: bool
    lease_ms: U64
    claim_jitter_ms: U64
    max_deliveries: U64
    dead_letter: TopicName | None
    leases_durable: bool


TopicConfig = TopicConfigFields
Tombstone = TombstoneFields


class RecordIn(TypedDict):
    data: Any
    tag: NotRequired[Annotated[str, Meta(max_length=256)]]
    node: NotRequired[Annotated[str, Meta(max_length=128)]]
    meta: NotRequired[Any]


Record = TypedDict(
    "Record",
    {
        "$seq": U64,
        "$ts": int,
        "$node": NotRequired[str],
        "$tag": NotRequired[str],
        "data": NotRequired[Any],
        "meta": NotRequired[Any],
    },
)


# ---- writes (§3, §13.2) ------------------------------------------------------------------
class WriteRequest(TypedDict):
    records: Annotated[list[RecordIn], Meta(max_length=10000)]
    node: NotRequired[Annotated[str, Meta(max_length=128)]]
    idempotency_key: NotRequired[Annotated[str, Meta(max_length=256)]]
    create: NotRequired[bool]
    config: NotRequired[TopicConfigRequest]
    disable_backpressure: NotRequired[bool]


class WriteResponse(TypedDict):
    topic: str
    first_seq: U64
    last_seq: U64
    seqs: NotRequired[list[U64]]
    head_seq: U64
    count: U64
    created: bool
    deduped: bool
    performance: Performance


class NdjsonChunk(TypedDict):
    first_seq: U64
    last_seq: U64
    count: U64


class NdjsonWriteResponse(TypedDict):
    topic: str
    count: U64
    head_seq: U64
    chunks: list[NdjsonChunk]
    performance: Performance


# ---- reads and deletes (§4, §5) ----------------------------------------------------------
class DiffRequest(TypedDict, total=False):
    from_seq: U64
    limit: U32
    node: Nodes
    include_tags: bool
    include_meta: bool
    wait_ms: U32
    max_batch_bytes: U64


class DiffScalars(TypedDict):
    """Every field of a diff answer but `records`: the JSON answer's, and the Arrow
    answer's `seglog` schema metadata (API §13.1)."""

    topic: str
    next_from_seq: U64
    head_seq: U64
    earliest_seq: U64
    caught_up: bool
    tombstone: Tombstone | None
    lag: U64
    performance: Performance


class DiffResponse(DiffScalars):
    records: list[Record]


class DeleteRequest(TypedDict, total=False):
    before_seq: U64
    match: Predicate


class DeleteResponse(TypedDict):
    topic: str
    deleted: U64
    earliest_seq: U64
    head_seq: U64
    count: U64
    bytes: U64
    performance: Performance


# ---- topics (§2) -------------------------------------------------------------------------
class PutTopicResponse(TypedDict):
    topic: str
    created: bool
    config: TopicConfig
    performance: Performance


class QueueState(TypedDict):
    ready: U64
    in_flight: U64
    dead_lettered: U64


class TopicState(TypedDict):
    topic: str
    type: Literal["log", "queue"]
    head_seq: U64
    earliest_seq: U64
    next_seq: U64
    count: U64
    bytes: U64
    config: TopicConfig
    effective_priority: int
    last_write_ts: int | None
    last_read_ts: int | None
    queue: NotRequired[QueueState]
    performance: Performance


class TopicSummary(TypedDict):
    topic: str
    head_seq: U64
    earliest_seq: U64
    count: U64
    bytes: U64
    durable: bool
    effective_priority: int


class TopicList(TypedDict):
    topics: list[TopicSummary]
    next_cursor: NotRequired[str]
    performance: Performance


class DropTopicResponse(TypedDict):
    topic: str
    deleted: bool
    routers_removed: list[str]
    performance: Performance


# ---- routers (§6) ------------------------------------------------------------------------
class RouterRequest(TypedDict):
    source: TopicName
    dest: TopicName
    preserve_node: NotRequired[bool]
    preserve_tag: NotRequired[bool]
    create_dest: NotRequired[bool]
    filter: NotRequired[Predicate | None]
    allow_cycle: NotRequired[bool]
    guarantee: NotRequired[Literal["at_least_once", "exactly_once"]]


class RouterResponse(RouterFields):
    created: bool
    performance: Performance


class RouterState(RouterFields):
    forwarded_total: U64
    performance: Performance


class RouterRow(TypedDict):
    router: str
    source: str
    dest: str
    guarantee: str
    forwarded_total: U64


class RouterList(TypedDict):
    routers: list[RouterRow]
    next_cursor: NotRequired[str]
    performance: Performance


class DropRouterResponse(TypedDict):
    router: str
    deleted: bool
    performance: Performance


# ---- watch (§7) --------------------------------------------------------------------------
class WatchTopicStart(TypedDict, total=False):
    """Where to start one topic; a per-topic `node` filter is seglog's addition to API
    §7.1 (it adds to the session's own)."""

    from_seq: U64
    tail: bool
    node: Nodes


class WatchRequest(TypedDict):
    topics: Annotated[dict[str, WatchTopicStart], Meta(min_length=1, max_length=256)]
    node: NotRequired[Nodes]
    limit: NotRequired[U32]
    max_batch_bytes: NotRequired[U64]
    heartbeat_ms: NotRequired[U64]
    include_meta: NotRequired[bool]
    include_tags: NotRequired[bool]
    include_data: NotRequired[bool]
    consistency: NotRequired[Literal["eventual", "strong"]]


class WatchCursor(TypedDict):
    from_seq: U64
    head_seq: U64
    earliest_seq: U64


class WatchResponse(TypedDict):
    wid: str
    stream_url: str
    session_ttl_ms: U64
    topics: dict[str, WatchCursor]
    performance: Performance


# ---- queues (§9) -------------------------------------------------------------------------
class ClaimRequest(TypedDict):
    node: NonEmpty
    max: NotRequired[U32]
    lease_ms: NotRequired[U64]


Job = TypedDict(
    "Job",
    {
        "$seq": U64,
        "lease_id": str,
        "deadline": int,
        "$ts": int,
        "$tag": NotRequired[str],
        "deliveries": U64,
        "data": Any,
        "meta": NotRequired[Any],
    },
)


class ClaimResponse(TypedDict):
    topic: str
    claimed: list[Job]
    count: U64
    ready: U64
    performance: Performance


class AckRequest(TypedDict):
    node: NonEmpty
    seqs: Annotated[list[U64], Meta(max_length=1000)]
    lease_ids: NotRequired[Annotated[list[LeaseWireId], Meta(max_length=1000)]]


class AckResponse(TypedDict):
    topic: str
    acked: U64
    skipped: list[U64]
    ready: U64
    in_flight: U64
    performance: Performance


class NackRequest(AckRequest):
    delay_ms: NotRequired[U64]


class NackResponse(TypedDict):
    topic: str
    nacked: U64
    skipped: list[U64]
    ready: U64
    in_flight: U64
    performance: Performance


class ExtendRequest(AckRequest):
    lease_ms: U64


class ExtendResponse(TypedDict):
    topic: str
    extended: U64
    skipped: list[U64]
    deadlines: dict[str, int]
    performance: Performance


# ---- probes and metrics (§1.4, §12) -------------------------------------------------------
class Health(TypedDict):
    status: Literal["ok"]
    version: str
    uptime_ms: U64


class Ready(TypedDict):
    status: Literal["ready"]
    wal_replay_complete: bool
    topics: U64


class WalMetrics(TypedDict):
    fsyncs: U64
    frames: U64
    batches: U64
    bytes_written: U64
    rotations: U64
    queue_depth: U64
    queue_depth_peak: U64
    submit_full_total: U64
    read_only: U64
    fsync_count: U64
    fsync_micros_total: U64


class FanoutMetrics(TypedDict):
    broadcasts: U64
    served: U64
    handed: U64
    woken: U64


class DeliveryMetrics(TypedDict):
    pressure_level: U64
    lag_ms: U64
    band_depths: list[U64]
    marked: U64
    coalesced: U64
    woken: U64
    deferred_passes: U64
    throttled_writes: U64
    max_wait_ms: U64
    fanout: FanoutMetrics


class MetricsJson(TypedDict):
    topics: U64
    topics_ephemeral: U64
    topics_memory: U64
    topics_disk: U64
    topics_fsync: U64
    routers: U64
    records_live: U64
    bytes_live: U64
    queue_topics: U64
    queue_leases_in_flight: U64
    sse_connections: U64
    watch_sessions: U64
    uptime_ms: U64
    ready: bool
    replay_progress: Fraction
    wal: WalMetrics
    delivery: DeliveryMetrics


# The document's components, in this order (request bodies, then responses).
DOCUMENTED: tuple[Any, ...] = (
    Error,
    Performance,
    TopicConfigRequest,
    RecordIn,
    Record,
    WriteRequest,
    WriteResponse,
    NdjsonWriteResponse,
    DiffRequest,
    DiffResponse,
    DeleteRequest,
    DeleteResponse,
    PutTopicResponse,
    TopicState,
    TopicList,
    DropTopicResponse,
    RouterRequest,
    RouterResponse,
    RouterState,
    RouterList,
    DropRouterResponse,
    WatchRequest,
    WatchResponse,
    ClaimRequest,
    ClaimResponse,
    AckRequest,
    AckResponse,
    NackRequest,
    NackResponse,
    ExtendRequest,
    ExtendResponse,
    Health,
    Ready,
    MetricsJson,
)
