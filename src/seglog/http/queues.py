"""Queue routes (API §9.1–§9.4): claim, ack, nack, extend. The push stream is
`work_stream`; the lease state machine is `seglog.core.leases`, run by `engine.queues`."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from seglog.core.leases import Claimer
from seglog.engine.queues import Job, SettleResult
from seglog.errors import SeglogError, invalid
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
from seglog.http.wire_types import (
    AckResponse,
    ClaimResponse,
    ExtendResponse,
    NackResponse,
    Performance,
)
from seglog.http.wire_types import Job as JobWire


def job_object(job: Job) -> JobWire:
    """A leased job as `claim` shows it (no `$node`); the `/work` stream puts its topic
    first."""
    r = job.record
    d: JobWire
    if r.tag is None:
        d = {
            "$seq": r.seq,
            "lease_id": lease_wire_id(job.lease_id),
            "deadline": job.deadline,
            "$ts": r.ts,
            "deliveries": job.deliveries,
            "data": orjson.Fragment(r.data_json),
        }
    else:
        d = {
            "$seq": r.seq,
            "lease_id": lease_wire_id(job.lease_id),
            "deadline": job.deadline,
            "$ts": r.ts,
            "$tag": r.tag,
            "deliveries": job.deliveries,
            "data": orjson.Fragment(r.data_json),
        }
    if r.meta_json is not None:
        d["meta"] = orjson.Fragment(r.meta_json)
    return d


async def _body(request: Request, required: bool = False) -> Any:
    """API §0.2: a claim's empty body is `400` before the content-type check; any other
    body (ack, nack, extend; an empty one too) is checked and parsed as JSON."""
    st = server_state(request)
    raw = await read_body(request, st.settings.max_body_bytes)
    if required and not raw:
        raise invalid("request body is required")
    return json_body(request, raw)


async def claim(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    t0 = started()
    name = request.path_params["topic"]
    require(request, (Scope.READ, Scope.WRITE), name)
    req = parse_claim(await _body(request, required=True))
    db = server_state(request).db
    db.queue_topic(name)  # 404, then 409, before the node checks (API §9.1)
    node = check_node(req.node)
    jobs, ready = await db.claim(name, Claimer(node, req.max), req.lease_ms)
    body: ClaimResponse = {
        "topic": name,
        "claimed": [job_object(j) for j in jobs],
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
        try:
            res = await db.ack(name, req.node, req.seqs, req.fences)
        except SeglogError:
            # A failed delete put the jobs back (SEMANTICS §10.4): any stream may take them.
            server_state(request).queue_settled(name)
            raise
    elif verb == "nack":
        res = await db.nack(name, req.node, req.seqs, req.fences, req.delay_ms)
    else:
        res = db.extend(name, req.node, req.seqs, req.fences, req.lease_ms)
    if res.done and verb != "extend":  # `/work` streams refill now
        server_state(request).queue_settled(name, res.conns if verb == "ack" else None)
    return res, t0


async def ack(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    res, t0 = await _settle(request, "ack")
    perf: Performance = {"server_total_ms": elapsed_ms(t0)}
    if res.fsync_ms > 0:  # API §9.2: only when > 0
        perf["fsync_ms"] = res.fsync_ms
    body: AckResponse = {
        "topic": res.topic,
        "acked": len(res.done),
        "skipped": res.skipped,
        "ready": res.ready,
        "in_flight": res.in_flight,
        "performance": perf,
    }
    return json_response(orjson.dumps(body))


async def nack(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    res, t0 = await _settle(request, "nack")
    body: NackResponse = {
        "topic": res.topic,
        "nacked": len(res.done),
        "skipped": res.skipped,
        "ready": res.ready,
        "in_flight": res.in_flight,
        "performance": {"server_total_ms": elapsed_ms(t0)},
    }
    return json_response(orjson.dumps(body))


async def extend(request: Request) -> Response:
    if request.method != "POST":
        return method_not_allowed(request)
    res, t0 = await _settle(request, "extend")
    body: ExtendResponse = {
        "topic": res.topic,
        "extended": len(res.done),
        "skipped": res.skipped,
        "deadlines": {str(s): d for s, d in res.deadlines.items()},
        "performance": {"server_total_ms": elapsed_ms(t0)},
    }
    return json_response(orjson.dumps(body))
