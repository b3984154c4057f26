"""Topic config against concurrent writes and deletes, retention at the PUT, and the
per-key in-flight cap on `/work` (API §2.1, §3, §11; SEMANTICS §2.1, §4.2)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from seglog.core.frames import FrameType
from seglog.errors import SeglogError
from seglog.model import RecordIn, TopicConfig, TopicType
from tests.conftest import EngineFactory
from tests.http.live import data_records, diff, ok, put_topic, state, write
from tests.support.server import ServerProcess

Names = Callable[[str], str]


def _parallel(fns: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run every fn in its own thread, released together; their results in order."""
    out: list[Any] = [None] * len(fns)
    gate = threading.Barrier(len(fns))

    def run(i: int) -> None:
        gate.wait()
        out[i] = fns[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


# ----------------------------------------------------------------- config vs. auto-create


def test_concurrent_autocreating_writes_keep_an_acked_put_config(
    server: ServerProcess, tname: Names
) -> None:
    """API §3 (`config`: "used only if this write creates the topic"), API §0.10/§2.1 (a 2xx
    PUT stores its config), SEMANTICS §2.1 (a write creates a topic only when it is absent).

    `Engine.write_begin` looks the topic up without a
    lock, finds it absent, and then calls `put_topic(name, default_or_inline_config)`. If a
    PUT created the topic in between (it holds the registry lock across its durable
    TopicCreate), that `put_topic` takes the *update* path and replaces the acknowledged
    config wholesale with the write's default config. A PUT that answered 2xx with
    `cap_records: 3, durability: fsync` then finds its config silently reset to defaults.
    """
    wanted = {"cap_records": 3, "durability": "fsync", "idempotency_window_ms": 5}
    lost: list[tuple[str, dict[str, Any]]] = []
    for trial in range(40):
        topic = tname(f"t{trial}")

        def put(topic: str = topic) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=30) as c:
                return c.put(f"/v0/topics/{topic}", json=wanted)

        def post(topic: str = topic) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=30) as c:
                return c.post(f"/v0/topics/{topic}", json={"records": data_records(1)})

        res = _parallel([put] + [post] * 8)
        assert res[0].status_code in (200, 201), res[0].text
        for r in res[1:]:
            assert r.status_code in (200, 201), r.text
        with httpx.Client(base_url=server.url) as c:
            cfg = state(c, topic)["config"]
        got = {k: cfg[k] for k in wanted}
        if got != wanted:
            lost.append((topic, got))
            break
    assert not lost, f"a 2xx PUT's config was replaced by a concurrent write's: {lost}"


def _hold_first_topic_create(e: Any) -> tuple[threading.Event, threading.Event]:
    """Make `e`'s first durable TopicCreate wait (inside the registry lock, before the
    topic is registered) until the returned `release` is set; `entered` is set then."""
    real = e.log_durable
    entered, release = threading.Event(), threading.Event()

    def held(topic_id: int, ftype: FrameType, body: bytes) -> None:
        if ftype is FrameType.TOPIC_CREATE and not entered.is_set():
            entered.set()
            release.wait(10)
        real(topic_id, ftype, body)

    e.log_durable = held
    return entered, release


def test_an_autocreating_write_racing_a_put_keeps_the_put_config(
    make_engine: EngineFactory,
) -> None:
    """The deterministic form of the race above: the PUT is held in its
    durable TopicCreate; a default write meanwhile finds the topic absent and, once the PUT
    registered it, replaces the PUT's acknowledged config with the default one."""
    e = make_engine()
    entered, release = _hold_first_topic_create(e)
    wanted = TopicConfig(cap_records=3, idempotency_window_ms=5)
    out: dict[str, Any] = {}
    tp = threading.Thread(target=lambda: out.update(put=e.put_topic("ev", wanted)))
    tp.start()
    assert entered.wait(10)
    tw = threading.Thread(target=lambda: out.update(write=e.write("ev", [RecordIn.of(1)])))
    tw.start()
    time.sleep(0.3)  # the write is now waiting for the registry lock
    release.set()
    tp.join(10)
    tw.join(10)
    assert out["put"].created is True and out["write"].seqs == [1]
    assert e.topics["ev"].config == wanted


