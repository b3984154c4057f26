"""`common.read_body`: the body as the ASGI server delivers it, read no further than its
declared length (each `receive()` is a round trip to granian's I/O thread), with 413 and
400 for oversized and cut-short bodies."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request

from seglog.errors import ErrorCode, SeglogError
from seglog.http.common import read_body


class Receiver:
    """A scripted ASGI `receive`; running past the script is a test failure."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages = list(messages)
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        assert self.messages, "read_body asked for a message past the body"
        return self.messages.pop(0)


def body(chunk: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": chunk, "more_body": more}


def request(headers: dict[str, str], receiver: Receiver, http_version: str = "1.1") -> Request:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v0/topics/t",
        "http_version": http_version,
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }
    return Request(scope, receiver)


async def test_stops_at_the_declared_length_without_waiting_for_the_end_message() -> None:
    r = Receiver(body(b'{"a":', more=True), body(b"1}", more=True))  # no final empty message
    got = await read_body(request({"content-length": "7"}, r), 1000)
    assert got == b'{"a":1}' and r.calls == 2


@pytest.mark.parametrize("declared", ["0", "000"])
async def test_a_zero_length_body_is_not_awaited(declared: str) -> None:
    r = Receiver()
    assert await read_body(request({"content-length": declared}, r), 1000) == b""
    assert r.calls == 0


async def test_leading_zeros_are_a_length() -> None:
    r = Receiver(body(b"abcdefg", more=True))
    assert await read_body(request({"content-length": "007"}, r), 1000) == b"abcdefg"


async def test_http1_without_length_or_chunking_has_no_body() -> None:
    r = Receiver()
    assert await read_body(request({}, r), 1000) == b""
    assert r.calls == 0


@pytest.mark.parametrize(
    ("headers", "version"), [({"transfer-encoding": "chunked"}, "1.1"), ({}, "2")]
)
async def test_unknown_lengths_read_to_the_end_message(
    headers: dict[str, str], version: str
) -> None:
    r = Receiver(body(b"ab", more=True), body(b"cd", more=True), body(b""))
    assert await read_body(request(headers, r, version), 1000) == b"abcd"
    assert r.calls == 3


async def test_over_the_limit_while_streaming_is_413() -> None:
    r = Receiver(body(b"x" * 6, more=True), body(b"x" * 6, more=True))
    with pytest.raises(SeglogError) as err:
        await read_body(request({"transfer-encoding": "chunked"}, r), 10)
    assert err.value.code is ErrorCode.PAYLOAD_TOO_LARGE and r.calls == 2


async def test_a_declared_length_over_the_limit_is_413_before_reading() -> None:
    r = Receiver()
    with pytest.raises(SeglogError) as err:
        await read_body(request({"content-length": "11"}, r), 10)
    assert err.value.code is ErrorCode.PAYLOAD_TOO_LARGE and r.calls == 0


@pytest.mark.parametrize(
    "script",
    [
        [body(b"ab", more=True), {"type": "http.disconnect"}],
        [body(b"ab")],  # the server ended the body short of its declared length
    ],
)
async def test_a_body_cut_short_is_400(script: list[dict[str, Any]]) -> None:
    r = Receiver(*script)
    with pytest.raises(SeglogError) as err:
        await read_body(request({"content-length": "5"}, r), 1000)
    assert err.value.code is ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    "headers",
    [
        {"content-length": "5, 5"},  # a repeated length (RFC 9110 §8.6): still a body
        {"content-length": "1" + "0" * 30},  # past any u64, with no limit configured
        {"content-length": "0", "transfer-encoding": "chunked"},  # the chunking wins
        {"content-length": "2", "transfer-encoding": "chunked"},
    ],
)
async def test_a_length_that_is_not_plain_or_is_overridden_reads_to_the_end(
    headers: dict[str, str],
) -> None:
    r = Receiver(body(b"hel", more=True), body(b"lo", more=True), body(b""))
    assert await read_body(request(headers, r), 0) == b"hello"
    assert r.calls == 3


async def test_http2_with_a_length_stops_there_too() -> None:
    r = Receiver(body(b"hello", more=True))
    assert await read_body(request({"content-length": "5"}, r, "2"), 1000) == b"hello"
    assert r.calls == 1
