"""`watch()` reconnecting: resume with `Last-Event-ID`, re-create after a 404, and backoff.

Every test runs against `Client` and `AsyncClient` (`make_api`). Sleeps are recorded, not
slept; the RNG is fixed at 0.5, so a reconnect after the server's `retry: 2000` waits exactly
2.0 · 2^attempt · 0.75 seconds.
"""

from __future__ import annotations

import httpx
import pytest

from seglog.client import (
    ReconnectPolicy,
    SeglogConnectionError,
    Unauthorized,
    WatchRecord,
    WatchTopicDeleted,
)
from tests.client.conftest import MakeApi, err
from tests.client.watch_fakes import (
    FIRST_DELAY,
    RETRY,
    ScriptedWatchServer,
    Step,
    cursor_id,
    deleted,
    disconnect,
    frame,
    recs,
    seqs_of,
    settle,
    split,
)


async def test_disconnect_mid_frame_resumes_with_last_event_id(make_api: MakeApi) -> None:
    second = recs("jobs", 2, [3])
    server = ScriptedWatchServer(
        [
            Step([RETRY + recs("jobs", 0, [1, 2]) + second[:17]], fail=disconnect()),
            Step(split(RETRY + second + recs("jobs", 3, [4]) + deleted("jobs"), [5])),
        ]
    )
    api = make_api(server)
    events = await api.collect(api.client.watch("jobs"))
    assert seqs_of(events) == [1, 2, 3, 4]
    assert [g.headers["last-event-id"] for g in server.gets] == [
        cursor_id({"jobs": 0}),
        cursor_id({"jobs": 2}),
    ]
    assert api.sleeps == [FIRST_DELAY]
    assert len(server.creates) == 1


async def test_a_resume_never_re_yields_what_was_handed_out(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [
            Step([RETRY + recs("jobs", 0, [1, 2, 3])], fail=disconnect()),
            # A server that rewinds further than Last-Event-ID asked.
            Step([RETRY + recs("jobs", 0, [1, 2, 3, 4]) + recs("jobs", 4, [5]) + deleted("jobs")]),
        ]
    )
    api = make_api(server)
    assert seqs_of(await api.collect(api.client.watch("jobs"))) == [1, 2, 3, 4, 5]


async def test_404_on_resume_creates_a_new_session_from_the_cursors(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [
            Step([RETRY + recs("jobs", 0, [1, 2, 3]) + recs("events", 7, [8])], fail=disconnect()),
            Step(response=err(404, "not_found", "unknown watch session")),
            Step([RETRY + recs("jobs", 3, [4]) + deleted("jobs") + deleted("events")]),
        ]
    )
    api = make_api(server)
    events = await api.collect(
        api.client.watch({"jobs": 0, "events": 7}, topic_nodes={"events": "me"})
    )
    assert [(e.topic, e.seq) for e in events if isinstance(e, WatchRecord)] == [
        ("jobs", 1),
        ("jobs", 2),
        ("jobs", 3),
        ("events", 8),
        ("jobs", 4),
    ]
    assert server.creates[1]["topics"] == {
        "jobs": {"from_seq": 3},
        "events": {"from_seq": 8, "node": "me"},
    }
    assert server.create_params == [{}, {"lenient": "true"}]
    assert server.gets[2].url.path == "/v0/watch/wid_0000000000000000000002"
    assert server.gets[2].headers["last-event-id"] == cursor_id({"events": 8, "jobs": 3})
    assert api.sleeps == [FIRST_DELAY]  # the 404 re-creates at once


async def test_topic_deleted_while_away_is_reported(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [
            Step([RETRY + recs("jobs", 0, [1])], fail=disconnect()),
            Step(response=err(404, "not_found")),
            Step([RETRY + deleted("jobs")]),
        ]
    )
    api = make_api(server)
    w = api.client.watch(["jobs", "gone"])
    await settle(w.open())
    server.drop_on_create = {"gone"}
    events = await api.collect(w)
    assert events[1:] == [WatchTopicDeleted("gone", 0), WatchTopicDeleted("jobs", 0)]
    assert server.creates[1]["topics"] == {"jobs": {"from_seq": 1}, "gone": {"from_seq": 0}}