def test_an_autocreating_write_racing_a_queue_put_is_not_409(make_engine: EngineFactory) -> None:
    """API §3 (a write to an existing topic appends; its errors are §3's), §0.6
    (`topic_exists_incompatible` is for a *type change* on PUT and router conflicts).

    Same root cause as above, made deterministic: the PUT of a queue is
    held inside its durable TopicCreate (registry lock held, topic not yet registered); a
    plain write meanwhile finds the topic absent and calls `put_topic` with the default
    `type: "log"` config, which then finds the queue and refuses the *write*
    `409 topic_exists_incompatible`, although the topic exists and takes appends.
    """
    e = make_engine()
    entered, release = _hold_first_topic_create(e)
    out: dict[str, Any] = {}

    def put() -> None:
        out["put"] = e.put_topic("jobs", TopicConfig(type=TopicType.QUEUE))

    def write_one() -> None:
        try:
            out["write"] = e.write("jobs", [RecordIn.of({"n": 1})])
        except SeglogError as err:
            out["write"] = err

    tp = threading.Thread(target=put)
    tp.start()
    assert entered.wait(10)
    tw = threading.Thread(target=write_one)
    tw.start()
    time.sleep(0.3)  # the write is now waiting for the registry lock
    release.set()
    tp.join(10)
    tw.join(10)
    assert out["put"].created is True
    res = out["write"]
    assert not isinstance(res, SeglogError), f"write refused: {res.code} {res.message}"
    assert res.seqs == [1]
    assert e.topics["jobs"].config.type is TopicType.QUEUE


# ----------------------------------------------------------------- tightened caps / TTL


def test_a_tightened_byte_cap_evicts_at_the_put_not_after_the_cap_is_lifted(
    client: httpx.Client, topic: str
) -> None:
    """SEMANTICS §2.1 ("a tightened cap/TTL applies immediately through a retention pass"),
    §4.2 (run "after a config update"; floors never decrease), API §2.1 ("the eviction is
    durable before the response").

    `Engine.put_topic` runs `self.retain(...)` and drops
    the EvictWatermark op it returns; the cut is only applied when some later operation
    happens to apply the topic's pending queue. If the cap is lifted first (`PUT {}`),
    reads skip retention (`prepare_read` returns early without a cap), so the records the
    tightened cap evicted are still served — and the next write applies the stale cut and
    evicts them *with no cap configured*, with a `cap` tombstone. A crash at that point
    also evicts them (the watermark frame is in the WAL), so the live view and the
    recovered view disagree.
    """
    put_topic(client, topic)
    write(client, topic, data_records(*range(6)))  # 6 records of 1 byte each
    ok(client.put(f"/v0/topics/{topic}", json={"cap_bytes": 3}))
    ok(client.put(f"/v0/topics/{topic}", json={}))  # lift the cap again
    s = state(client, topic)
    assert (s["count"], s["earliest_seq"]) == (3, 4), s
    write(client, topic, data_records(9))
    d = diff(client, topic, from_seq=3)
    assert d["tombstone"] is None and [r["$seq"] for r in d["records"]] == [4, 5, 6, 7], d


def test_a_tightened_ttl_expires_at_the_put_not_after_the_ttl_is_lifted(
    client: httpx.Client, topic: str
) -> None:
    """SEMANTICS §2.1 / §4.2 / API §2.1 as above, for TTL (§4.2 step 1; floors never
    decrease, §4.1).

    With `ttl_ms: 1` the PUT's retention pass expires every record older than 1 ms, but its
    EvictWatermark op is dropped. After `PUT {}` lifts the TTL the expired
    records are served again (count 6), then vanish at the next write (or after a crash,
    where replay re-applies the cut at the ConfigUpdate's time).
    """
    put_topic(client, topic)
    write(client, topic, data_records(*range(6)))
    time.sleep(0.05)
    ok(client.put(f"/v0/topics/{topic}", json={"ttl_ms": 1}))
    ok(client.put(f"/v0/topics/{topic}", json={}))
    s = state(client, topic)
    assert (s["count"], s["earliest_seq"]) == (0, 7), s


# ----------------------------------------------------------------- per-key in-flight cap


