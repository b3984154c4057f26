"""Topic routes: PUT (create/configure), GET (state), DELETE, POST (append), list."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from seglog.core.names import valid_topic_name
from seglog.errors import ErrorCode, SeglogError, invalid
from seglog.http.app_state import server_state
from seglog.http.auth import Scope
from seglog.http.common import (
    elapsed_ms,
    header,
    json_body,
    json_response,
    query_value,
    raw_header,
    read_body,
    require,
    started,
)
from seglog.http.cursors import decode_cursor, encode_cursor
from seglog.http.json_body import is_json_content_type
from seglog.http.ndjson_append import append_ndjson, is_ndjson
from seglog.http.query_params import parse_bool_query, parse_page_size
from seglog.http.responses import (
    encode_drop_topic,
    encode_put_topic,
    encode_topic_info,
    encode_write_result,
    topic_summary,
)
from seglog.http.topic_config import parse_config
from seglog.http.wire_types import Performance, TopicList, TopicSummary
from seglog.http.write_decode import decode_write_fast
from seglog.http.write_request import WriteRequest, check_idempotency_key, parse_write


async def topic_root(request: Request) -> Response:
    method = request.method
    if method in ("GET", "HEAD"):
        return await get_topic(request)
    if method == "PUT":
        return await put_topic(request)
    if method == "DELETE":
        return await delete_topic(request)
    if method == "POST":
        return await append(request)
    return method_not_allowed(request)


def method_not_allowed(request: Request) -> Response:
    """API §1.3: any other method under a topic needs write scope on it; then 405."""
    require(request, (Scope.WRITE,), request.path_params["topic"])
    raise SeglogError(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here")


async def other_subpath(request: Request) -> Response:
    """An unknown sub-path under a topic: write scope on the topic, then 404."""
    require(request, (Scope.WRITE,), request.path_params["topic"])
    raise SeglogError(ErrorCode.NOT_FOUND, "no such route")


async def get_topic(request: Request) -> Response:
    t0 = started()
    name = request.path_params["topic"]
    require(request, (Scope.READ,), name)
    touch = parse_bool_query(query_value(request, "touch"), True)
    info = await server_state(request).db.get_topic(name, touch)
    return json_response(encode_topic_info(info, elapsed_ms(t0)))


async def put_topic(request: Request) -> Response:
    t0 = started()
    name = request.path_params["topic"]
    require(request, (Scope.ADMIN,), name)
    st = server_state(request)
    raw = await read_body(request, st.settings.max_body_bytes)
    if not valid_topic_name(name):
        raise invalid(f"invalid topic name {name!r}", {"topic": name})
    config = parse_config(json_body(request, raw, empty_ok=True))
    res = await st.db.put_topic(name, config)
    return json_response(encode_put_topic(res, elapsed_ms(t0)), 201 if res.created else 200)


async def delete_topic(request: Request) -> Response:
    t0 = started()
    name = request.path_params["topic"]
    require(request, (Scope.DELETE,), name)
    if_empty = parse_bool_query(query_value(request, "if_empty"), False)
    res = await server_state(request).db.drop_topic(name, if_empty)
    return json_response(encode_drop_topic(res, elapsed_ms(t0)))


def _write_request(request: Request, raw: bytes, content_type: str | None) -> WriteRequest:
    if is_json_content_type(content_type):
        fast = decode_write_fast(raw)
        if fast is not None:
            return fast
    return parse_write(json_body(request, raw))


async def append(request: Request) -> Response:
    t0 = started()
    name = request.path_params["topic"]
    p = require(request, (Scope.WRITE,), name)
    st = server_state(request)
    content_type = header(request, b"content-type")
    if is_ndjson(content_type):  # API §13.2
        return await append_ndjson(request, name, st)
    raw = await read_body(request, st.settings.max_body_bytes)
    req = _write_request(request, raw, content_type)
    st.check_write_pressure()
    key = req.idempotency_key
    if key is None:
        key = check_idempotency_key(raw_header(request, b"idempotency-key"))
    config = None
    if req.config is not None:
        config = parse_config(req.config)
        creates = req.create if req.create is not None else config.auto_create
        # API §1.3: only a write that would create the topic needs admin for its config
        # (one that would not is a plain write: 404 if the topic is missing).
        if creates and not p.has(Scope.ADMIN) and not st.db.exists(name):
            raise SeglogError(
                ErrorCode.FORBIDDEN,
                "creating a topic with a config needs the admin scope",
                {"topic": name},
            )
    res = await st.db.write(
        name, req.records, node=req.node, idempotency_key=key, create=req.create, config=config
    )
    return_seqs = parse_bool_query(query_value(request, "return_seqs"), True)
    body = encode_write_result(res, return_seqs, elapsed_ms(t0))
    return json_response(body, 201 if res.created else 200)


async def list_topics(request: Request) -> Response:
    t0 = started()
    p = require(request, (Scope.READ,))
    q = request.query_params
    prefix = q.get("prefix") or ""
    page_size = parse_page_size(q.get("page_size"))
    after = decode_cursor(q.get("cursor"))
    touch = parse_bool_query(q.get("touch"), False)
    db = server_state(request).db
    rows: list[TopicSummary] = []
    more = True
    last: str | None = after
    while len(rows) < page_size and more:
        # API §1.3: a key limited to prefixes sees (and touches) only names it may read
        within = p.prefixes or None
        page, more = await db.list_topics(prefix, last, page_size - len(rows), touch, within)
        if not page:
            break
        last = page[-1].topic
        rows.extend(topic_summary(info) for info in page)
    body: TopicList
    perf: Performance = {"server_total_ms": elapsed_ms(t0)}
    if more and last is not None:
        body = {"topics": rows, "next_cursor": encode_cursor(last), "performance": perf}
    else:
        body = {"topics": rows, "performance": perf}
    return json_response(orjson.dumps(body))
