"""Health, readiness and metrics routes (API §10)."""

from __future__ import annotations

import time
from dataclasses import replace

import orjson
from starlette.requests import Request
from starlette.responses import Response

import seglog
from seglog.errors import ErrorCode, SeglogError
from seglog.http.app_state import server_state
from seglog.http.auth import Scope
from seglog.http.common import json_response, require
from seglog.http.metrics_snapshot import collect
from seglog.http.metrics_text import render_json, render_prometheus
from seglog.http.wire_types import Health, Ready

PROMETHEUS_TYPE = "text/plain; version=0.0.4"  # API §10, exactly

_STARTED = time.monotonic()


def uptime_ms() -> int:
    return int((time.monotonic() - _STARTED) * 1000)


async def health(_request: Request) -> Response:
    body: Health = {"status": "ok", "version": seglog.__version__, "uptime_ms": uptime_ms()}
    return json_response(orjson.dumps(body))


async def ready(request: Request) -> Response:
    db = server_state(request).db
    if not db.ready:
        raise SeglogError(
            ErrorCode.NOT_READY,
            "recovery in progress",
            {"replay_progress": round(db.replay_progress, 4)},
            retry_after=1,
        )
    body: Ready = {"status": "ready", "wal_replay_complete": True, "topics": db.topic_count()}
    return json_response(orjson.dumps(body))


async def metrics(request: Request) -> Response:
    require(request, (Scope.READ,))
    st = server_state(request)
    snap = replace(
        collect(await st.db.stats(), uptime_ms()),
        sse_connections=st.slots.total,
        watch_sessions=len(st.watch),
        delivery=st.delivery_metrics(),
    )
    if "application/json" in request.headers.get("accept", ""):
        return json_response(render_json(snap))
    # Set as a header: Starlette would append `; charset=utf-8` to a `text/*` media type,
    # and API §10 names the type exactly.
    return Response(render_prometheus(snap), headers={"content-type": PROMETHEUS_TYPE})