def test_a_work_stream_open_counts_against_the_inflight_per_key_cap(
    make_server: Callable[..., ServerProcess],
) -> None:
    """API §11 (in-flight requests per key: enforced on "every authenticated request
    (stream GETs release the slot once open)"; refusals are `429 throttled` with
    `Retry-After: 1`), §1.2 (`GET /v0/topics/:q/work` is authenticated, `?token=` allowed).

    `Guard._guarded` used to exempt `/work` from the count: with the key's only slot held
    by a long-poll the key could still open push streams (200) while any other request of
    the key was refused 429.
    """
    srv = make_server(env={"SEGLOG_API_KEYS": "k1", "SEGLOG_MAX_INFLIGHT_PER_KEY": "1"})
    k1 = {"Authorization": "Bearer k1"}
    with httpx.Client(base_url=srv.url, timeout=15) as c:
        ok(c.put("/v0/topics/jobs", json={"type": "queue"}, headers=k1), 201)
        ok(c.post("/v0/topics/lp", json={"records": data_records(1)}, headers=k1), 201)
        held: dict[str, httpx.Response] = {}

        def hold() -> None:
            with httpx.Client(base_url=srv.url, timeout=15) as c2:
                held["r"] = c2.post(
                    "/v0/topics/lp/diff", json={"from_seq": 1, "wait_ms": 2500}, headers=k1
                )

        th = threading.Thread(target=hold)
        th.start()
        time.sleep(0.5)
        assert th.is_alive()
        assert c.get("/v0/topics", headers=k1).status_code == 429  # the slot is taken
        with c.stream(
            "GET",
            "/v0/topics/jobs/work",
            params={"node": "w1"},
            headers={**k1, "Accept": "text/event-stream"},
        ) as r:
            status, retry_after = r.status_code, r.headers.get("retry-after")
        th.join(10)
    assert (status, retry_after) == (429, "1")


# ----------------------------------------------------------------- writes racing a DELETE


def _race_writes_with_deletes(
    server: ServerProcess, topic: str, seconds: float, stop_on: int
) -> dict[int, list[str]]:
    """Writers append to `topic` while another client DELETEs it in a loop; the bodies of
    each status seen (stops early once `stop_on` was seen)."""
    seen: dict[int, list[str]] = {}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def writer(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            while time.monotonic() < deadline and stop_on not in seen:
                r = c.post(f"/v0/topics/{topic}", json={"records": data_records(i)})
                with lock:
                    seen.setdefault(r.status_code, []).append(r.text[:300])

    def deleter() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            while time.monotonic() < deadline and stop_on not in seen:
                assert c.delete(f"/v0/topics/{topic}").status_code == 200

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=deleter))
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    return seen


def test_a_write_racing_a_topic_delete_is_never_500(server: ServerProcess, topic: str) -> None:
    """API §0.6 (`500 internal` is for a bug or an I/O failure), §3 (a write is atomic and
    either appends or fails with §3's errors), §2.4; "no request can crash the server".

    A write whose frames were submitted before a concurrent `DELETE /v0/topics/:topic`
    (drop_topic holds the topic lock across its durable TopicDelete) is failed by the
    publisher with `internal("the topic was deleted")` (src/seglog/engine/publisher.py:
    119-128): an ordinary race between two valid requests is answered `500 internal`.
    Either order is a valid outcome (append then delete: 200; delete then write: the
    write auto-creates, 201), a 500 is not.
    """
    seen = _race_writes_with_deletes(server, topic, 4.0, stop_on=500)
    assert 500 not in seen, seen[500][:3]


def test_an_autocreating_write_racing_a_topic_delete_is_not_404(
    server: ServerProcess, topic: str
) -> None:
    """API §3 ("absent and not creatable ⇒ 404"; a write creates an absent topic when the
    default config's `auto_create` is true), SEMANTICS §2.1 (lazy creation by a write).

    `Engine.write_begin` takes the topic found before a
    concurrent DELETE and, finding it `deleted` under its lock, answers
    `404 topic_not_found` instead of treating the topic as absent: a write with
    `auto_create` in effect is refused 404, which no ordering of the two requests allows
    (before the delete it appends; after it the topic is absent and creatable).
    """
    seen = _race_writes_with_deletes(server, topic, 4.0, stop_on=404)
    assert 404 not in seen, seen[404][:3]
