"""Record routes: diff (read from a cursor, with long-poll) and permanent delete."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import orjson
from starlette.requests import Request
from starlette.responses import Response

from seglog.http.app_state import server_state
from seglog.http.arrow_diff import ARROW_STREAM, encode_arrow_diff, wants_arrow
from seglog.http.auth import Scope
from seglog.http.common import (
    elapsed_ms,
    header,
    json_body,
    json_response,
    read_body,
    require,
    started,
)
from seglog.http.delete_request import parse_delete
from seglog.http.diff_request import parse_diff
from seglog.http.responses import (
    encode_delete_result,
    encode_read_result,
    read_result_fields,
)
from seglog.http.topics import method_not_allowed
from seglog.model import ReadResult


async def diff(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    t0 = started()
    name = request.path_params["topic"]
    require(request, (Scope.READ,), name)
    st = server_state(request)
    raw = await read_body(request, st.settings.max_body_bytes)
    arrow = wants_arrow(header(request, b"accept"))  # API §13.1
    req = parse_diff(json_body(request, raw, empty_ok=True), arrow)
    db = st.db
    nodes = frozenset(req.nodes)
    # Both answers are built from a columnar read: no `Record` object per row.
    res = await db.read(name, req.from_seq, req.limit, nodes, req.max_batch_bytes, True, arrow)
    if (
        req.wait_ms > 0
        and _empty(res)
        and res.tombstone is None
        and res.caught_up
        and st.waiters is not None
        and not st.shutting_down
    ):
        if db.head_of(name) == res.head_seq:
            woken = await _wait_unless_disconnected(
                request, st.waiters.wait([name], req.wait_ms / 1000.0)
            )
            if woken is None:
                return Response(status_code=499)  # the client is gone; nobody reads this
        res = await db.read(name, req.from_seq, req.limit, nodes, req.max_batch_bytes, True, arrow)
    if arrow:
        scalars = orjson.dumps(read_result_fields(res, elapsed_ms(t0)))
        body = encode_arrow_diff(res, req.include_tags, req.include_meta, scalars)
        return Response(body, media_type=ARROW_STREAM)
    body = encode_read_result(res, req.include_tags, req.include_meta, elapsed_ms(t0))
    return json_response(body)


def _empty(res: ReadResult) -> bool:
    return not (len(res.columns) if res.columns is not None else res.records)


async def _wait_unless_disconnected(request: Request, waiting: Awaitable[bool]) -> bool | None:
    """Await `waiting`, or return None as soon as the client disconnects (so its
    in-flight slot is released at once, API §11)."""
    wait_task = asyncio.ensure_future(waiting)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    gone = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({wait_task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (wait_task, gone):
            task.cancel()
    return None if gone in done and wait_task not in done else wait_task.result()


async def delete(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    t0 = started()
    name = request.path_params["topic"]
    require(request, (Scope.DELETE,), name)
    st = server_state(request)
    raw = await read_body(request, st.settings.max_body_bytes)
    req = parse_delete(json_body(request, raw))
    res = await st.db.delete_records(name, req.before_seq, req.match)
    return json_response(encode_delete_result(res, elapsed_ms(t0)))
