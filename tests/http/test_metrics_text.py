"""Prometheus text and JSON snapshot of `/v0/metrics` (API §10), with prometheus-client's
parser as the format oracle."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from seglog.http.metrics_text import (
    FSYNC_BUCKETS_US,
    MAX_TOPIC_SERIES,
    DeliveryMetrics,
    MetricsSnapshot,
    TopicMetrics,
    WalMetrics,
    cumulative_buckets,
    escape_label,
    render_json,
    render_prometheus,
)

GAUGES = [
    "topics_topics",
    "topics_topics_by_class",
    "topics_routers",
    "topics_records_live",
    "topics_bytes_live",
    "topics_topic_head_seq",
    "topics_topic_earliest_seq",
    "topics_topic_records_live",
    "topics_topic_bytes_live",
    "topics_topic_queue_ready",
    "topics_topic_queue_in_flight",
    "topics_topic_metrics_truncated",
    "topics_queue_topics",
    "topics_queue_leases_in_flight",
    "topics_sse_connections",
    "topics_watch_sessions",
    "topics_ready",
    "topics_recovery_progress",
    "topics_wal_queue_depth",
    "topics_wal_queue_depth_peak",
    "topics_wal_read_only",
    # seglog's own: the delivery scheduler and its pressure ladder
    "topics_delivery_pressure_level",
    "topics_delivery_lag_ms",
    "topics_delivery_max_wait_ms",
    "topics_delivery_queue_depth",
]
COUNTERS = [
    "topics_uptime_ms",
    "topics_wal_frames_total",
    "topics_wal_batches_total",
    "topics_wal_fsyncs_total",
    "topics_wal_bytes_written_total",
    "topics_wal_rotations_total",
    "topics_wal_submit_full_total",
    "topics_wal_torn_tails_total",  # STORAGE §3.1 names it; API §12's table predates it
    "topics_delivery_marked_total",
    "topics_delivery_coalesced_total",
    "topics_delivery_wakeups_total",
    "topics_delivery_deferred_passes_total",
    "topics_delivery_throttled_writes_total",
    "topics_delivery_fanout_rounds_total",
    "topics_delivery_fanout_sent_total",
    "topics_delivery_fanout_handed_total",
    "topics_delivery_fanout_woken_total",
]
LATENCIES = [10, 60, 60, 300, 700, 2000, 20000, 70000, 200000, 40]


def snapshot(rows: tuple[TopicMetrics, ...] | None = None) -> MetricsSnapshot:
    if rows is None:
        rows = (
            TopicMetrics("jobs", 5210, 3001, 2210, 90000, queue_ready=840, queue_in_flight=2),
            TopicMetrics("events", 99, 1, 99, 8112),
        )
    wal = WalMetrics(
        frames=200,
        batches=50,
        fsyncs=10,
        bytes_written=40000,
        rotations=1,
        submit_full_total=3,
        queue_depth=0,
        queue_depth_peak=3,
        read_only=0,
        fsync_count=len(LATENCIES),
        fsync_micros_total=sum(LATENCIES),
        fsync_buckets=cumulative_buckets(LATENCIES),
        torn_tails=2,
    )
    return MetricsSnapshot(
        topics=3,
        topics_ephemeral=0,
        topics_memory=1,
        topics_disk=1,
        topics_fsync=1,
        routers=1,
        records_live=120,
        bytes_live=5000,
        queue_topics=1,
        queue_leases_in_flight=2,
        sse_connections=1,
        watch_sessions=1,
        ready=True,
        replay_progress=1.0,
        uptime_ms=12345,
        wal=wal,
        topic_rows=rows,
        delivery=DeliveryMetrics(
            pressure_level=3,
            lag_ms=120,
            band_depths=(1, 2, 0, 0, 5),
            marked=40,
            coalesced=9,
            woken=31,
            deferred_passes=2,
            throttled_writes=0,
            max_wait_ms=130,
            fanout_broadcasts=7,
            fanout_served=650,
            fanout_handed=3,
            fanout_woken=1,
        ),
    )


def families(s: MetricsSnapshot) -> dict[str, Any]:
    text = render_prometheus(s).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fam: Any) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(x.labels.items())): x.value for x in fam.samples}


def test_every_family_has_help_and_type_with_exact_names() -> None:
    text = render_prometheus(snapshot()).decode()
    lines = text.splitlines()
    for name in [*GAUGES, *COUNTERS]:
        assert any(ln.startswith(f"# HELP {name} ") for ln in lines), name
        kind = "counter" if name in COUNTERS else "gauge"
        assert f"# TYPE {name} {kind}" in lines
    assert "# TYPE topics_wal_fsync_latency_us histogram" in lines
    assert "topics_uptime_ms 12345" in lines  # no `_total`, no `_created`
    assert "topics_wal_frames_total 200" in lines
    assert "topics_wal_torn_tails_total 2" in lines
    assert "_created" not in text
    assert text.endswith("\n")


def test_parsed_families_and_values() -> None:
    fams = families(snapshot())
    # the parser strips `_total` from counter family names
    expected = {*GAUGES, "topics_uptime_ms", "topics_wal_fsync_latency_us"} | {
        c.removesuffix("_total") for c in COUNTERS
    }
    assert set(fams) == expected
    assert samples(fams["topics_topics"]) == {(): 3}
    assert samples(fams["topics_topics_by_class"]) == {
        (("class", "ephemeral"),): 0,
        (("class", "memory"),): 1,
        (("class", "disk"),): 1,
        (("class", "fsync"),): 1,
    }
    assert samples(fams["topics_topic_head_seq"]) == {
        (("topic", "events"),): 99,
        (("topic", "jobs"),): 5210,
    }
    # queue gauges only for queue topics
    assert samples(fams["topics_topic_queue_ready"]) == {(("topic", "jobs"),): 840}
    assert samples(fams["topics_topic_queue_in_flight"]) == {(("topic", "jobs"),): 2}
    assert samples(fams["topics_topic_metrics_truncated"]) == {(): 0}
    assert samples(fams["topics_ready"]) == {(): 1}
    assert samples(fams["topics_recovery_progress"]) == {(): 1.0}
    assert samples(fams["topics_wal_submit_full"]) == {(): 3}
    assert samples(fams["topics_delivery_pressure_level"]) == {(): 3}
    assert samples(fams["topics_delivery_queue_depth"]) == {
        (("band", "0"),): 1,
        (("band", "1"),): 2,
        (("band", "2"),): 0,
        (("band", "3"),): 0,
        (("band", "4"),): 5,
    }
    assert samples(fams["topics_delivery_wakeups"]) == {(): 31}
    assert samples(fams["topics_delivery_fanout_rounds"]) == {(): 7}
    assert samples(fams["topics_delivery_fanout_sent"]) == {(): 650}
    assert samples(fams["topics_delivery_fanout_handed"]) == {(): 3}
    assert samples(fams["topics_delivery_fanout_woken"]) == {(): 1}
    assert fams["topics_wal_fsyncs"].type == "counter"


def test_histogram_buckets_print_le_exactly() -> None:
    text = render_prometheus(snapshot()).decode()
    bucket_lines = [ln for ln in text.splitlines() if ln.startswith("topics_wal_fsync_latency_us_")]
    assert bucket_lines == [
        'topics_wal_fsync_latency_us_bucket{le="50"} 2',
        'topics_wal_fsync_latency_us_bucket{le="100"} 4',
        'topics_wal_fsync_latency_us_bucket{le="250"} 4',
        'topics_wal_fsync_latency_us_bucket{le="500"} 5',
        'topics_wal_fsync_latency_us_bucket{le="1000"} 6',
        'topics_wal_fsync_latency_us_bucket{le="5000"} 7',
        'topics_wal_fsync_latency_us_bucket{le="10000"} 7',
        'topics_wal_fsync_latency_us_bucket{le="50000"} 8',
        'topics_wal_fsync_latency_us_bucket{le="100000"} 9',
        'topics_wal_fsync_latency_us_bucket{le="+Inf"} 10',
        f"topics_wal_fsync_latency_us_sum {sum(LATENCIES)}",
        "topics_wal_fsync_latency_us_count 10",
    ]
    fam = families(snapshot())["topics_wal_fsync_latency_us"]
    les = [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")]
    assert les == [*(str(b) for b in FSYNC_BUCKETS_US), "+Inf"]


def test_label_escaping() -> None:
    assert escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    weird = 'we\\ird"na\nme'
    fams = families(snapshot((TopicMetrics(weird, 1, 1, 1, 1),)))
    assert samples(fams["topics_topic_head_seq"]) == {(("topic", weird),): 1}
    text = render_prometheus(snapshot((TopicMetrics(weird, 1, 1, 1, 1),))).decode()
    assert 'topic="we\\\\ird\\"na\\nme"' in text


def test_per_topic_series_capped() -> None:
    rows = tuple(TopicMetrics(f"t{i:05d}", i, 1, i, i) for i in range(MAX_TOPIC_SERIES + 5))
    fams = families(snapshot(tuple(reversed(rows))))
    heads = samples(fams["topics_topic_head_seq"])
    assert len(heads) == MAX_TOPIC_SERIES
    assert (("topic", "t00000"),) in heads and (("topic", "t01004"),) not in heads
    assert samples(fams["topics_topic_metrics_truncated"]) == {(): 1}
    exact = families(snapshot(rows[:MAX_TOPIC_SERIES]))
    assert samples(exact["topics_topic_metrics_truncated"]) == {(): 0}


def test_not_ready_and_fractional_progress() -> None:
    fams = families(dataclasses.replace(snapshot(), ready=False, replay_progress=0.25))
    assert samples(fams["topics_ready"]) == {(): 0}
    assert samples(fams["topics_recovery_progress"]) == {(): 0.25}


def test_empty_snapshot_renders() -> None:
    fams = families(MetricsSnapshot())
    assert samples(fams["topics_topic_head_seq"]) == {}
    assert samples(fams["topics_wal_fsync_latency_us"])[(("le", "+Inf"),)] == 0


def test_wal_bucket_length_is_checked() -> None:
    with pytest.raises(ValueError):
        WalMetrics(fsync_buckets=(1, 2))


def test_json_snapshot_shape() -> None:
    out = orjson.loads(render_json(snapshot()))
    assert list(out) == [
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
        "delivery",
    ]
    assert list(out["wal"]) == [
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
    ]
    assert out["ready"] is True
    assert isinstance(out["replay_progress"], float)
    assert out["wal"]["fsync_count"] == 10 and out["wal"]["fsync_micros_total"] == sum(LATENCIES)
