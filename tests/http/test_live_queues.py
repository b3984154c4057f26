"""Black-box: lease queues over HTTP (API §9.1–§9.4, SEMANTICS §10) against a real server:
response shapes, check orders, scopes, the claim cohort window, dead-lettering, queue
counters in state and metrics, and acked jobs that never come back across a SIGKILL."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.http.conftest import ServerFactory
from tests.http.live import JSON, data_records, describe, error_of, ok, put_topic, state, write
from tests.http.test_live_watch import Frame, SseConn
from tests.support.server import ServerProcess

Names = Callable[[str], str]


def queue(c: httpx.Client, name: str, **cfg: Any) -> None:
    put_topic(c, name, {"type": "queue", **cfg})


def claim(c: httpx.Client, name: str, node: str = "w1", **body: Any) -> dict[str, Any]:
    return ok(c.post(f"/v0/topics/{name}/claim", json={"node": node, **body}))


def settle(c: httpx.Client, verb: str, name: str, node: str, seqs: list[int], **body: Any) -> Any:
    return ok(c.post(f"/v0/topics/{name}/{verb}", json={"node": node, "seqs": seqs, **body}))


def test_claim_ack_nack_extend_round_trip(client: httpx.Client, topic: str) -> None:
    queue(client, topic)
    records = [
        {"data": {"type": "resize", "n": 1}, "meta": {"trace": "z9"}, "tag": "tenant42:job-1"},
        {"data": 2, "node": "origin-node"},
        {"data": 3},
    ]
    write(client, topic, records)
    got = claim(client, topic, max=2, lease_ms=30_000)
    assert list(got) == ["topic", "claimed", "count", "ready", "performance"]
    assert got["topic"] == topic and got["count"] == 2 and got["ready"] == 1
    first, second = got["claimed"]
    assert list(first) == [
        "$seq", "lease_id", "deadline", "$ts", "$tag", "deliveries", "data", "meta",
    ]  # fmt: skip
    assert first["$seq"] == 1 and first["data"] == {"type": "resize", "n": 1}
    assert first["meta"] == {"trace": "z9"} and first["$tag"] == "tenant42:job-1"
    assert first["deliveries"] == 1 and first["lease_id"].startswith("lease_")
    assert int(first["lease_id"][6:], 16) > 0 and first["lease_id"] == first["lease_id"].lower()
    assert first["deadline"] - first["$ts"] >= 30_000 - 5_000
    assert list(second) == ["$seq", "lease_id", "deadline", "$ts", "deliveries", "data"]  # no $node

    ext = settle(client, "extend", topic, "w1", [1, 3], lease_ms=60_000)
    assert list(ext) == ["topic", "extended", "skipped", "deadlines", "performance"]
    assert ext["extended"] == 1 and ext["skipped"] == [3]
    assert list(ext["deadlines"]) == ["1"] and ext["deadlines"]["1"] > first["deadline"]

    nack = settle(client, "nack", topic, "w1", [2])
    assert list(nack) == ["topic", "nacked", "skipped", "ready", "in_flight", "performance"]
    assert (nack["nacked"], nack["ready"], nack["in_flight"]) == (1, 2, 1)

    again = claim(client, topic, node="w2", max=10)
    assert [(j["$seq"], j["deliveries"]) for j in again["claimed"]] == [(2, 2), (3, 1)]
    assert again["ready"] == 0

    acked = settle(
        client, "ack", topic, "w1", [1, 2], lease_ids=[first["lease_id"], ""]
    )  # 2 is w2's now
    assert list(acked) == ["topic", "acked", "skipped", "ready", "in_flight", "performance"]
    assert (acked["acked"], acked["skipped"], acked["in_flight"]) == (1, [2], 2)
    fenced = settle(client, "ack", topic, "w2", [2, 3], lease_ids=["lease_ffff", ""])
    assert fenced["acked"] == 1 and fenced["skipped"] == [2]  # wrong fence for 2
    for never in ("lease_0", "lease_000"):  # no lease has id 0: a fence, not a wildcard
        assert settle(client, "nack", topic, "w2", [2], lease_ids=[never])["skipped"] == [2]
    assert settle(client, "ack", topic, "w2", [3])["skipped"] == [3]  # re-ack is harmless
    seqs = [r["$seq"] for r in ok(client.post(f"/v0/topics/{topic}/diff", json={}))["records"]]
    assert seqs == [2]  # acks deleted 1 and 3 from the jobs log
    q = state(client, topic)["queue"]
    assert q == {"ready": 0, "in_flight": 1, "dead_lettered": 0}


def test_queue_state_list_and_metrics(client: httpx.Client, tname: Names) -> None:
    q, log = tname("q"), tname("log")
    queue(client, q)
    write(client, q, data_records(1, 2, 3))
    write(client, log, data_records(1))
    claim(client, q, max=1)
    assert state(client, q)["queue"] == {"ready": 2, "in_flight": 1, "dead_lettered": 0}
    assert "queue" not in state(client, log)
    text = client.get("/v0/metrics").text
    values = {
        (s.name, s.labels.get("topic")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert values[("topics_topic_queue_ready", q)] == 2
    assert values[("topics_topic_queue_in_flight", q)] == 1
    assert ("topics_topic_queue_ready", log) not in values
    assert values[("topics_queue_leases_in_flight", None)] >= 1


def test_claim_check_order(client: httpx.Client, tname: Names) -> None:
    q, log, absent = tname("q"), tname("log"), tname("absent")
    queue(client, q)
    write(client, log, data_records(1))
    url = f"/v0/topics/{absent}/claim"
    error_of(client.post(url, content=b""), 400, "invalid_request")  # empty body first
    error_of(client.post(url, content=b"{}", headers={"Content-Type": "text/plain"}), 415,
             "unsupported_media_type")  # fmt: skip
    error_of(client.post(url, json={}), 400, "invalid_request")  # node missing: at parse
    error_of(client.post(url, json={"node": 5}), 400, "invalid_request")
    error_of(client.post(url, json={"node": ""}), 404, "topic_not_found", detail={"topic": absent})
    error_of(
        client.post(f"/v0/topics/{log}/claim", json={"node": ""}),
        409,
        "not_a_queue",
        detail={"topic": log},
    )
    error_of(client.post(f"/v0/topics/{q}/claim", json={"node": ""}), 400, "invalid_request")
    error_of(client.post(f"/v0/topics/{q}/claim", json={"node": "n" * 129}), 400, "invalid_request")
    error_of(client.post(f"/v0/topics/{q}/claim", json={"node": "n", "max": -1}), 400,
             "invalid_request")  # fmt: skip
    assert not client.get(f"/v0/topics/{absent}").is_success  # never auto-created
    error_of(client.get(f"/v0/topics/{q}/claim"), 405, "method_not_allowed")


def test_claim_max_and_lease_are_clamped(client: httpx.Client, topic: str) -> None:
    queue(client, topic)
    write(client, topic, data_records(*range(1005)))
    got = claim(client, topic, max=5000, lease_ms=1)
    assert got["count"] == 1000
    job = got["claimed"][0]
    assert 100 <= job["deadline"] - job["$ts"] < 100 + 60_000  # clamped up to 100 ms
    assert claim(client, topic, max=0)["count"] == 1  # 0 means 1


def test_settle_validation_precedes_topic_lookup(client: httpx.Client, tname: Names) -> None:
    absent, log = tname("absent"), tname("log")
    write(client, log, data_records(1))
    for verb in ("ack", "nack", "extend"):
        url = f"/v0/topics/{absent}/{verb}"
        extra = {"lease_ms": 1000} if verb == "extend" else {}
        error_of(client.post(url, json={"seqs": [1], **extra}), 400, "invalid_request")
        error_of(client.post(url, json={"node": "", "seqs": [1], **extra}), 400, "invalid_request")
        error_of(client.post(url, json={"node": "w", **extra}), 400, "invalid_request")
        error_of(
            client.post(url, json={"node": "w", "seqs": list(range(1001)), **extra}),
            400,
            "batch_too_large",
            detail={"seqs": 1001, "max": 1000},
        )
        error_of(
            client.post(url, json={"node": "w", "seqs": [1, 2], "lease_ids": ["lease_1"], **extra}),
            400,
            "invalid_request",
        )
        for bad in (
            "lease_",
            "lease_XYZ",
            "lease_1A",
            "1f",
            "lease_-1",
            "lease_1\n",
            "lease_\u0661",
        ):
            r = client.post(url, json={"node": "w", "seqs": [1], "lease_ids": [bad], **extra})
            error_of(r, 400, "invalid_request")
        error_of(client.post(url, json={"node": "w", "seqs": [-1], **extra}), 400,
                 "invalid_request")  # fmt: skip
        error_of(client.post(url, json={"node": "w", "seqs": [1], **extra}), 404,
                 "topic_not_found")  # fmt: skip
        error_of(client.post(f"/v0/topics/{log}/{verb}", json={"node": "w", "seqs": [], **extra}),
                 409, "not_a_queue")  # fmt: skip
    error_of(client.post(f"/v0/topics/{absent}/extend", json={"node": "w", "seqs": [1]}), 400,
             "invalid_request")  # lease_ms is required  # fmt: skip


def test_empty_seqs_and_lease_ids_are_fine(client: httpx.Client, topic: str) -> None:
    queue(client, topic)
    write(client, topic, data_records(1))
    assert settle(client, "ack", topic, "w", [], lease_ids=[])["acked"] == 0
    job = claim(client, topic)["claimed"][0]
    assert (
        settle(client, "nack", topic, "w1", [1], lease_ids=[job["lease_id"]], delay_ms=10**15)[
            "nacked"
        ]
        == 1
    )  # delay clamped to a day
    assert claim(client, topic)["count"] == 0 and state(client, topic)["queue"]["ready"] == 0


def test_dead_letter_over_http(client: httpx.Client, tname: Names) -> None:
    q, dlq = tname("q"), tname("dlq")
    queue(client, q, max_deliveries=1, dead_letter=dlq, lease_ms=100)
    write(client, q, [{"data": {"job": 1}, "meta": {"m": 1}, "tag": "t", "node": "n1"}])
    job = claim(client, q)["claimed"][0]
    settle(client, "nack", q, "w1", [job["$seq"]])
    again = claim(client, q)
    assert again["count"] == 0 and again["ready"] == 0
    assert state(client, q)["queue"]["dead_lettered"] == 1
    rec = ok(
        client.post(f"/v0/topics/{dlq}/diff", json={"include_meta": True, "include_tags": True})
    )
    (copy,) = rec["records"]
    assert copy["data"] == {"job": 1} and copy["$node"] == "n1" and copy["$tag"] == "t"
    assert copy["meta"] == {
        "m": 1,
        "$dead_letter_from": q,
        "$dead_letter_deliveries": "1",
        "$dead_letter_src_seq": "1",
    }
    assert ok(client.post(f"/v0/topics/{q}/diff", json={}))["records"] == []


def test_claim_cohort_window_shares_jobs_evenly(client: httpx.Client, topic: str) -> None:
    """SEMANTICS §10.3's example: 10 claimers × max 10 over 50 jobs ⇒ 5 each. The window is
    wide (2 s) so that all ten requests, sent at once, land inside it."""
    queue(client, topic, claim_jitter_ms=2000)
    write(client, topic, data_records(*range(50)))
    counts: dict[str, int] = {}
    seqs: Counter[int] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(10)

    def worker(i: int) -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=30) as c:
            start.wait()
            got = claim(c, topic, node=f"w{i}", max=10)
        with lock:
            counts[f"w{i}"] = got["count"]
            seqs.update(j["$seq"] for j in got["claimed"])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 51)) and max(seqs.values()) == 1
    assert sorted(counts.values()) == [5] * 10, counts


# --------------------------------------------------------------------------- scopes

KEYS = "full, ronly:r, wonly:w, rw:rw:jobs.|shared., adm:a"


@pytest.fixture(scope="module")
def auth_server() -> Iterator[ServerProcess]:
    srv = ServerProcess(env={"SEGLOG_API_KEYS": KEYS})
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def test_scopes_on_every_queue_route(auth_server: ServerProcess) -> None:
    def h(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    with httpx.Client(base_url=auth_server.url, timeout=15) as c:
        ok(c.put("/v0/topics/jobs.a", json={"type": "queue"}, headers=h("full")), 201)
        ok(c.put("/v0/topics/other.a", json={"type": "queue"}, headers=h("full")), 201)
        r = c.post("/v0/topics/jobs.a", json={"records": data_records(1, 2)}, headers=h("full"))
        assert r.status_code == 200, describe(r)
        body = {"node": "w", "seqs": [1]}
        for verb, needs in (("claim", ("ronly", "wonly", "adm")), ("ack", ("ronly", "adm")),
                            ("nack", ("ronly", "adm")), ("extend", ("ronly", "adm"))):  # fmt: skip
            payload = {**body, "lease_ms": 1000} if verb == "extend" else body
            for key in needs:
                r = c.post(f"/v0/topics/jobs.a/{verb}", json=payload, headers=h(key))
                error_of(r, 403, "forbidden")
            r = c.post(f"/v0/topics/other.a/{verb}", json=payload, headers=h("rw"))
            error_of(r, 403, "forbidden", detail={"topic": "other.a"})
            r = c.post(f"/v0/topics/jobs.a/{verb}", json=payload)
            error_of(r, 401, "unauthorized")
        got = ok(c.post("/v0/topics/jobs.a/claim", json={"node": "w"}, headers=h("rw")))
        assert got["count"] == 1
        acked = c.post("/v0/topics/jobs.a/ack", json=body, headers=h("wonly"))
        assert ok(acked)["acked"] == 1


# --------------------------------------------------------------------------- crashes


@pytest.mark.parametrize("durable_leases", [False, True], ids=["leases", "durable-leases"])
def test_sigkill_never_brings_back_an_acked_job(
    make_server: ServerFactory, durable_leases: bool
) -> None:
    srv = make_server()
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        put_topic(c, "jobs", {"type": "queue", "durability": "fsync",
                              "leases_durable": durable_leases, "lease_ms": 600_000})  # fmt: skip
        write(c, "jobs", data_records(*range(300)))
        acked: list[int] = []
        held: list[int] = []
        for _ in range(10):
            got = [j["$seq"] for j in claim(c, "jobs", node="w", max=20)["claimed"]]
            acked += got[:15]
            held += got[15:]
            ok(c.post("/v0/topics/jobs/ack", json={"node": "w", "seqs": got[:15]}, headers=JSON))
        srv.kill()
    srv.start()
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        live = [
            r["$seq"] for r in ok(c.post("/v0/topics/jobs/diff", json={"limit": 1000}))["records"]
        ]
        assert not set(live) & set(acked) and len(live) == 300 - len(acked)
        handed: list[int] = []
        while got := [j["$seq"] for j in claim(c, "jobs", node="x", max=1000)["claimed"]]:
            handed += got
        if durable_leases:  # w still holds its unacked jobs; everything else is handed out
            assert sorted(handed) == sorted(set(live) - set(held))
            res = ok(c.post("/v0/topics/jobs/ack", json={"node": "w", "seqs": held}))
            assert res["acked"] == len(held)
        else:  # every unacked job is claimable again
            assert sorted(handed) == live


# --------------------------------------------------------------------------- /work


def work(server: ServerProcess, name: str, query: str, **kw: Any) -> SseConn:
    return SseConn(server.address, f"/v0/topics/{name}/work?{query}", **kw)


def jobs_of(frames: list[Frame]) -> list[int]:
    return [f.data["$seq"] for f in frames if f.event == "job"]


def test_work_stream_pushes_refills_and_releases(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    queue(client, topic)
    write(client, topic, [{"data": {"n": 1}, "meta": {"m": 1}, "tag": "x"}, *data_records(2, 3)])
    conn = work(server, topic, "node=pusher&max=2")
    assert conn.headers["content-type"].startswith("text/event-stream")
    first = conn.next_frame()
    assert first is not None and first.retry == 2000
    frames = conn.read_until(lambda f: f.event == "job" and f.data["$seq"] == 2)
    job = frames[0].data
    assert frames[0].id == "1" and list(job) == [
        "topic", "$seq", "lease_id", "deadline", "$ts", "$tag", "deliveries", "data", "meta",
    ]  # fmt: skip
    assert (job["topic"], job["data"], job["meta"], job["deliveries"]) == (
        topic,
        {"n": 1},
        {"m": 1},
        1,
    )
    assert state(client, topic)["queue"]["in_flight"] == 2
    # acking one job makes room: the stream refills with the next one
    assert settle(client, "ack", topic, "pusher", [1])["acked"] == 1
    assert jobs_of(conn.read_until(lambda f: f.event == "job")) == [3]
    # nothing left: a new append is pushed at once
    settle(client, "ack", topic, "pusher", [2])
    write(client, topic, data_records(4))
    assert jobs_of(conn.read_until(lambda f: f.event == "job")) == [4]
    # a polling claim by the same node is its own lease; closing the stream releases only
    # the stream's leases, at once
    write(client, topic, data_records(5))
    assert [j["$seq"] for j in claim(client, topic, node="pusher")["claimed"]] == [5]
    conn.close()
    deadline = time.monotonic() + 10
    while state(client, topic)["queue"]["in_flight"] != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    got = claim(client, topic, node="other", max=10)
    assert [j["$seq"] for j in got["claimed"]] == [3, 4]
    assert [j["deliveries"] for j in got["claimed"]] == [2, 2]


def test_work_stream_checks(server: ServerProcess, client: httpx.Client, tname: Names) -> None:
    q, log, absent = tname("q"), tname("log"), tname("absent")
    queue(client, q)
    write(client, log, data_records(1))
    work(server, absent, "node=w", accept="application/json").error(406, "not_acceptable")
    work(server, absent, "max=3").error(400, "invalid_request")
    work(server, absent, "node=" + "n" * 129).error(400, "invalid_request")
    work(server, absent, "node=w").error(404, "topic_not_found")
    work(server, log, "node=w").error(409, "not_a_queue")
    error_of(client.post(f"/v0/topics/{q}/work"), 405, "method_not_allowed")
    # A HEAD reads no body: it must not open a stream that leases (and counts a delivery
    # of) jobs nobody will see.
    write(client, q, data_records(1))
    head = client.head(f"/v0/topics/{q}/work?node=w", headers={"accept": "text/event-stream"})
    assert head.status_code == 405
    (job,) = claim(client, q, node="x")["claimed"]
    assert job["deliveries"] == 1


def test_work_stream_ends_when_the_topic_goes(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    queue(client, topic)
    conn = work(server, topic, "node=w&max=abc")  # unparseable max ⇒ 1
    assert conn.next_frame() is not None  # retry
    ok(client.delete(f"/v0/topics/{topic}"))
    (err,) = conn.read_until(lambda f: f.event == "error")
    assert err.data == {"code": 409, "error": "topic is no longer a queue", "topic": topic}
    assert conn.next_frame() is None  # closed


def test_work_stream_auth_and_token_query(auth_server: ServerProcess) -> None:
    with httpx.Client(base_url=auth_server.url, timeout=15) as c:
        ok(
            c.put(
                "/v0/topics/jobs.w",
                json={"type": "queue"},
                headers={"Authorization": "Bearer full"},
            ),
            201,
        )
        c.post(
            "/v0/topics/jobs.w",
            json={"records": data_records(1)},
            headers={"Authorization": "Bearer full"},
        )
    work(auth_server, "jobs.w", "node=w").error(401, "unauthorized")
    work(auth_server, "jobs.w", "node=w&token=ronly").error(403, "forbidden")
    work(auth_server, "jobs.w", "node=w&token=wonly").error(403, "forbidden")
    work(auth_server, "other.w", "node=w&token=rw").error(403, "forbidden")
    conn = work(auth_server, "jobs.w", "node=w&token=rw")
    assert jobs_of(conn.read_until(lambda f: f.event == "job")) == [1]
    conn.close()
    bearer = work(auth_server, "jobs.w", "node=w", headers={"Authorization": "Bearer full"})
    assert bearer.status == 200
    bearer.close()


def test_work_stream_says_goodbye_on_shutdown(make_server: ServerFactory) -> None:
    srv = make_server()
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        queue(c, "jobs", lease_ms=600_000)
        write(c, "jobs", data_records(1, 2))
    conn = work(srv, "jobs", "node=w&max=1")
    assert jobs_of(conn.read_until(lambda f: f.event == "job")) == [1]
    assert srv.proc is not None
    srv.proc.send_signal(signal.SIGTERM)
    (bye,) = conn.read_until(lambda f: f.event == "error")
    assert bye.data == {
        "code": "server_shutting_down",
        "error": "server is shutting down; reconnect",
        "topic": "jobs",
    }
    assert conn.next_frame() is None
    assert srv.stop() == 0


def test_an_fsync_queue_ack_reports_its_fsync(
    client: httpx.Client, tname: Callable[..., str]
) -> None:
    """API §0.7/§9.2: `fsync_ms` on an ack when it waited for one (> 0), absent otherwise."""
    for durability, reported in (("fsync", True), ("disk", False)):
        q = tname(durability)
        queue(client, q, durability=durability)
        write(client, q, data_records(1, 2))
        jobs = claim(client, q, max=2)["claimed"]
        r = client.post(
            f"/v0/topics/{q}/ack", json={"node": "w1", "seqs": [j["$seq"] for j in jobs]}
        )
        perf = ok(r)["performance"]
        assert ("fsync_ms" in perf) is reported, perf
        if reported:
            assert perf["fsync_ms"] > 0
