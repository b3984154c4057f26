"""`seglog tail`: `--follow` streams over the watch and resumes across a lost session without
a gap or a duplicate; without `--follow` it still pages through diff once and stops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from typer.testing import CliRunner, Result

from seglog.cli import common
from seglog.cli.main import app
from seglog.client import Client
from tests.client.conftest import FixedRng, err, ok
from tests.client.watch_fakes import ScriptedWatchServer, Step, disconnect, frame, records_frame

RETRY = b"retry: 2000\n\n"
Handler = Callable[[httpx.Request], httpx.Response]


def topic_state(head: int) -> dict[str, Any]:
    return {
        "topic": "jobs",
        "type": "log",
        "head_seq": head,
        "earliest_seq": 1,
        "next_seq": head + 1,
        "count": head,
        "bytes": 0,
        "config": {},
        "effective_priority": 0,
        "last_write_ts": None,
        "last_read_ts": None,
    }


class Run:
    def __init__(self, result: Result, sleeps: list[float]) -> None:
        self.exit_code, self.output = result.exit_code, result.output
        self.stdout, self.stderr = result.stdout, result.stderr
        self.sleeps = sleeps


def run(monkeypatch: pytest.MonkeyPatch, handler: Handler, *args: str) -> Run:
    sleeps: list[float] = []

    def client(url: str, api_key: str | None) -> Client:
        return Client(
            url,
            api_key=api_key,
            transport=httpx.MockTransport(handler),
            sleep=sleeps.append,
            rng=FixedRng(),
        )

    monkeypatch.setattr(common, "make_client", client)
    return Run(CliRunner().invoke(app, ["tail", "jobs", *args]), sleeps)


def lines(stdout: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stdout.splitlines() if line.strip()]


def recs(frm: int, seqs: list[int], head: int = 20) -> bytes:
    return frame("record", records_frame("jobs", frm, seqs, head))


def test_follow_resumes_after_the_session_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    gap = {
        "topic": "jobs",
        "reason": "cap",
        "gap_from": 7,
        "gap_to": 9,
        "earliest_seq": 10,
        "head_seq": 10,
    }
    watch = ScriptedWatchServer(
        [
            Step([RETRY + recs(3, [4, 5])], fail=disconnect()),
            Step(response=err(404, "not_found", "unknown watch session")),  # server restarted
            Step(
                [
                    RETRY
                    + recs(4, [5, 6])  # a rewind too far: 5 must not print twice
                    + frame("tombstone", gap)
                    + recs(9, [10])
                    + frame("topic-deleted", {"topic": "jobs", "head_seq": 0, "reason": "deleted"})
                ]
            ),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v0/topics/jobs":
            return ok(topic_state(5))
        if request.url.path == "/v0/topics/jobs/diff":  # where the last 2 records start
            assert orjson.loads(request.content)["from_seq"] == 3
            page = {"topic": "jobs", "next_from_seq": 5, "head_seq": 5, "earliest_seq": 1}
            return ok(
                page
                | {"caught_up": True, "tombstone": None, "lag": 0}
                | {"records": [{"$seq": s, "$ts": s, "data": s} for s in (4, 5)]}
            )
        return watch(request)

    result = run(monkeypatch, handler, "--follow", "--last", "2", "--api-key", "k")
    assert result.exit_code == 0, result.output
    assert [line.get("$seq") for line in lines(result.stdout)] == [4, 5, 6, None, 10]
    assert lines(result.stdout)[0] == {"$seq": 4, "$ts": 1_748_467_200_004, "data": {"n": 4}}
    assert lines(result.stdout)[3]["tombstone"]["gap_from"] == 7
    assert "jobs: records 7..9 were evicted by the topic's cap; 3 missed" in result.stderr
    assert "jobs: topic deleted" in result.stderr
    assert [c["topics"] for c in watch.creates] == [
        {"jobs": {"from_seq": 3}},
        {"jobs": {"from_seq": 5}},
    ]
    assert watch.creates[0]["include_tags"] is True
    assert all(g.headers["authorization"] == "Bearer k" for g in watch.gets)
    assert result.sleeps == [1.5]


def test_follow_from_an_explicit_seq_skips_the_state_call(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = ScriptedWatchServer(
        [Step([RETRY + recs(7, [8]) + frame("topic-deleted", {"topic": "jobs", "head_seq": 8})])]
    )
    result = run(monkeypatch, watch, "-f", "--from", "7")
    assert result.exit_code == 0, result.output
    assert [line["$seq"] for line in lines(result.stdout)] == [8]


def test_follow_reports_an_unknown_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return err(404, "topic_not_found", 'topic "jobs" does not exist', {"topic": "jobs"})

    result = run(monkeypatch, handler, "-f", "--from", "0")
    assert result.exit_code == 1
    assert "topic_not_found" in result.stderr


def test_without_follow_tail_reads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return ok(topic_state(3))
        assert request.url.path == "/v0/topics/jobs/diff"
        return ok(
            {
                "topic": "jobs",
                "records": [
                    {"$seq": 2, "$ts": 5, "data": "x", "$tag": "t"},
                    {"$seq": 3, "$ts": 6, "data": None},
                ],
                "next_from_seq": 3,
                "head_seq": 3,
                "earliest_seq": 2,
                "caught_up": True,
                "tombstone": {
                    "gap_from": 1,
                    "gap_to": 1,
                    "reason": "ttl",
                    "missed_estimate": 1,
                    "earliest_seq": 2,
                    "head_seq": 3,
                },
                "lag": 0,
            }
        )

    result = run(monkeypatch, handler, "--last", "3")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout) == [
        {
            "tombstone": {
                "gap_from": 1,
                "gap_to": 1,
                "reason": "ttl",
                "missed_estimate": 1,
                "earliest_seq": 2,
                "head_seq": 3,
            }
        },
        {"$seq": 2, "$ts": 5, "data": "x", "$tag": "t"},
        {"$seq": 3, "$ts": 6, "data": None},
    ]
    assert "jobs: record 1 expired (the topic's TTL); 1 missed" in result.stderr
