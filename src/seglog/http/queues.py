"""Queue routes (API §9.1–§9.4): claim, ack, nack, extend. The push stream is
`work_stream`; the lease state machine is `seglog.core.leases`, run by `engine.queues`."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from seglog.core.leases import Claimer
from seglog.engine.queues import Job, SettleResult
from seglog.errors import invalid
from seglog.http.app_state import server_state
from seglog.http.auth import Scope
from seglog.http.common import elapsed_ms, json_body, json_response, read_body, require, started
from seglog.http.queue_request import (
    check_node,
    lease_wire_id,
    parse_ack,
    parse_claim,
    parse_extend,
    parse_nack,
)
from seglog.http.topics import method_not_allowed


def job_object(topic: str | None, job: Job) -> dict[str, Any]:
    """A leased job as `claim` and the `/work` stream show it (no `$node`)."""
    r = job.record
    d: dict[str, Any] = {} if topic is None else {"topic": topic}
    d["$seq"] = r.seq
    d["lease_id"] = lease_wire_id(job.lease_id)
    d["deadline"] = job.deadline
    d["$ts"] = r.ts
    if r.tag is not None:
        d["$tag"] = r.tag
    d["deliveries"] = job.deliveries
    d["data"] = orjson.Fragment(r.data_json)
    if r.meta_json is not None:
        d["meta"] = orjson.Fragment(r.meta_json)
    return d


async def _body(request: Request) -> Any:
    st = server_state(request)
    raw = await read_body(request, st.settings.max_body_bytes)
    if not raw.strip():
        raise invalid("request body is required")
    return json_body(request, raw)


async def claim(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    t0 = started()
    name = request.path_params["topic"]
    require(request, (Scope.READ, Scope.WRITE), name)
    req = parse_claim(await _body(request))
    db = server_state(request).db
    db.queue_topic(name)  # 404, then 409, before the node checks (API §9.1)
    node = check_node(req.node)
    jobs, ready = await db.claim(name, Claimer(node, req.max), req.lease_ms)
    body = {
        "topic": name,
        "claimed": [job_object(None, j) for j in jobs],
        "count": len(jobs),
        "ready": ready,
        "performance": {"server_total_ms": elapsed_ms(t0)},
    }
    return json_response(orjson.dumps(body))


async def _settle(request: Request, verb: str) -> tuple[SettleResult, float]:
    t0 = started()
    name = request.path_params["topic"]
    require(request, (Scope.WRITE,), name)
    body = await _body(request)
    req = {"ack": parse_ack, "nack": parse_nack, "extend": parse_extend}[verb](body)
    db = server_state(request).db
    db.queue_topic(name)
    if verb == "ack":
        res = await db.ack(name, req.node, req.seqs, req.fences)
    elif verb == "nack":
        res = db.nack(name, req.node, req.seqs, req.fences, req.delay_ms)
    else:
        res = db.extend(name, req.node, req.seqs, req.fences, req.lease_ms)
    if res.done and verb != "extend":
        server_state(request).queue_settled(name)  # `/work` streams refill now
    return res, t0


async def ack(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    res, t0 = await _settle(request, "ack")
    return _counted(res, "acked", t0)


async def nack(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    res, t0 = await _settle(request, "nack")
    return _counted(res, "nacked", t0)


async def extend(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    res, t0 = await _settle(request, "extend")
    body = {
        "topic": res.topic,
        "extended": len(res.done),
        "skipped": res.skipped,
        "deadlines": {str(s): d for s, d in res.deadlines.items()},
        "performance": {"server_total_ms": elapsed_ms(t0)},
    }
    return json_response(orjson.dumps(body))


def _counted(res: SettleResult, field: str, t0: float) -> Response:
    body = {
        "topic": res.topic,
        field: len(res.done),
        "skipped": res.skipped,
        "ready": res.ready,
        "in_flight": res.in_flight,
        "performance": {"server_total_ms": elapsed_ms(t0)},
    }
    return json_response(orjson.dumps(body))
