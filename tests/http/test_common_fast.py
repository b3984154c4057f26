"""The data plane's shortcuts past Starlette (`common.header`, `common.JsonBytesResponse`) give
exactly what Starlette's own `request.headers.get` and `Response` give."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.responses import Response

from seglog.http.common import JsonBytesResponse, header

_NAMES = st.sampled_from([b"content-type", b"content-length", b"idempotency-key", b"x-a"])
_VALUES = st.binary(max_size=20)


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=6), _NAMES)
def test_header_reads_what_starlette_reads(raw: list[tuple[bytes, bytes]], name: bytes) -> None:
    request = Request({"type": "http", "method": "POST", "path": "/", "headers": raw})
    assert header(request, name) == request.headers.get(name.decode())


@given(st.sampled_from([100, 200, 201, 204, 304, 400, 404, 413, 429, 500, 503]), _VALUES)
def test_a_json_response_is_starlettes(status: int, body: bytes) -> None:
    mine = JsonBytesResponse(body, status)
    theirs = Response(body, status_code=status, media_type="application/json")
    assert (mine.status_code, mine.body, mine.raw_headers) == (
        theirs.status_code,
        theirs.body,
        theirs.raw_headers,
    )
    assert mine.background is None and mine.headers == theirs.headers
