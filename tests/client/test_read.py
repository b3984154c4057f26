"""`read()` paging (cursor, tombstones in order, until_seq, caught_up, follow) and
`iter_topics()` pagination, against a small fake of the diff / list endpoints."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from seglog.client import ReadRecord, Tombstone, TopicNotFound, TopicSummary
from seglog.client._reader import ReadCursor
from tests.client.conftest import MakeApi, body_of, err, ok


@dataclass
class FakeLog:
    """One topic with seqs 1..head: below `floor` evicted (tombstone), `deleted` skipped silently
    (SEMANTICS §4.4–4.5). `on_wait` runs when a long-poll would block (may append)."""

    head: int = 0
    floor: int = 1
    deleted: set[int] = field(default_factory=set)
    on_wait: Callable[[FakeLog], None] | None = None
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def append(self, n: int = 1) -> None:
        self.head += n

    def record(self, seq: int, body: dict[str, Any]) -> dict[str, Any]:
        rec: dict[str, Any] = {"$seq": seq, "$ts": 1000 + seq, "data": {"n": seq}}
        if body.get("include_tags"):
            rec["$tag"] = f"tag-{seq}"
        return rec

    def evaluate(self, body: dict[str, Any]) -> dict[str, Any]:
        f, head = body.get("from_seq", 0), self.head
        limit = body.get("limit") or 256
        earliest = self.floor
        while earliest in self.deleted:
            earliest += 1
        tomb, cur = None, f
        if f > head:
            tomb = {
                "gap_from": 1,
                "gap_to": head,
                "reason": "recreated",
                "missed_estimate": max(head, 1),
                "earliest_seq": earliest,
                "head_seq": head,
            }
            cur = earliest - 1
        elif f + 1 < self.floor:
            gap_to = self.floor - 1
            tomb = {
                "gap_from": f + 1,
                "gap_to": gap_to,
                "reason": "cap",
                "missed_estimate": gap_to - f,
                "earliest_seq": self.floor,
                "head_seq": head,
            }
            cur = max(earliest - 1, f)
        records: list[dict[str, Any]] = []
        while cur < head and len(records) < limit:
            cur += 1
            if cur not in self.deleted:
                records.append(self.record(cur, body))
        return {
            "topic": "t",
            "records": records,
            "next_from_seq": cur,
            "head_seq": head,
            "earliest_seq": earliest,
            "caught_up": cur == head,
            "tombstone": tomb,
            "lag": head - cur,
            "performance": {"server_total_ms": 0.0},
        }

    def __call__(self, req: httpx.Request) -> httpx.Response:
        assert (req.method, req.url.path) == ("POST", "/v0/topics/t/diff"), req
        body = body_of(req)
        self.bodies.append(body)
        res = self.evaluate(body)
        if body.get("wait_ms") and res["caught_up"] and not res["records"] and not res["tombstone"]:
            if self.on_wait is not None:
                self.on_wait(self)
            res = self.evaluate(body)
        return ok(res)


def seqs(items: list[Any]) -> list[Any]:
    return [i.seq if isinstance(i, ReadRecord) else ("T", i.gap_from, i.gap_to) for i in items]


async def test_read_follows_next_from_seq_across_pages(make_api: MakeApi) -> None:
    log = FakeLog(head=7)
    api = make_api(log)
    reader = await api("read", "t", limit=3)
    items = await api.collect(reader)
    assert seqs(items) == [1, 2, 3, 4, 5, 6, 7]
    assert items[0] == ReadRecord(1, 1001, {"n": 1}, tag="tag-1")
    assert [b["from_seq"] for b in log.bodies] == [0, 3, 6]
    assert all(b["limit"] == 3 and b["wait_ms"] == 0 and b["include_tags"] for b in log.bodies)
    assert reader.next_from_seq == 7
    assert reader.last_page.caught_up


async def test_read_stops_at_caught_up(make_api: MakeApi) -> None:
    log = FakeLog(head=5)
    api = make_api(log)
    assert seqs(await api.collect(await api("read", "t", 2))) == [3, 4, 5]
    assert len(log.bodies) == 1 and log.bodies[0]["limit"] == 1000
    empty = await api("read", "t", 5)
    assert await api.collect(empty) == [] and empty.next_from_seq == 5


async def test_read_surfaces_tombstone_before_the_records_after_it(make_api: MakeApi) -> None:
    log = FakeLog(head=6, floor=4)
    api = make_api(log)
    items = await api.collect(await api("read", "t"))
    assert seqs(items) == [("T", 1, 3), 4, 5, 6]
    assert items[0] == Tombstone(1, 3, "cap", 3, 4, 6)


async def test_read_tombstone_between_pages(make_api: MakeApi) -> None:
    log = FakeLog(head=9)
    api = make_api(log)
    reader = await api("read", "t", limit=2)
    first = await api.collect(reader, 2)
    log.floor = 6  # retention evicts 3..5 while the reader is between pages
    rest = await api.collect(reader)
    assert seqs(first + rest) == [1, 2, ("T", 3, 5), 6, 7, 8, 9]


async def test_cursor_is_a_resume_point_mid_page(make_api: MakeApi) -> None:
    log = FakeLog(head=9, floor=3)
    api = make_api(log)
    reader = await api("read", "t", limit=5)
    got = await api.collect(reader, 1)
    assert seqs(got) == [("T", 1, 2)] and reader.next_from_seq == 2
    got = await api.collect(reader, 2)
    assert seqs(got) == [3, 4] and reader.next_from_seq == 4
    resumed = await api.collect(await api("read", "t", reader.next_from_seq))
    assert seqs(resumed) == [5, 6, 7, 8, 9]


async def test_read_stops_at_until_seq(make_api: MakeApi) -> None:
    log = FakeLog(head=10)
    api = make_api(log)
    reader = await api("read", "t", until_seq=5, limit=3)
    assert seqs(await api.collect(reader)) == [1, 2, 3, 4, 5]
    assert [b["limit"] for b in log.bodies] == [3, 2]  # never asks past until_seq
    assert reader.next_from_seq == 5


async def test_read_never_yields_past_until_seq_across_skipped_slots(make_api: MakeApi) -> None:
    log = FakeLog(head=10, deleted={4, 5})
    api = make_api(log)
    reader = await api("read", "t", 3, until_seq=5)
    assert seqs(await api.collect(reader)) == []  # the server's page holds 6, 7 only
    assert reader.next_from_seq == 5
    assert len(log.bodies) == 1 and log.bodies[0]["limit"] == 2


async def test_read_with_until_seq_before_from_seq_sends_nothing(make_api: MakeApi) -> None:
    log = FakeLog(head=10)
    api = make_api(log)
    assert await api.collect(await api("read", "t", 5, until_seq=5)) == []
    assert log.bodies == []


async def test_read_after_recreate_restarts_from_the_new_instance(make_api: MakeApi) -> None:
    log = FakeLog(head=3)
    api = make_api(log)
    reader = await api("read", "t", 10)
    items = await api.collect(reader)
    assert seqs(items) == [("T", 1, 3), 1, 2, 3]
    assert items[0].reason == "recreated"
    assert reader.next_from_seq == 3


async def test_follow_long_polls_for_new_records(make_api: MakeApi) -> None:
    def grow(log: FakeLog) -> None:
        log.append(2)

    log = FakeLog(head=1, on_wait=grow)
    api = make_api(log)
    reader = await api("read", "t", follow=True, wait_ms=250)
    assert seqs(await api.collect(reader, 5)) == [1, 2, 3, 4, 5]
    assert all(b["wait_ms"] == 250 for b in log.bodies)
    assert api.sleeps == []  # the server's long-poll paces the loop


async def test_follow_until_seq_ends(make_api: MakeApi) -> None:
    log = FakeLog(head=1, on_wait=lambda lg: lg.append(3))
    api = make_api(log)
    reader = await api("read", "t", follow=True, until_seq=3)
    assert seqs(await api.collect(reader)) == [1, 2, 3]


async def test_follow_without_wait_backs_off_instead_of_spinning(make_api: MakeApi) -> None:
    log = FakeLog(head=1)

    def handler(req: httpx.Request) -> httpx.Response:
        if len(log.bodies) == 4:  # the 5th diff finds a new record
            log.head = 2
        return log(req)

    api = make_api(handler, backoff=0.1, max_backoff=0.3)
    reader = await api("read", "t", follow=True, wait_ms=0)
    assert seqs(await api.collect(reader, 2)) == [1, 2]
    assert [b["from_seq"] for b in log.bodies] == [0, 1, 1, 1, 1]
    assert api.sleeps == pytest.approx([0.05, 0.1, 0.15])  # FixedRng(0.5) × 0.1·2^n, cap 0.3


async def test_read_propagates_topic_not_found(make_api: MakeApi) -> None:
    api = make_api(lambda _r: err(404, "topic_not_found", "gone", {"topic": "t"}))
    with pytest.raises(TopicNotFound):
        await api.collect(await api("read", "t"))


async def test_a_closed_reader_ends_and_keeps_its_cursor(make_api: MakeApi) -> None:
    log = FakeLog(head=7)
    api = make_api(log)
    reader = await api("read", "t", limit=5)
    assert seqs(await api.collect(reader, 2)) == [1, 2]
    close = reader.close if api.kind == "sync" else reader.aclose
    result = close()
    if result is not None:
        await result
    assert await api.collect(reader) == []
    assert reader.next_from_seq == 2 and len(log.bodies) == 1


async def test_read_passes_filters(make_api: MakeApi) -> None:
    log = FakeLog(head=1)
    api = make_api(log)
    await api.collect(
        await api(
            "read", "t", node=["a"], include_tags=False, include_meta=False, max_batch_bytes=99
        )
    )
    assert log.bodies[0] == {
        "from_seq": 0,
        "limit": 1000,
        "node": ["a"],
        "include_tags": False,
        "include_meta": False,
        "wait_ms": 0,
        "max_batch_bytes": 99,
    }


def test_cursor_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ReadCursor(-1, until_seq=None, follow=False, limit=10, wait_ms=0)
    with pytest.raises(ValueError):
        ReadCursor(0, until_seq=None, follow=False, limit=0, wait_ms=0)


# --- iter_topics --------------------------------------------------------------------------------


def topics_server(names: list[str]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(req: httpx.Request) -> httpx.Response:
        assert (req.method, req.url.path) == ("GET", "/v0/topics")
        params = req.url.params
        size = int(params.get("page_size", 100))
        after = ""
        if params.get("cursor"):
            after = orjson.loads(base64.b64decode(params["cursor"]))["after"]
        prefix = params.get("prefix", "")
        chosen = [n for n in sorted(names) if n > after and n.startswith(prefix)]
        page = chosen[:size]
        body: dict[str, Any] = {
            "topics": [
                {
                    "topic": n,
                    "head_seq": 1,
                    "earliest_seq": 1,
                    "count": 1,
                    "bytes": 2,
                    "durable": False,
                    "effective_priority": 0,
                }
                for n in page
            ],
            "performance": {"server_total_ms": 0.0},
        }
        if len(chosen) > size:
            body["next_cursor"] = base64.b64encode(orjson.dumps({"after": page[-1]})).decode()
        return ok(body)

    return handler


async def test_iter_topics_follows_next_cursor(make_api: MakeApi) -> None:
    names = ["a.1", "a.2", "a.3", "a.4", "a.5", "b.1"]
    api = make_api(topics_server(names))
    got = await api.collect(await api("iter_topics", prefix="a.", page_size=2))
    assert [t.topic for t in got] == ["a.1", "a.2", "a.3", "a.4", "a.5"]
    assert got[0] == TopicSummary("a.1", 1, 1, 1, 2, False, 0)
    assert len(api.requests) == 3
    assert "cursor" not in api.requests[0].url.params
    assert all(
        r.url.params["prefix"] == "a." and r.url.params["page_size"] == "2" for r in api.requests
    )


async def test_iter_topics_single_page_and_empty(make_api: MakeApi) -> None:
    api = make_api(topics_server(["x"]))
    assert [t.topic for t in await api.collect(await api("iter_topics"))] == ["x"]
    assert await api.collect(await api("iter_topics", prefix="zz")) == []
    assert len(api.requests) == 2
