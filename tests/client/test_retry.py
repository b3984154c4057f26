"""Retry policy: refusals (429/503) are retried for every request with Retry-After honoured;
broken connections are retried only for idempotent requests; sleeps go through the injected
sleep, so nothing here really waits."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from seglog.client import (
    InternalError,
    NotReady,
    SeglogConnectionError,
    SeglogHTTPError,
    SeglogProtocolError,
    SeglogTimeoutError,
    Throttled,
    Unauthorized,
)
from seglog.client._base import RequestSpec, RetryPolicy
from tests.client.conftest import FixedRng, MakeApi, body_of, err, ok

HEALTH = {"status": "ok", "version": "0.1.0", "uptime_ms": 1}
READY = {"status": "ready", "wal_replay_complete": True, "topics": 0}
APPENDED = {
    "topic": "t",
    "first_seq": 1,
    "last_seq": 1,
    "seqs": [1],
    "head_seq": 1,
    "count": 1,
    "created": False,
    "deduped": False,
    "performance": {"server_total_ms": 0.0},
}

Step = Callable[[httpx.Request], httpx.Response]


def script(*steps: Step) -> Callable[[httpx.Request], httpx.Response]:
    """Answer the n-th request with the n-th step; the last step repeats."""
    calls = iter(range(1_000_000))

    def handler(req: httpx.Request) -> httpx.Response:
        return steps[min(next(calls), len(steps) - 1)](req)

    return handler


def refused(req: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=req)


def reset(req: httpx.Request) -> httpx.Response:
    raise httpx.ReadError("connection reset by peer", request=req)


def respond(body: object, status: int = 200) -> Step:
    return lambda _req: ok(body, status)


def refuse(status: int, code: str, retry_after: int | None = None) -> Step:
    return lambda _req: err(status, code, "refused", {"limit": "max_topics"}, retry_after)


async def test_throttled_then_ok_honours_retry_after(make_api: MakeApi) -> None:
    api = make_api(script(refuse(429, "throttled", 1), respond(HEALTH)))
    assert (await api("health")).status == "ok"
    assert len(api.requests) == 2
    assert api.sleeps == [1.0]


async def test_not_ready_retry_after_is_capped(make_api: MakeApi) -> None:
    api = make_api(script(refuse(503, "not_ready", 30), respond(HEALTH)), max_backoff=0.5)
    await api("health")
    assert api.sleeps == [2.0]  # min(30, 4 × max_backoff)


async def test_backoff_without_retry_after_is_exponential_full_jitter(make_api: MakeApi) -> None:
    steps = [refuse(503, "shutting_down")] * 6 + [respond(HEALTH)]
    api = make_api(script(*steps), retries=6, backoff=0.1, max_backoff=1.0, rng=FixedRng(0.5))
    await api("health")
    assert api.sleeps == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5, 0.5])


async def test_retries_are_bounded(make_api: MakeApi) -> None:
    api = make_api(script(refuse(429, "throttled", 1)), retries=3)
    with pytest.raises(Throttled) as info:
        await api("health")
    assert info.value.retry_after == 1.0 and info.value.detail == {"limit": "max_topics"}
    assert len(api.requests) == 4 and api.sleeps == [1.0, 1.0, 1.0]


async def test_proxy_503_without_envelope_is_retried(make_api: MakeApi) -> None:
    api = make_api(script(lambda _r: httpx.Response(503, text="upstream down"), respond(HEALTH)))
    await api("health")
    assert len(api.requests) == 2


@pytest.mark.parametrize(
    ("status", "code"), [(500, "internal"), (401, "unauthorized"), (400, "invalid_request")]
)
async def test_other_errors_are_not_retried(make_api: MakeApi, status: int, code: str) -> None:
    api = make_api(script(refuse(status, code, 1), respond(HEALTH)))
    with pytest.raises((InternalError, Unauthorized, SeglogHTTPError)):
        await api("health")
    assert len(api.requests) == 1 and api.sleeps == []


async def test_keyless_append_is_retried_on_refusal(make_api: MakeApi) -> None:
    # A 429 is a refusal before anything was applied: safe to resend even without a key.
    api = make_api(script(refuse(429, "throttled", 1), respond(APPENDED)))
    await api("append", "t", [{"data": 1}])
    assert len(api.requests) == 2


@pytest.mark.parametrize("failure", [refused, reset])
async def test_keyless_append_is_not_retried_on_connection_error(
    make_api: MakeApi, failure: Step
) -> None:
    api = make_api(script(failure, respond(APPENDED)))
    with pytest.raises(SeglogConnectionError) as info:
        await api("append", "t", [{"data": 1}])
    assert "POST /v0/topics/t" in str(info.value)
    assert len(api.requests) == 1 and api.sleeps == []


async def test_keyed_append_is_retried_on_connection_error(make_api: MakeApi) -> None:
    api = make_api(script(reset, refused, respond(APPENDED)))
    res = await api("append", "t", [{"data": 1}], idempotency_key="batch-1")
    assert res.first_seq == 1
    assert len(api.requests) == 3
    assert all(body_of(r)["idempotency_key"] == "batch-1" for r in api.requests)
    assert len(api.sleeps) == 2


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("health", ()),
        ("get_topic", ("t",)),
        ("put_topic", ("t",)),
        ("delete_topic", ("t",)),
        ("diff", ("t",)),
    ],
)
async def test_idempotent_requests_are_retried_on_connection_error(
    make_api: MakeApi, method: str, args: tuple[str, ...]
) -> None:
    api = make_api(script(refused, reset, lambda _r: httpx.Response(200, content=b"{}")))
    with pytest.raises(SeglogProtocolError):
        await api(method, *args)  # the body is bogus; what matters is that it was reached
    assert len(api.requests) == 3


async def test_delete_records_is_not_retried_on_connection_error(make_api: MakeApi) -> None:
    api = make_api(script(reset))
    with pytest.raises(SeglogConnectionError):
        await api("delete_records", "t", match="x")
    assert len(api.requests) == 1


async def test_connection_retries_are_bounded(make_api: MakeApi) -> None:
    api = make_api(script(refused), retries=2)
    with pytest.raises(SeglogConnectionError):
        await api("health")
    assert len(api.requests) == 3


async def test_read_timeout_is_not_retried(make_api: MakeApi) -> None:
    def slow(req: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=req)

    api = make_api(script(slow, respond(HEALTH)))
    with pytest.raises(SeglogTimeoutError):
        await api("health")
    assert len(api.requests) == 1


async def test_ready_is_a_single_probe(make_api: MakeApi) -> None:
    api = make_api(lambda _r: err(503, "not_ready", "replaying", {"replay_progress": 0.4}, 1))
    with pytest.raises(NotReady) as info:
        await api("ready")
    assert info.value.replay_progress == 0.4 and info.value.retry_after == 1.0
    assert len(api.requests) == 1 and api.sleeps == []


async def test_wait_ready_polls_through_refused_and_not_ready(make_api: MakeApi) -> None:
    api = make_api(
        script(refused, refused, refuse(503, "not_ready", 1), respond(READY)),
        backoff=0.1,
        rng=FixedRng(1.0),
    )
    assert (await api("wait_ready", timeout=10)).status == "ready"
    assert [r.url.path for r in api.requests] == ["/v0/ready"] * 4
    assert api.sleeps == pytest.approx([0.1, 0.2, 1.0])


async def test_wait_ready_gives_up_after_timeout(make_api: MakeApi) -> None:
    api = make_api(script(refuse(503, "not_ready", 1)))
    with pytest.raises(NotReady):
        await api("wait_ready", timeout=2.5)
    assert sum(api.sleeps) == pytest.approx(2.5)
    assert api.sleeps[-1] == pytest.approx(0.5)


async def test_wait_ready_raises_other_errors_at_once(make_api: MakeApi) -> None:
    api = make_api(script(refuse(401, "unauthorized")))
    with pytest.raises(Unauthorized):
        await api("wait_ready")
    assert len(api.requests) == 1


def test_policy_is_pure() -> None:
    policy = RetryPolicy(retries=2, backoff=1.0, max_backoff=3.0)
    get = RequestSpec("GET", "/x")
    post = RequestSpec("POST", "/x", idempotent=False)
    probe = RequestSpec("GET", "/x", retry=False)
    throttled = Throttled(429, "throttled", "m", None, 0.0)
    conn = httpx.ConnectError("refused")
    rng = FixedRng(1.0)
    assert policy.delay(get, 0, throttled, rng) == 0.0
    assert policy.delay(post, 1, throttled, rng) == 0.0
    assert policy.delay(get, 2, throttled, rng) is None  # retries used up
    assert policy.delay(probe, 0, throttled, rng) is None
    assert [policy.delay(get, n, conn, rng) for n in range(2)] == [1.0, 2.0]
    assert policy.delay(post, 0, conn, rng) is None
    assert policy.delay(get, 0, httpx.ReadTimeout("slow"), rng) is None
    assert policy.delay(get, 0, InternalError(500, "internal", "m"), rng) is None
    assert policy.wait(60, None, rng) == 3.0  # capped at max_backoff
    assert policy.wait(0, 100.0, rng) == 12.0  # Retry-After capped at 4 × max_backoff