async def test_shutdown_error_frame_reconnects(make_api: MakeApi) -> None:
    bye = frame("error", {"code": "server_shutting_down", "message": "bye"}, "z")
    server = ScriptedWatchServer(
        [
            Step([RETRY + recs("jobs", 0, [1]) + bye + recs("jobs", 1, [2])]),
            Step([RETRY + recs("jobs", 1, [2]) + deleted("jobs")]),
        ]
    )
    api = make_api(server)
    assert seqs_of(await api.collect(api.client.watch("jobs"))) == [1, 2]
    assert server.gets[1].headers["last-event-id"] == cursor_id({"jobs": 1})
    assert api.sleeps == [FIRST_DELAY]


async def test_server_errors_back_off_and_honour_retry_after(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [
            Step(response=err(503, "not_ready", retry_after=1)),
            Step(response=err(500, "internal")),
            Step(response=httpx.Response(502, text="bad gateway")),
            Step([RETRY + recs("jobs", 0, [1]) + deleted("jobs")]),
        ]
    )
    api = make_api(server)
    assert seqs_of(await api.collect(api.client.watch("jobs"))) == [1]
    # Retry-After, then the policy's initial 1 s (no `retry:` seen yet) · 2^1 and · 2^2.
    assert api.sleeps == [1.0, 1.0 * 2 * 0.75, 1.0 * 4 * 0.75]


async def test_backoff_grows_is_capped_and_gives_up(make_api: MakeApi) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return server(request)
        raise httpx.ConnectError("connection refused")

    server = ScriptedWatchServer([])
    api = make_api(refuse)
    policy = ReconnectPolicy(initial=1.0, max_delay=5.0, attempts=4)
    with pytest.raises(SeglogConnectionError, match="ConnectError"):
        await api.collect(api.client.watch("jobs", reconnect=policy))
    assert api.sleeps == [0.75, 1.5, 3.0, 5.0 * 0.75]


async def test_the_servers_retry_sets_the_backoff_base(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [
            Step([b"retry:500\n\n" + recs("jobs", 0, [1])], fail=disconnect()),
            Step([], fail=disconnect()),
            Step([b"retry: 8000\n\n"], fail=disconnect()),
            Step([RETRY + deleted("jobs")]),
        ]
    )
    api = make_api(server)
    await api.collect(api.client.watch("jobs"))
    # 0.5 s · 2^0, 0.5 s · 2^1, then the new 8 s · 2^2 = 32 s, capped at max_delay 30 s.
    assert api.sleeps == [0.5 * 0.75, 1.0 * 0.75, 30.0 * 0.75]


async def test_after_a_good_frame_the_backoff_restarts(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [
            Step([RETRY], fail=disconnect()),
            Step([RETRY + recs("jobs", 0, [1])], fail=disconnect()),
            Step([RETRY + deleted("jobs")]),
        ]
    )
    api = make_api(server)
    await api.collect(api.client.watch("jobs"))
    assert api.sleeps == [FIRST_DELAY, FIRST_DELAY]


async def test_a_silent_stream_times_out_and_reconnects(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [
            Step([RETRY + recs("jobs", 0, [1])], fail=httpx.ReadTimeout("no heartbeat")),
            Step([RETRY + deleted("jobs")]),
        ]
    )
    api = make_api(server, timeout=3.0)
    assert seqs_of(await api.collect(api.client.watch("jobs", heartbeat_ms=2000))) == [1]
    assert api.sleeps == [FIRST_DELAY]
    # Two missed heartbeats plus slack, not the client's 3 s request timeout.
    timeouts = server.gets[0].extensions["timeout"]
    assert timeouts["read"] == 2 * 2.0 + 5.0 and timeouts["connect"] == 3.0


async def test_a_clean_end_with_topics_left_reconnects(make_api: MakeApi) -> None:
    server = ScriptedWatchServer(
        [Step([RETRY + recs("jobs", 0, [1])]), Step([RETRY + deleted("jobs")])]
    )
    api = make_api(server)
    assert seqs_of(await api.collect(api.client.watch("jobs"))) == [1]
    assert api.sleeps == [FIRST_DELAY]


async def test_unauthorized_stream_raises_without_retry(make_api: MakeApi) -> None:
    server = ScriptedWatchServer([Step(response=err(401, "unauthorized"))])
    api = make_api(server)
    with pytest.raises(Unauthorized):
        await api.collect(api.client.watch("jobs"))
    assert api.sleeps == []


def test_reconnect_policy_is_validated() -> None:
    with pytest.raises(ValueError, match="ReconnectPolicy"):
        ReconnectPolicy(initial=-1)
    with pytest.raises(ValueError, match="ReconnectPolicy"):
        ReconnectPolicy(attempts=-1)
