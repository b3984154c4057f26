"""Router routes (API §6): PUT (create/configure), GET (state), DELETE, list.

Scopes and allowlists (API §1.3): PUT needs admin and `:router`, the body's `source` and
`dest` allowed; GET needs read, DELETE needs delete, each on `:router` and then on the
router's own source and dest; any other method needs admin on `:router`, then `405`. A list
shows a router only when its name, source and dest are all allowed for the key.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from seglog.errors import ErrorCode, SeglogError
from seglog.http.app_state import server_state
from seglog.http.auth import Principal, Scope
from seglog.http.common import (
    elapsed_ms,
    json_body,
    json_response,
    read_body,
    require,
    started,
)
from seglog.http.cursors import decode_cursor, encode_cursor
from seglog.http.query_params import parse_page_size
from seglog.http.router_request import parse_router
from seglog.http.wire_types import (
    DropRouterResponse,
    Performance,
    RouterList,
    RouterResponse,
    RouterRow,
    RouterState,
)
from seglog.router_model import RouterInfo, RouterSpec


def _perf(t0: float) -> Performance:
    return {"server_total_ms": elapsed_ms(t0)}


def _require_router(request: Request, scope: Scope) -> tuple[Principal, str]:
    """`scope`, then `:router` inside the key's allowlist (`detail.router`)."""
    p = require(request, (scope,))
    name: str = request.path_params["router"]
    if not p.allows(name):
        raise SeglogError(
            ErrorCode.FORBIDDEN, f"api key may not access router {name!r}", {"router": name}
        )
    return p, name


def _require_topics(p: Principal, spec: RouterSpec) -> None:
    for topic in (spec.source, spec.dest):
        if not p.allows(topic):
            raise SeglogError(
                ErrorCode.FORBIDDEN, f"api key may not access {topic!r}", {"topic": topic}
            )


async def router_root(request: Request) -> Response:
    method = request.method
    if method in ("GET", "HEAD"):
        return await get_router(request)
    if method == "PUT":
        return await put_router(request)
    if method == "DELETE":
        return await delete_router(request)
    _require_router(request, Scope.ADMIN)
    raise SeglogError(ErrorCode.METHOD_NOT_ALLOWED, f"{method} is not allowed here")


async def put_router(request: Request) -> Response:
    t0 = started()
    p, name = _require_router(request, Scope.ADMIN)
    st = server_state(request)
    raw = await read_body(request, st.settings.max_body_bytes)
    spec = parse_router(name, json_body(request, raw))
    _require_topics(p, spec)
    res = await st.db.put_router(spec)
    fields = res.spec.wire_fields()
    body: RouterResponse = {
        "router": name,
        "created": res.created,
        "source": fields["source"],
        "dest": fields["dest"],
        "preserve_node": fields["preserve_node"],
        "preserve_tag": fields["preserve_tag"],
        "filter": fields["filter"],
        "allow_cycle": fields["allow_cycle"],
        "guarantee": fields["guarantee"],
        "performance": _perf(t0),
    }
    return json_response(orjson.dumps(body), 201 if res.created else 200)


async def get_router(request: Request) -> Response:
    t0 = started()
    p, name = _require_router(request, Scope.READ)
    db = server_state(request).db
    _require_topics(p, db.router_spec(name))
    info = await db.get_router(name)
    body: RouterState = {
        **info.spec.wire_fields(),
        "forwarded_total": info.forwarded_total,
        "performance": _perf(t0),
    }
    return json_response(orjson.dumps(body))


async def delete_router(request: Request) -> Response:
    t0 = started()
    p, name = _require_router(request, Scope.DELETE)
    db = server_state(request).db
    spec = db.find_router(name)
    if spec is not None:
        _require_topics(p, spec)
    res = await db.delete_router(name)
    body: DropRouterResponse = {
        "router": res.router,
        "deleted": res.deleted,
        "performance": _perf(t0),
    }
    return json_response(orjson.dumps(body))


def _row(info: RouterInfo) -> RouterRow:
    s = info.spec
    return {
        "router": s.name,
        "source": s.source,
        "dest": s.dest,
        "guarantee": s.guarantee.value,
        "forwarded_total": info.forwarded_total,
    }


async def list_routers(request: Request) -> Response:
    t0 = started()
    p = require(request, (Scope.READ,))
    q = request.query_params
    prefix = q.get("prefix") or ""
    source = q.get("source") or None
    dest = q.get("dest") or None
    page_size = parse_page_size(q.get("page_size"))
    after = decode_cursor(q.get("cursor"))
    db = server_state(request).db
    rows: list[RouterRow] = []
    more = True
    last = after
    while len(rows) < page_size and more:
        page, more = db.list_routers(prefix, source, dest, last, page_size - len(rows))
        if not page:
            break
        last = page[-1].spec.name
        rows += [
            _row(i)
            for i in page
            if p.allows(i.spec.name) and p.allows(i.spec.source) and p.allows(i.spec.dest)
        ]
    body: RouterList
    if more and last is not None:
        body = {"routers": rows, "next_cursor": encode_cursor(last), "performance": _perf(t0)}
    else:
        body = {"routers": rows, "performance": _perf(t0)}
    return json_response(orjson.dumps(body))
