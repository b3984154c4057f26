"""The component schemas of the OpenAPI document (request and response bodies, API.md §2-§13).

Hand-written from API.md, which stays normative; `tests/http/test_openapi_live.py` checks
every response the real server sends against them, so a schema that drifts from the codec
fails there.
"""

from __future__ import annotations

from typing import Any

from seglog.errors import ErrorCode

Schema = dict[str, Any]

U64: Schema = {"type": "integer", "minimum": 0}
U32: Schema = {"type": "integer", "minimum": 0, "maximum": 4294967295}
I64: Schema = {"type": "integer"}
MS: Schema = {"type": "number"}
STR: Schema = {"type": "string"}
BOOL: Schema = {"type": "boolean"}
ANY: Schema = {}
TOPIC_NAME: Schema = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$"}
ROUTER_NAME: Schema = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}$"}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(props: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


def nullable(s: Schema) -> Schema:
    return {"oneOf": [s, {"type": "null"}]}


def arr(items: Schema, max_items: int | None = None) -> Schema:
    out: Schema = {"type": "array", "items": items}
    if max_items is not None:
        out["maxItems"] = max_items
    return out


def with_perf(props: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    return obj({**props, "performance": ref("Performance")}, (*required, "performance"))


NODES: Schema = {"oneOf": [STR, arr(STR)]}
_CONFIG_PROPS: dict[str, Schema] = {
    "type": {"enum": ["log", "queue"]},
    "ttl_ms": U64,
    "cap_records": U64,
    "cap_bytes": U64,
    "discard": {"enum": ["old", "reject"]},
    "durable": BOOL,
    "durability": {"enum": ["ephemeral", "memory", "disk", "fsync"]},
    "priority": nullable({"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}),
    "auto_priority": BOOL,
    "auto_create": BOOL,
    "idempotency_window_ms": U64,
    "dedupe_node": BOOL,
    "lease_ms": U64,
    "claim_jitter_ms": U64,
    "max_deliveries": U64,
    "dead_letter": nullable(TOPIC_NAME),
    "leases_durable": BOOL,
}
_ROUTER_PROPS: dict[str, Schema] = {
    "router": ROUTER_NAME,
    "source": TOPIC_NAME,
    "dest": TOPIC_NAME,
    "preserve_node": BOOL,
    "preserve_tag": BOOL,
    "filter": nullable(ref("Predicate")),
    "allow_cycle": BOOL,
    "guarantee": {"enum": ["at_least_once", "exactly_once"]},
}
_QUEUE_COUNTS: dict[str, Schema] = {"ready": U64, "in_flight": U64}
_JOB_FENCE: dict[str, Schema] = {
    "node": {"type": "string", "minLength": 1},
    "seqs": arr(U64, 1000),
    "lease_ids": arr({"type": "string", "pattern": "^(|lease_[0-9a-f]+)$"}, 1000),
}
_CURSOR_PROPS: dict[str, Schema] = {"from_seq": U64, "head_seq": U64, "earliest_seq": U64}

SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "additionalProperties": False,
                "properties": {
                    "code": {"type": "string", "enum": [c.value for c in ErrorCode]},
                    "message": {"type": "string", "minLength": 1},
                    "detail": {"type": "object"},
                },
            }
        },
    },
    "Performance": obj(
        {
            "server_total_ms": MS,
            "wal_append_ms": MS,
            "fsync_ms": MS,
            "records_scanned": U64,
            "throttle_wait_ms": MS,
            "cold_segments_read": U64,
        },
        ("server_total_ms",),
    ),
    "TopicConfigRequest": obj(_CONFIG_PROPS),
    "TopicConfig": obj(_CONFIG_PROPS, tuple(_CONFIG_PROPS)),
    "Predicate": {
        "oneOf": [
            STR,
            {
                "type": "array",
                "prefixItems": [{"const": "tag"}, {"enum": ["Eq", "Glob"]}, STR],
                "minItems": 3,
                "maxItems": 3,
            },
        ]
    },
    "RecordIn": obj(
        {
            "data": ANY,
            "tag": {"type": "string", "maxLength": 256},
            "node": {"type": "string", "maxLength": 128},
            "meta": ANY,
        },
        ("data",),
    ),
    "Record": obj(
        {"$seq": U64, "$ts": I64, "$node": STR, "$tag": STR, "data": ANY, "meta": ANY},
        ("$seq", "$ts"),
    ),
    "Tombstone": obj(
        {
            "gap_from": U64,
            "gap_to": U64,
            "reason": {"enum": ["cap", "ttl", "mixed", "recreated", "source_trim"]},
            "missed_estimate": U64,
            "earliest_seq": U64,
            "head_seq": U64,
        },
        ("gap_from", "gap_to", "reason", "missed_estimate", "earliest_seq", "head_seq"),
    ),
    "WriteRequest": obj(
        {
            "records": arr(ref("RecordIn"), 10000),
            "node": {"type": "string", "maxLength": 128},
            "idempotency_key": {"type": "string", "maxLength": 256},
            "create": BOOL,
            "config": ref("TopicConfigRequest"),
            "disable_backpressure": BOOL,
        },
        ("records",),
    ),
    "WriteResponse": with_perf(
        {
            "topic": STR,
            "first_seq": U64,
            "last_seq": U64,
            "seqs": arr(U64),
            "head_seq": U64,
            "count": U64,
            "created": BOOL,
            "deduped": BOOL,
        },
        ("topic", "first_seq", "last_seq", "head_seq", "count", "created", "deduped"),
    ),
    "NdjsonWriteResponse": with_perf(
        {
            "topic": STR,
            "count": U64,
            "head_seq": U64,
            "chunks": arr(
                obj(
                    {"first_seq": U64, "last_seq": U64, "count": U64},
                    ("first_seq", "last_seq", "count"),
                )
            ),
        },
        ("topic", "count", "head_seq", "chunks"),
    ),
    "DiffRequest": obj(
        {
            "from_seq": U64,
            "limit": U32,
            "node": NODES,
            "include_tags": BOOL,
            "include_meta": BOOL,
            "wait_ms": U32,
            "max_batch_bytes": U64,
        }
    ),
    "DiffResponse": with_perf(
        {
            "topic": STR,
            "records": arr(ref("Record")),
            "next_from_seq": U64,
            "head_seq": U64,
            "earliest_seq": U64,
            "caught_up": BOOL,
            "tombstone": nullable(ref("Tombstone")),
            "lag": U64,
        },
        (
            "topic",
            "records",
            "next_from_seq",
            "head_seq",
            "earliest_seq",
            "caught_up",
            "tombstone",
            "lag",
        ),
    ),
    "DeleteRequest": obj({"before_seq": U64, "match": ref("Predicate")}),
    "DeleteResponse": with_perf(
        {
            "topic": STR,
            "deleted": U64,
            "earliest_seq": U64,
            "head_seq": U64,
            "count": U64,
            "bytes": U64,
        },
        ("topic", "deleted", "earliest_seq", "head_seq", "count", "bytes"),
    ),
    "PutTopicResponse": with_perf(
        {"topic": STR, "created": BOOL, "config": ref("TopicConfig")},
        ("topic", "created", "config"),
    ),
    "TopicState": with_perf(
        {
            "topic": STR,
            "type": {"enum": ["log", "queue"]},
            "head_seq": U64,
            "earliest_seq": U64,
            "next_seq": U64,
            "count": U64,
            "bytes": U64,
            "config": ref("TopicConfig"),
            "effective_priority": I64,
            "last_write_ts": nullable(I64),
            "last_read_ts": nullable(I64),
            "queue": obj({**_QUEUE_COUNTS, "dead_lettered": U64}),
        },
        (
            "topic",
            "type",
            "head_seq",
            "earliest_seq",
            "next_seq",
            "count",
            "bytes",
            "config",
            "effective_priority",
            "last_write_ts",
            "last_read_ts",
        ),
    ),
    "TopicList": with_perf(
        {
            "topics": arr(
                obj(
                    {
                        "topic": STR,
                        "head_seq": U64,
                        "earliest_seq": U64,
                        "count": U64,
                        "bytes": U64,
                        "durable": BOOL,
                        "effective_priority": I64,
                    }
                )
            ),
            "next_cursor": STR,
        },
        ("topics",),
    ),
    "DropTopicResponse": with_perf(
        {"topic": STR, "deleted": BOOL, "routers_removed": arr(STR)},
        ("topic", "deleted", "routers_removed"),
    ),
    "RouterRequest": obj(
        {k: v for k, v in _ROUTER_PROPS.items() if k != "router"} | {"create_dest": BOOL},
        ("source", "dest"),
    ),
    "RouterResponse": with_perf({**_ROUTER_PROPS, "created": BOOL}, ("router", "created")),
    "RouterState": with_perf({**_ROUTER_PROPS, "forwarded_total": U64}, ("router",)),
    "RouterList": with_perf(
        {
            "routers": arr(
                obj(
                    {
                        "router": STR,
                        "source": STR,
                        "dest": STR,
                        "guarantee": STR,
                        "forwarded_total": U64,
                    }
                )
            ),
            "next_cursor": STR,
        },
        ("routers",),
    ),
    "DropRouterResponse": with_perf({"router": STR, "deleted": BOOL}, ("router", "deleted")),
    "WatchRequest": obj(
        {
            "node": NODES,
            "topics": {
                "type": "object",
                "minProperties": 1,
                "maxProperties": 256,
                "additionalProperties": obj({"from_seq": U64, "tail": BOOL}),
            },
            "limit": U32,
            "max_batch_bytes": U64,
            "heartbeat_ms": U64,
            "include_meta": BOOL,
            "include_tags": BOOL,
            "include_data": BOOL,
            "consistency": {"enum": ["eventual", "strong"]},
        },
        ("topics",),
    ),
    "WatchResponse": with_perf(
        {
            "wid": STR,
            "stream_url": STR,
            "session_ttl_ms": U64,
            "topics": {"type": "object", "additionalProperties": obj(_CURSOR_PROPS)},
        },
        ("wid", "stream_url", "session_ttl_ms", "topics"),
    ),
    "ClaimRequest": obj(
        {"node": {"type": "string", "minLength": 1}, "max": U32, "lease_ms": U64}, ("node",)
    ),
    "ClaimResponse": with_perf(
        {
            "topic": STR,
            "claimed": arr(
                obj(
                    {
                        "$seq": U64,
                        "lease_id": STR,
                        "deadline": I64,
                        "$ts": I64,
                        "$tag": STR,
                        "deliveries": U64,
                        "data": ANY,
                        "meta": ANY,
                    },
                    ("$seq", "lease_id", "deadline", "$ts", "deliveries", "data"),
                )
            ),
            "count": U64,
            "ready": U64,
        },
        ("topic", "claimed", "count", "ready"),
    ),
    "AckRequest": obj(_JOB_FENCE, ("node", "seqs")),
    "AckResponse": with_perf(
        {"topic": STR, "acked": U64, "skipped": arr(U64), **_QUEUE_COUNTS},
        ("topic", "acked", "skipped", "ready", "in_flight"),
    ),
    "NackRequest": obj({**_JOB_FENCE, "delay_ms": U64}, ("node", "seqs")),
    "NackResponse": with_perf(
        {"topic": STR, "nacked": U64, "skipped": arr(U64), **_QUEUE_COUNTS},
        ("topic", "nacked", "skipped", "ready", "in_flight"),
    ),
    "ExtendRequest": obj({**_JOB_FENCE, "lease_ms": U64}, ("node", "seqs", "lease_ms")),
    "ExtendResponse": with_perf(
        {
            "topic": STR,
            "extended": U64,
            "skipped": arr(U64),
            "deadlines": {"type": "object", "additionalProperties": I64},
        },
        ("topic", "extended", "skipped", "deadlines"),
    ),
    "Health": obj(
        {"status": {"const": "ok"}, "version": STR, "uptime_ms": U64},
        ("status", "version", "uptime_ms"),
    ),
    "Ready": obj(
        {"status": {"const": "ready"}, "wal_replay_complete": BOOL, "topics": U64},
        ("status", "wal_replay_complete", "topics"),
    ),
    "MetricsJson": obj(
        {
            **{
                k: U64
                for k in (
                    "topics",
                    "topics_ephemeral",
                    "topics_memory",
                    "topics_disk",
                    "topics_fsync",
                    "routers",
                    "records_live",
                    "bytes_live",
                    "queue_topics",
                    "queue_leases_in_flight",
                    "sse_connections",
                    "watch_sessions",
                    "uptime_ms",
                )
            },
            "ready": BOOL,
            "replay_progress": {"type": "number", "minimum": 0, "maximum": 1},
            "wal": obj(
                {
                    k: U64
                    for k in (
                        "fsyncs",
                        "frames",
                        "batches",
                        "bytes_written",
                        "rotations",
                        "queue_depth",
                        "queue_depth_peak",
                        "submit_full_total",
                        "read_only",
                        "fsync_count",
                        "fsync_micros_total",
                    )
                }
            ),
        }
    ),
}
