"""The route table: every path the server mounts, in matching order.

One table serves three readers: `app.build_app` mounts it, `openapi.build_document`
documents it (the `/v0/openapi.json` endpoint is passed in, since the document describes
the table that serves it), and `direct_endpoint` matches its data-plane part
(`TOPIC_DATA_PLANE`) for the guard, which dispatches those requests itself. Routes whose
methods are `ANY_METHOD` dispatch on the method in their handler, which answers any other
method `405` after the scope check; those whose other methods API §1.3 scopes ("any other
method ... under /v0/topics/:topic": write; "other methods on /v0/routers/:r": admin) take
every method (`any_method`), so the scope check always comes first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from seglog.http import console, health, queues, records, routers, topics, watch, work_stream, ws

ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]

Endpoint = Callable[[Request], Awaitable[Response]]

# The routes under one topic whose handler answers with a complete response (no stream):
# `/v0/topics/{topic}` itself ("") and its fixed sub-paths. `app.Guard` dispatches these
# straight to their handler, in front of Starlette's router (see `direct_endpoint`).
TOPIC_DATA_PLANE: dict[str, Endpoint] = {
    "": topics.topic_root,
    "diff": records.diff,
    "delete": records.delete,
    "claim": queues.claim,
    "ack": queues.ack,
    "nack": queues.nack,
    "extend": queues.extend,
}
_TOPICS = "/v0/topics/"


def any_method(path: str, endpoint: Endpoint) -> Route:
    """A route whose handler takes every method (even one Starlette does not list), so
    that an unknown one is `403` without the scope API §1.3 gives it and `405` with it
    (§12), never a `405` before the scope check."""
    route = Route(path, endpoint, methods=ANY_METHOD)
    route.methods = None  # Starlette: no method check, every method matches fully
    return route


def route_table(openapi: Callable[[Request], Awaitable[Response]]) -> list[BaseRoute]:
    return [
        Route("/v0/health", health.health, methods=["GET"]),
        Route("/healthz", health.health, methods=["GET"]),
        Route("/v0/ready", health.ready, methods=["GET"]),
        Route("/readyz", health.ready, methods=["GET"]),
        Route("/v0/metrics", health.metrics, methods=["GET"]),
        Route("/v0/openapi.json", openapi, methods=["GET"]),
        Route("/v0/topics", topics.list_topics, methods=["GET"]),
        *(
            any_method(f"/v0/topics/{{topic}}{'/' + sub if sub else ''}", endpoint)
            for sub, endpoint in TOPIC_DATA_PLANE.items()
        ),
        any_method("/v0/topics/{topic}/work", work_stream.open_work),
        any_method("/v0/topics/{topic}/{rest:path}", topics.other_subpath),
        Route("/v0/routers", routers.list_routers, methods=["GET"]),
        any_method("/v0/routers/{router}", routers.router_root),
        Route("/v0/watch", watch.create, methods=ANY_METHOD),
        Route("/v0/watch/{wid}", watch.open_stream, methods=ANY_METHOD),
        WebSocketRoute("/v0/ws", ws.endpoint),
        Route("/v0/ws", ws.plain_get, methods=ANY_METHOD),
        Route("/console", console.page, methods=["GET"]),
        Route("/console/{name}", console.asset, methods=["GET"]),
    ]


def direct_endpoint(method: str, path: str) -> tuple[Endpoint, str] | None:
    """The handler and topic name of a data-plane request, matched exactly as the route
    table would match it (`{topic}` is one non-empty segment, any method), or `None` for
    anything else, which goes through Starlette's router."""
    if not path.startswith(_TOPICS):
        return None
    name, sep, sub = path[len(_TOPICS) :].partition("/")
    if not name or (sep and not sub):
        return None
    endpoint = TOPIC_DATA_PLANE.get(sub)
    return None if endpoint is None else (endpoint, name)
