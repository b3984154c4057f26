"""schemathesis against a live server, from the document the server itself serves.

Each documented operation gets generated requests, valid (positive) and invalid (negative)
by its schema, sent to a real `seglog` process. Every answer must be below 500, and every
4xx answer must carry the canonical error envelope (API §0.5): exactly
`{"error": {"code", "message", "detail"?}}`, a known code, a non-empty message, an object
detail, with the status the spec's table gives that code (§0.6). The default run is small
(`SHORT_EXAMPLES` per operation, a few hundred requests); `scripts/fuzz_api.py --requests
100000` runs the same checks at length. The two SSE GETs are left out: a valid request opens
a stream that never ends.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import orjson
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.core.result import Err

from seglog.errors import ErrorCode
from seglog.http.errors import STATUS
from tests.support.server import ServerProcess

SHORT_EXAMPLES = 25  # about 450 requests, a few seconds
STREAMS = frozenset({"/v0/topics/{topic}/work", "/v0/watch/{wid}"})
STATUS_OF_CODE = {c.value: s for c, s in STATUS.items()}


@dataclass
class FuzzReport:
    requests: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def error_shape_problem(status: int, content_type: str, body: bytes) -> str | None:
    """Why a 4xx/5xx answer is not the canonical error envelope, or None."""
    if not content_type.startswith("application/json"):
        return f"content-type {content_type!r}"
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "body is not JSON"
    if not isinstance(doc, dict) or set(doc) != {"error"} or not isinstance(doc["error"], dict):
        return "not {'error': {...}}"
    err: dict[str, Any] = doc["error"]
    if not {"code", "message"} <= set(err) <= {"code", "message", "detail"}:
        return f"error keys {sorted(err)}"
    code = err["code"]
    if code not in STATUS_OF_CODE:
        return f"unknown code {code!r}"
    if not isinstance(err["message"], str) or not err["message"]:
        return "empty message"
    if "detail" in err and not isinstance(err["detail"], dict):
        return "detail is not an object"
    if STATUS_OF_CODE[code] != status:
        return f"code {code} has status {STATUS_OF_CODE[code]} in the spec, not {status}"
    return None


def _describe(resp: Any) -> str:
    """`METHOD url body=... -> status body` of a schemathesis response, for a report."""
    prep = resp.request
    body = prep.body if isinstance(prep.body, bytes) else (prep.body or "").encode()
    sent = body[:300].decode("utf-8", "replace")
    got = resp.content[:300].decode("utf-8", "replace")
    return f"{prep.method} {prep.url} body={sent!r} -> {resp.status_code} {got!r}"


def fuzzed_operations(base_url: str) -> list[Any]:
    """The document's operations (as served by `base_url`) minus the two SSE streams."""
    schema = schemathesis.openapi.from_url(f"{base_url}/v0/openapi.json")
    ops: list[Any] = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # a document schemathesis cannot read is a failure
            raise result.err()
        ops.append(result.ok())
    return [op for op in ops if op.path not in STREAMS]


def run_fuzz(base_url: str, examples: int, report: FuzzReport) -> None:
    """Up to `examples` generated cases per operation, valid and invalid ones mixed."""
    session = requests.Session()
    for op in fuzzed_operations(base_url):
        cases = st.one_of(
            op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE)
        )

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=False,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=cases)
        def one(case: Any) -> None:
            resp = case.call(base_url=base_url, session=session, timeout=30)
            report.requests += 1
            report.by_status[resp.status_code] = report.by_status.get(resp.status_code, 0) + 1
            if resp.status_code < 400:
                return
            what = _describe(resp)
            if resp.status_code >= 500:
                report.problems.append(f"5xx: {what}")
                return
            shape = error_shape_problem(
                resp.status_code, (resp.headers.get("content-type") or [""])[0], resp.content
            )
            if shape is not None:
                report.problems.append(f"error body ({shape}): {what}")

        one()


def test_error_shape_check_can_fail() -> None:
    ok = b'{"error":{"code":"topic_not_found","message":"no topic","detail":{"topic":"t"}}}'
    assert error_shape_problem(404, "application/json", ok) is None
    assert error_shape_problem(400, "application/json", ok) is not None  # wrong status
    assert error_shape_problem(404, "text/plain", ok) is not None
    assert error_shape_problem(404, "application/json", b'{"error":"x"}') is not None
    extra = b'{"error":{"code":"not_found","message":"m","x":1}}'
    assert error_shape_problem(404, "application/json", extra) is not None
    assert error_shape_problem(404, "application/json", b'{"error":{"code":"nope","message":"m"}}')
    assert {c.value for c in ErrorCode} == set(STATUS_OF_CODE)


def test_fuzz_live_server(server: ServerProcess) -> None:
    examples = int(os.environ.get("SEGLOG_FUZZ_EXAMPLES", SHORT_EXAMPLES))
    report = FuzzReport()
    run_fuzz(server.url, examples, report)
    assert report.requests >= examples  # the run really sent requests
    assert sum(n for status, n in report.by_status.items() if status < 300) > 0
    assert report.problems == [], "\n".join(report.problems[:20])
