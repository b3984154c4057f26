"""The operations of the OpenAPI document, keyed by the route path they describe.

`openapi.build_document` pairs these with the mounted route table: a route without an entry
here, or an entry without a route, is an error at import, so the document cannot list a
path the server does not serve (nor miss one it does).
"""

from __future__ import annotations

from seglog.http.openapi_schemas import BOOL, ROUTER_NAME, STR, U64, Schema, ref

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


def error_response_schema(description: str) -> Schema:
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


def _with_ndjson(o: Schema) -> Schema:
    """The streaming form of append (API §13.2): NDJSON in, committed chunk by chunk."""
    o["requestBody"]["content"]["application/x-ndjson"] = {
        "schema": {
            "type": "string",
            "description": "one WriteRequest record object per line (blank lines skipped; "
            "at most 1 MiB per line, no body cap); batch fields come from the query "
            "(node, create); committed in chunks of at most 10000 records, each atomic; an "
            "invalid line stops the request with detail.line and "
            "detail.committed_through_seq",
        }
    }
    for code in ("200", "201"):
        content = o["responses"][code]["content"]["application/json"]
        content["schema"] = {"oneOf": [content["schema"], ref("NdjsonWriteResponse")]}
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


OPERATIONS: dict[str, Schema] = {
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
            "post": _with_ndjson(
                op(
                    "Append records (streamed with Content-Type: application/x-ndjson)",
                    {
                        "201": ("appended; the topic was created", ref("WriteResponse")),
                        "200": ("appended", ref("WriteResponse")),
                    },
                    (*_BODY_ERRORS, "404", "422", "429"),
                    body="WriteRequest",
                    query=(
                        _q("return_seqs", BOOL, "include seqs (default true; JSON only)"),
                        _q("node", STR, "NDJSON only: the default node of the records"),
                        _q("create", BOOL, "NDJSON only: create the topic if absent"),
                        _header(
                            "Idempotency-Key",
                            "used when the body has no idempotency_key (JSON only; refused "
                            "with NDJSON)",
                        ),
                    ),
                )
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
                "400": {"$ref": "#/components/responses/E400"},  # a GET without the upgrade
                "401": {"$ref": "#/components/responses/E401"},
                "429": {"$ref": "#/components/responses/E429"},
                "500": {"$ref": "#/components/responses/E500"},
                "503": {"$ref": "#/components/responses/E503"},
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
