"""The hand-kept OpenAPI 3.1 document of the `/v0` API, served at `/v0/openapi.json`.

It mirrors `API.md` (which stays normative): every path of the endpoint index (§12) with
its methods, request bodies, query parameters and the canonical error envelope (§0.5).
Built once at import from small schema helpers; `OPENAPI` is the resulting constant.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import orjson

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

ERROR_STATUSES: dict[str, str] = {
    "400": "invalid_request, batch_too_large or record_too_large",
    "401": "unauthorized",
    "403": "forbidden",
    "404": "topic_not_found, router_not_found or not_found",
    "405": "method_not_allowed",
    "406": "not_acceptable",
    "409": "router_cycle, topic_exists_incompatible, topic_not_empty or not_a_queue",
    "413": "payload_too_large",
    "415": "unsupported_media_type",
    "422": "topic_full",
    "429": "throttled (with Retry-After: 1)",
    "500": "internal",
    "503": "not_ready (Retry-After: 1, detail.replay_progress) or shutting_down",
}


def _error_response(description: str) -> Schema:
    return {
        "description": description,
        "content": {"application/json": {"schema": ref("Error")}},
    }


def _q(name: str, schema: Schema, description: str, required: bool = False) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": schema,
        "description": description,
    }


def _path_param(name: str) -> Schema:
    schema = ROUTER_NAME if name == "router" else STR
    return {"name": name, "in": "path", "required": True, "schema": schema}


def op(
    summary: str,
    ok: dict[str, tuple[str, Schema]],
    errors: tuple[str, ...],
    body: str | None = None,
    query: tuple[Schema, ...] = (),
    body_required: bool = True,
) -> Schema:
    """One operation: `ok` maps status → (description, schema); errors reference the
    shared error responses; every operation may also answer 401/500/503."""
    responses: Schema = {
        code: {"description": desc, "content": {"application/json": {"schema": schema}}}
        for code, (desc, schema) in ok.items()
    }
    for code in sorted({*errors, "401", "500", "503"}):
        responses[code] = {"$ref": f"#/components/responses/E{code}"}
    out: Schema = {"summary": summary, "responses": responses}
    if query:
        out["parameters"] = list(query)
    if body is not None:
        out["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": ref(body)}},
        }
    return out


def _sse(summary: str, errors: tuple[str, ...], query: tuple[Schema, ...]) -> Schema:
    o = op(summary, {}, errors, query=query)
    o["responses"]["200"] = {
        "description": "event stream",
        "content": {"text/event-stream": {"schema": STR}},
    }
    return o


def _with_arrow(o: Schema) -> Schema:
    """The columnar form of diff (API §13.1): an Arrow IPC stream when asked for."""
    o["responses"]["200"]["content"]["application/vnd.apache.arrow.stream"] = {
        "schema": {
            "type": "string",
            "format": "binary",
            "description": "Arrow IPC stream: columns seq int64, ts int64, node utf8?, "
            "tag utf8? (include_tags), data utf8 (stored JSON text), meta utf8? "
            "(include_meta); the JSON response's other fields as JSON under the schema "
            "metadata key `seglog`",
        }
    }
    return o


def _header(name: str, description: str) -> Schema:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "schema": STR,
        "description": description,
    }


_TOKEN = _q("token", STR, "API key (accepted only on the two SSE GETs)")
_PAGE = (
    _q(
        "page_size",
        {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
        "page size; non-numeric means the default",
    ),
    _q("cursor", STR, "opaque cursor from next_cursor; empty = first page"),
)
_BODY_ERRORS = ("400", "403", "413", "415")


def _with_param(name: str, ops: Schema) -> Schema:
    return {"parameters": [_path_param(name)], **ops}


PATHS: dict[str, Schema] = {
    "/v0/topics": {
        "get": op(
            "List topics",
            {"200": ("a page of topics", ref("TopicList"))},
            ("400", "403"),
            query=(
                _q("prefix", STR, "name prefix filter"),
                *_PAGE,
                _q("touch", BOOL, "bump each listed topic's recency clock (default false)"),
            ),
        )
    },
    "/v0/topics/{topic}": _with_param(
        "topic",
        {
            "put": op(
                "Create or reconfigure a topic (empty body = {})",
                {
                    "201": ("created", ref("PutTopicResponse")),
                    "200": ("existed", ref("PutTopicResponse")),
                },
                (*_BODY_ERRORS, "409", "429"),
                body="TopicConfigRequest",
                body_required=False,
            ),
            "get": op(
                "Topic state",
                {"200": ("state", ref("TopicState"))},
                ("403", "404"),
                query=(_q("touch", BOOL, "update last_read_ts (default true)"),),
            ),
            "delete": op(
                "Delete a topic and its routers",
                {"200": ("deleted or absent", ref("DropTopicResponse"))},
                ("403", "409", "429"),
                query=(_q("if_empty", BOOL, "refuse (409) when the topic holds records"),),
            ),
            "post": op(
                "Append records",
                {
                    "201": ("appended; the topic was created", ref("WriteResponse")),
                    "200": ("appended", ref("WriteResponse")),
                },
                (*_BODY_ERRORS, "404", "422", "429"),
                body="WriteRequest",
                query=(
                    _q("return_seqs", BOOL, "include seqs (default true)"),
                    _header("Idempotency-Key", "used when the body has no idempotency_key"),
                ),
            ),
        },
    ),
    "/v0/topics/{topic}/diff": _with_param(
        "topic",
        {
            "post": _with_arrow(
                op(
                    "Read from a cursor (empty body = {}); columnar with Accept: "
                    "application/vnd.apache.arrow.stream",
                    {"200": ("records", ref("DiffResponse"))},
                    (*_BODY_ERRORS, "404"),
                    body="DiffRequest",
                    body_required=False,
                )
            )
        },
    ),
    "/v0/topics/{topic}/delete": _with_param(
        "topic",
        {
            "post": op(
                "Permanently delete records by seq and/or tag",
                {"200": ("deleted", ref("DeleteResponse"))},
                (*_BODY_ERRORS, "404", "429"),
                body="DeleteRequest",
            )
        },
    ),
    "/v0/topics/{topic}/claim": _with_param(
        "topic",
        {
            "post": op(
                "Lease jobs from a queue",
                {"200": ("claimed jobs", ref("ClaimResponse"))},
                (*_BODY_ERRORS, "404", "409"),
                body="ClaimRequest",
            )
        },
    ),
    "/v0/topics/{topic}/ack": _with_param(
        "topic",
        {
            "post": op(
                "Complete (delete) jobs",
                {"200": ("acked", ref("AckResponse"))},
                (*_BODY_ERRORS, "404", "409", "429"),
                body="AckRequest",
            )
        },
    ),
    "/v0/topics/{topic}/nack": _with_param(
        "topic",
        {
            "post": op(
                "Release jobs",
                {"200": ("nacked", ref("NackResponse"))},
                (*_BODY_ERRORS, "404", "409", "429"),
                body="NackRequest",
            )
        },
    ),
    "/v0/topics/{topic}/extend": _with_param(
        "topic",
        {
            "post": op(
                "Extend leases",
                {"200": ("extended", ref("ExtendResponse"))},
                (*_BODY_ERRORS, "404", "409", "429"),
                body="ExtendRequest",
            )
        },
    ),
    "/v0/topics/{topic}/work": _with_param(
        "topic",
        {
            "get": _sse(
                "SSE job push stream",
                ("400", "403", "404", "406", "409", "429"),
                (
                    _q(
                        "node",
                        {"type": "string", "minLength": 1, "maxLength": 128},
                        "worker node",
                        required=True,
                    ),
                    _q(
                        "max",
                        {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
                        "leases held by this connection",
                    ),
                    _q("lease_ms", U64, "lease duration"),
                    _TOKEN,
                ),
            )
        },
    ),
    "/v0/routers": {
        "get": op(
            "List routers",
            {"200": ("a page of routers", ref("RouterList"))},
            ("400", "403"),
            query=(
                _q("prefix", STR, "router-name prefix"),
                _q("source", STR, "exact source topic"),
                _q("dest", STR, "exact dest topic"),
                *_PAGE,
            ),
        )
    },
    "/v0/routers/{router}": _with_param(
        "router",
        {
            "put": op(
                "Create or configure a router",
                {
                    "201": ("created", ref("RouterResponse")),
                    "200": ("existed", ref("RouterResponse")),
                },
                (*_BODY_ERRORS, "404", "409", "429"),
                body="RouterRequest",
            ),
            "get": op(
                "Router state",
                {"200": ("state", ref("RouterState"))},
                ("403", "404"),
            ),
            "delete": op(
                "Delete a router",
                {"200": ("deleted or absent", ref("DropRouterResponse"))},
                ("403",),
            ),
        },
    ),
    "/v0/watch": {
        "post": op(
            "Create a multiplexed watch session",
            {"200": ("session", ref("WatchResponse"))},
            (*_BODY_ERRORS, "404", "429"),
            body="WatchRequest",
            query=(_q("lenient", BOOL, "drop unknown topics instead of 404"),),
        )
    },
    "/v0/watch/{wid}": _with_param(
        "wid",
        {
            "get": _sse(
                "SSE watch stream (session-bound; Last-Event-ID may rewind)",
                ("404", "406", "429"),
                (_TOKEN, _header("Last-Event-ID", "composite cursor; can only rewind")),
            )
        },
    ),
    "/v0/ws": {
        "get": {
            "summary": "WebSocket data plane (subscribe, unsubscribe, publish, ping)",
            "responses": {
                "101": {"description": "switching protocols"},
                "401": {"$ref": "#/components/responses/E401"},
                "429": {"$ref": "#/components/responses/E429"},
            },
        }
    },
    "/v0/health": {"get": op("Liveness", {"200": ("alive", ref("Health"))}, ())},
    "/healthz": {"get": op("Liveness (probe alias)", {"200": ("alive", ref("Health"))}, ())},
    "/v0/ready": {"get": op("Readiness", {"200": ("ready", ref("Ready"))}, ())},
    "/readyz": {"get": op("Readiness (probe alias)", {"200": ("ready", ref("Ready"))}, ())},
    "/v0/metrics": {
        "get": {
            "summary": "Prometheus text, or a JSON snapshot when Accept has application/json",
            "responses": {
                "200": {
                    "description": "metrics",
                    "content": {
                        "text/plain; version=0.0.4": {"schema": STR},
                        "application/json": {"schema": ref("MetricsJson")},
                    },
                },
                "401": {"$ref": "#/components/responses/E401"},
                "403": {"$ref": "#/components/responses/E403"},
            },
        }
    },
    "/console": {
        "get": {
            "summary": "The web console (static page; it asks for a key and calls /v0 with it)",
            "security": [{}],
            "responses": {
                "200": {"description": "the page", "content": {"text/html": {"schema": STR}}}
            },
        }
    },
    "/console/{name}": {
        "get": {
            "summary": "A web console asset (app.js, style.css)",
            "security": [{}],
            "parameters": [_path_param("name")],
            "responses": {
                "200": {
                    "description": "the asset",
                    "content": {"text/javascript": {"schema": STR}, "text/css": {"schema": STR}},
                },
                "404": {"$ref": "#/components/responses/E404"},
            },
        }
    },
    "/v0/openapi.json": {
        "get": {
            "summary": "This document",
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    },
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "seglog",
        "version": "0.1.0",
        "description": "Persistent event log: the /v0 JSON HTTP API. API.md is normative.",
    },
    "servers": [{"url": "http://127.0.0.1:4000"}],
    "security": [{"bearer": []}, {}],
    "paths": PATHS,
    "components": {
        "schemas": SCHEMAS,
        "responses": {f"E{code}": _error_response(d) for code, d in ERROR_STATUSES.items()},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    },
}


@cache
def openapi_bytes() -> bytes:
    return orjson.dumps(OPENAPI)
