"""Black-box: `/v0/metrics` in Prometheus text and JSON form (API §10)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.http.live import data_records, describe, put_topic, write

Names = Callable[[str], str]

FAMILIES: dict[str, str] = {
    "topics_topics": "gauge",
    "topics_topics_by_class": "gauge",
    "topics_routers": "gauge",
    "topics_records_live": "gauge",
    "topics_bytes_live": "gauge",
    "topics_topic_head_seq": "gauge",
    "topics_topic_earliest_seq": "gauge",
    "topics_topic_records_live": "gauge",
    "topics_topic_bytes_live": "gauge",
    "topics_topic_queue_ready": "gauge",
    "topics_topic_queue_in_flight": "gauge",
    "topics_topic_metrics_truncated": "gauge",
    "topics_queue_topics": "gauge",
    "topics_queue_leases_in_flight": "gauge",
    "topics_sse_connections": "gauge",
    "topics_watch_sessions": "gauge",
    "topics_ready": "gauge",
    "topics_recovery_progress": "gauge",
    "topics_uptime_ms": "counter",
    "topics_wal_frames_total": "counter",
    "topics_wal_batches_total": "counter",
    "topics_wal_fsyncs_total": "counter",
    "topics_wal_bytes_written_total": "counter",
    "topics_wal_rotations_total": "counter",
    "topics_wal_submit_full_total": "counter",
    "topics_wal_torn_tails_total": "counter",
    "topics_wal_queue_depth": "gauge",
    "topics_wal_queue_depth_peak": "gauge",
    "topics_wal_read_only": "gauge",
    "topics_wal_fsync_latency_us": "histogram",
}
BUCKETS = ["50", "100", "250", "500", "1000", "5000", "10000", "50000", "100000", "+Inf"]
JSON_KEYS = {
    "topics",
    "topics_ephemeral",
    "topics_memory",
    "topics_disk",
    "topics_fsync",
    "routers",
    "records_live",
    "bytes_live",
    "queue_topics",
    "queue_leases_in_flight",
    "sse_connections",
    "watch_sessions",
    "ready",
    "replay_progress",
    "uptime_ms",
    "wal",
}
WAL_KEYS = {
    "fsyncs",
    "frames",
    "batches",
    "bytes_written",
    "rotations",
    "queue_depth",
    "queue_depth_peak",
    "submit_full_total",
    "read_only",
    "fsync_count",
    "fsync_micros_total",
}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(c: httpx.Client) -> tuple[str, Samples, dict[str, str]]:
    r = c.get("/v0/metrics")
    assert r.status_code == 200, describe(r)
    assert r.headers["content-type"] == "text/plain; version=0.0.4", r.headers
    text = r.text
    samples: Samples = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return text, samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def counter(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} ([0-9.eE+-]+)$", text, re.M)
    assert m, f"no sample line for {name}"
    return float(m.group(1))


def test_every_family_present_with_help_and_type(client: httpx.Client, tname: Names) -> None:
    q = tname("q")
    put_topic(client, q, {"type": "queue"})
    write(client, q, data_records(1, 2))
    text, _samples, types = scrape(client)
    for name, typ in FAMILIES.items():
        assert re.search(rf"^# HELP {name} \S", text, re.M), f"no HELP for {name}"
        assert re.search(rf"^# TYPE {name} {typ}$", text, re.M), f"no/wrong TYPE for {name}"
        parsed = name[: -len("_total")] if typ == "counter" and name.endswith("_total") else name
        assert types.get(parsed) == typ, (name, types.get(parsed))
    _t, samples, _ = scrape(client)
    assert value(samples, "topics_topic_queue_ready", topic=q) == 2
    assert value(samples, "topics_topic_queue_in_flight", topic=q) == 0


def test_global_gauges(client: httpx.Client, tname: Names) -> None:
    for cls in ("ephemeral", "memory", "disk", "fsync"):
        put_topic(client, tname(cls), {"durability": cls})
    text, samples, _ = scrape(client)
    classes = {
        dict(k[1])["class"]: v for k, v in samples.items() if k[0] == "topics_topics_by_class"
    }
    assert set(classes) == {"ephemeral", "memory", "disk", "fsync"}
    assert all(v >= 1 for v in classes.values())
    total = value(samples, "topics_topics")
    assert sum(classes.values()) == total
    ready = client.get("/v0/ready").json()
    assert total == ready["topics"]
    assert value(samples, "topics_ready") == 1
    assert value(samples, "topics_recovery_progress") == 1
    assert value(samples, "topics_topic_metrics_truncated") == 0
    assert value(samples, "topics_routers") == 0
    assert counter(text, "topics_uptime_ms") >= 0


def test_per_topic_gauges(client: httpx.Client, topic: str) -> None:
    write(client, topic, [{"data": "abc"}, {"data": {"k": 1}, "meta": {"m": 2}}, {"data": 7}])
    client.post(f"/v0/topics/{topic}/delete", json={"before_seq": 2})
    _text, samples, _ = scrape(client)
    assert value(samples, "topics_topic_head_seq", topic=topic) == 3
    assert value(samples, "topics_topic_earliest_seq", topic=topic) == 2
    assert value(samples, "topics_topic_records_live", topic=topic) == 2
    assert value(samples, "topics_topic_bytes_live", topic=topic) == len('{"k":1}{"m":2}7')
    assert value(samples, "topics_records_live") >= 2


def test_wal_counters_move(client: httpx.Client, tname: Names) -> None:
    disk, fs = tname("disk"), tname("fs")
    put_topic(client, disk)
    put_topic(client, fs, {"durable": True})
    text0, _s, _ = scrape(client)
    write(client, disk, data_records(*range(10)))
    text1, _s, _ = scrape(client)
    assert counter(text1, "topics_wal_frames_total") > counter(text0, "topics_wal_frames_total")
    assert counter(text1, "topics_wal_batches_total") > counter(text0, "topics_wal_batches_total")
    assert counter(text1, "topics_wal_bytes_written_total") > counter(
        text0, "topics_wal_bytes_written_total"
    )
    write(client, fs, data_records(1))
    text2, _s, _ = scrape(client)
    assert counter(text2, "topics_wal_fsyncs_total") > counter(text1, "topics_wal_fsyncs_total")
    assert counter(text2, "topics_wal_fsync_latency_us_count") > counter(
        text1, "topics_wal_fsync_latency_us_count"
    )


def test_fsync_histogram_buckets(client: httpx.Client, topic: str) -> None:
    write(client, topic, data_records(1), config={"durable": True})
    text, _s, _ = scrape(client)
    found = re.findall(r'^topics_wal_fsync_latency_us_bucket\{le="([^"]*)"\} (\S+)$', text, re.M)
    assert [le for le, _v in found] == BUCKETS
    counts = [float(v) for _le, v in found]
    assert counts == sorted(counts)
    assert counts[-1] == counter(text, "topics_wal_fsync_latency_us_count") >= 1
    assert counter(text, "topics_wal_fsync_latency_us_sum") >= 0


def test_json_form(client: httpx.Client, topic: str) -> None:
    write(client, topic, data_records(1), config={"durable": True})
    for accept in ("application/json", "text/html, application/json;q=0.9"):
        r = client.get("/v0/metrics", headers={"Accept": accept})
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        body: dict[str, Any] = r.json()
        assert set(body) >= JSON_KEYS, JSON_KEYS - set(body)
        assert set(body["wal"]) >= WAL_KEYS, WAL_KEYS - set(body["wal"])
        assert "performance" not in body
        assert body["ready"] is True and body["replay_progress"] == 1.0
        assert body["topics"] == (
            body["topics_ephemeral"]
            + body["topics_memory"]
            + body["topics_disk"]
            + body["topics_fsync"]
        )
        assert body["topics_fsync"] >= 1 and body["records_live"] >= 1
        assert body["wal"]["fsync_count"] >= 1 and body["wal"]["frames"] >= 1
        for k in JSON_KEYS - {"wal", "ready", "replay_progress"}:
            assert isinstance(body[k], int), k
    # the text form is the default for other Accept values
    r = client.get("/v0/metrics", headers={"Accept": "text/plain"})
    assert r.headers["content-type"] == "text/plain; version=0.0.4"


def test_per_topic_series_follow_topic_lifecycle(client: httpx.Client, topic: str) -> None:
    write(client, topic, data_records(1))
    _t, samples, _ = scrape(client)
    assert value(samples, "topics_topic_head_seq", topic=topic) == 1
    disk_before = value(samples, "topics_topics_by_class", **{"class": "disk"})
    fsync_before = value(samples, "topics_topics_by_class", **{"class": "fsync"})
    put_topic(client, topic, {"durable": True}, status=200)
    _t, samples, _ = scrape(client)
    assert value(samples, "topics_topics_by_class", **{"class": "disk"}) == disk_before - 1
    assert value(samples, "topics_topics_by_class", **{"class": "fsync"}) == fsync_before + 1
    client.delete(f"/v0/topics/{topic}")
    text, samples, _ = scrape(client)
    assert f'topic="{topic}"' not in text
