"""`append("t", ["str"])` says what a record must be, before anything is sent (issue 14)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from seglog.client import AsyncClient, Client


def refuse(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"nothing should be sent, got {request.method} {request.url}")


def test_sync_append_of_a_string_record_names_the_record_and_the_fix() -> None:
    with (
        Client("http://seglog.test", transport=httpx.MockTransport(refuse)) as c,
        pytest.raises(TypeError) as info,
    ):
        c.append("t", ["str"])  # type: ignore[list-item]
    message = str(info.value)
    assert "record 0" in message
    assert "str" in message
    assert '{"data": ...}' in message
    assert "dictionary update sequence" not in message


def test_sync_append_of_a_bare_string_says_a_sequence_is_expected() -> None:
    with (
        Client("http://seglog.test", transport=httpx.MockTransport(refuse)) as c,
        pytest.raises(TypeError, match="sequence of records"),
    ):
        c.append("t", "str")  # type: ignore[arg-type]


def test_async_append_of_a_string_record_says_the_same() -> None:
    async def main() -> None:
        async with AsyncClient("http://seglog.test", transport=httpx.MockTransport(refuse)) as c:
            with pytest.raises(TypeError, match=r"record 1 is of type int"):
                await c.append("t", [{"data": 1}, 2])  # type: ignore[list-item]

    asyncio.run(main())
