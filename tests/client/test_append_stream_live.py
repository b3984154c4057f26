"""`append_stream()` (NDJSON, API §13.2) against a real server: records from any iterable,
committed chunk by chunk; a bad record stops the stream, keeps the chunks before it and
says where; the sync and async clients agree."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from seglog.client import AsyncClient, Client, SeglogHTTPError
from seglog.http.ndjson_append import CHUNK_RECORDS
from tests.support.server import ServerProcess


def test_a_generator_streams_in_chunks(server: ServerProcess) -> None:
    n = CHUNK_RECORDS + 5
    with Client(server.url) as c:

        def gen() -> Iterator[object]:
            for i in range(n):
                yield {"data": {"i": i}, **({"tag": "even"} if i % 2 == 0 else {})}

        res = c.append_stream("as-gen", gen(), node="edge")
        assert res.created and res.count == n and res.head_seq == n
        assert [(x.first_seq, x.last_seq, x.count) for x in res.chunks] == [
            (1, CHUNK_RECORDS, CHUNK_RECORDS),
            (CHUNK_RECORDS + 1, n, 5),
        ]
        got = c.diff("as-gen", limit=3, include_tags=True).records
        assert [r.data for r in got] == [{"i": 0}, {"i": 1}, {"i": 2}]
        assert got[0].node == "edge" and got[0].tag == "even" and got[1].tag is None
        again = c.append_stream("as-gen", [b'{"data":"raw"}'])
        assert not again.created and again.chunks[0].first_seq == n + 1


def test_a_bad_record_keeps_the_chunks_before_it(server: ServerProcess) -> None:
    good = [{"data": i} for i in range(CHUNK_RECORDS)]
    with Client(server.url) as c:
        with pytest.raises(SeglogHTTPError) as e:
            c.append_stream("as-bad", [*good, {"data": 1}, {"tag": "no data"}])
        assert e.value.detail["line"] == CHUNK_RECORDS + 2
        assert e.value.detail["committed_through_seq"] == CHUNK_RECORDS
        assert c.get_topic("as-bad").head_seq == CHUNK_RECORDS
        with pytest.raises(ValueError, match="one line"):
            c.append_stream("as-bad", [b'{"data":1}\n{"data":2}'])


def test_async_client_takes_async_iterables(server: ServerProcess) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as c:

            async def agen() -> AsyncIterator[object]:
                for i in range(2500):
                    yield {"data": i}

            res = await c.append_stream("as-async", agen())
            assert res.count == 2500 and res.head_seq == 2500
            res = await c.append_stream("as-async", [{"data": "x"}], create=False)
            assert res.chunks[0].first_seq == 2501
            assert (await c.diff("as-async", 2500)).records[0].data == "x"

    asyncio.run(main())


def test_buffer_bytes_zero_sends_each_record_as_it_comes(server: ServerProcess) -> None:
    """A slow source (a log being written): with `buffer_bytes=0` each record is sent when
    the iterable yields it, and the server commits it while the request is still open."""
    import time

    with Client(server.url) as c, Client(server.url) as watcher:
        c.put_topic("as-slow")

        def slow_source() -> Iterator[object]:
            for i in range(3):
                yield {"data": i}
                deadline = time.monotonic() + 10
                while watcher.get_topic("as-slow").head_seq < i + 1:
                    assert time.monotonic() < deadline, f"record {i} was not sent on its own"
                    time.sleep(0.02)

        res = c.append_stream("as-slow", slow_source(), buffer_bytes=0)
        assert res.count == 3 and len(res.chunks) == 3
