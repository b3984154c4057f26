"""The route table: every path the server mounts, in matching order.

One table serves two readers: `app.build_app` mounts it, and `openapi.build_document`
documents it (the `/v0/openapi.json` endpoint is passed in, since the document describes
the table that serves it). Routes whose methods are `ANY_METHOD` dispatch on the method in
their handler, which answers any other method `405` after the scope check (API §1.3).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from seglog.http import console, health, queues, records, routers, topics, watch, work_stream, ws

ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def route_table(openapi: Callable[[Request], Awaitable[Response]]) -> list[BaseRoute]:
    return [
        Route("/v0/health", health.health, methods=["GET"]),
        Route("/healthz", health.health, methods=["GET"]),
        Route("/v0/ready", health.ready, methods=["GET"]),
        Route("/readyz", health.ready, methods=["GET"]),
        Route("/v0/metrics", health.metrics, methods=["GET"]),
        Route("/v0/openapi.json", openapi, methods=["GET"]),
        Route("/v0/topics", topics.list_topics, methods=["GET"]),
        Route("/v0/topics/{topic}", topics.topic_root, methods=ANY_METHOD),
        Route("/v0/topics/{topic}/diff", records.diff, methods=ANY_METHOD),
        Route("/v0/topics/{topic}/delete", records.delete, methods=ANY_METHOD),
        Route("/v0/topics/{topic}/claim", queues.claim, methods=ANY_METHOD),
        Route("/v0/topics/{topic}/ack", queues.ack, methods=ANY_METHOD),
        Route("/v0/topics/{topic}/nack", queues.nack, methods=ANY_METHOD),
        Route("/v0/topics/{topic}/extend", queues.extend, methods=ANY_METHOD),
        Route("/v0/topics/{topic}/work", work_stream.open_work, methods=ANY_METHOD),
        Route("/v0/topics/{topic}/{rest:path}", topics.other_subpath, methods=ANY_METHOD),
        Route("/v0/routers", routers.list_routers, methods=["GET"]),
        Route("/v0/routers/{router}", routers.router_root, methods=ANY_METHOD),
        Route("/v0/watch", watch.create, methods=ANY_METHOD),
        Route("/v0/watch/{wid}", watch.open_stream, methods=ANY_METHOD),
        WebSocketRoute("/v0/ws", ws.endpoint),
        Route("/v0/ws", ws.plain_get, methods=ANY_METHOD),
        Route("/console", console.page, methods=["GET"]),
        Route("/console/{name}", console.asset, methods=["GET"]),
    ]
