"""`GET /v0/metrics` rendering (API §10): Prometheus text 0.0.4 and the JSON snapshot.

Pure functions over a `MetricsSnapshot` value (built by the caller from the engine and the
server state). The stock prometheus-client classes cannot print the spec's exact names
(`Counter` appends `_total`, buckets print `le="50.0"`), so the text is rendered here.
Per-topic series are capped at `MAX_TOPIC_SERIES` topics (in name order);
`topics_topic_metrics_truncated` reports whether the cap cut any.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from seglog.http.wire_types import MetricsJson

MAX_TOPIC_SERIES = 1000
FSYNC_BUCKETS_US: tuple[int, ...] = (50, 100, 250, 500, 1000, 5000, 10000, 50000, 100000)
"""Upper bounds (µs) of the finite fsync-latency buckets; `+Inf` is `fsync_count`."""


@dataclass(frozen=True, slots=True)
class TopicMetrics:
    topic: str
    head_seq: int
    earliest_seq: int
    records_live: int
    bytes_live: int
    queue_ready: int | None = None
    """Set (with `queue_in_flight`) for queue topics only."""
    queue_in_flight: int | None = None


@dataclass(frozen=True, slots=True)
class WalMetrics:
    """WAL totals summed over shards. `fsync_buckets` are *cumulative* counts for the
    bounds of `FSYNC_BUCKETS_US` (one per bound); the `+Inf` bucket is `fsync_count`."""

    frames: int = 0
    batches: int = 0
    fsyncs: int = 0
    bytes_written: int = 0
    rotations: int = 0
    submit_full_total: int = 0
    queue_depth: int = 0
    queue_depth_peak: int = 0
    read_only: int = 0
    fsync_count: int = 0
    fsync_micros_total: int = 0
    fsync_buckets: tuple[int, ...] = (0,) * len(FSYNC_BUCKETS_US)
    torn_tails: int = 0  # cut by recovery at startup (STORAGE §3.1); Prometheus only

    def __post_init__(self) -> None:
        if len(self.fsync_buckets) != len(FSYNC_BUCKETS_US):
            raise ValueError(
                f"fsync_buckets needs {len(FSYNC_BUCKETS_US)} cumulative counts, "
                f"got {len(self.fsync_buckets)}"
            )


@dataclass(frozen=True, slots=True)
class DeliveryMetrics:
    """The delivery scheduler's state (seglog's own families, beyond the API's list)."""

    pressure_level: int = 0
    lag_ms: int = 0
    band_depths: tuple[int, ...] = (0, 0, 0, 0, 0)  # band 0 first
    marked: int = 0
    coalesced: int = 0
    woken: int = 0
    deferred_passes: int = 0
    throttled_writes: int = 0
    max_wait_ms: int = 0
    # the live fan-out (`http.live_fanout`): rounds, and frames sent for parked streams
    fanout_broadcasts: int = 0
    fanout_served: int = 0
    fanout_handed: int = 0
    fanout_woken: int = 0


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    topics: int = 0
    topics_ephemeral: int = 0
    topics_memory: int = 0
    topics_disk: int = 0
    topics_fsync: int = 0
    routers: int = 0
    records_live: int = 0
    bytes_live: int = 0
    queue_topics: int = 0
    queue_leases_in_flight: int = 0
    sse_connections: int = 0
    watch_sessions: int = 0
    ready: bool = True
    replay_progress: float = 1.0
    uptime_ms: int = 0
    wal: WalMetrics = field(default_factory=WalMetrics)
    topic_rows: tuple[TopicMetrics, ...] = ()
    delivery: DeliveryMetrics = field(default_factory=DeliveryMetrics)


def cumulative_buckets(latencies_us: list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """Cumulative bucket counts for a list of observed latencies (a test/collector aid)."""
    return tuple(sum(1 for v in latencies_us if v <= b) for b in FSYNC_BUCKETS_US)


# --------------------------------------------------------------------------- JSON


def render_json(s: MetricsSnapshot) -> bytes:
    w = s.wal
    body: MetricsJson = {
        "topics": s.topics,
        "topics_ephemeral": s.topics_ephemeral,
        "topics_memory": s.topics_memory,
        "topics_disk": s.topics_disk,
        "topics_fsync": s.topics_fsync,
        "routers": s.routers,
        "records_live": s.records_live,
        "bytes_live": s.bytes_live,
        "queue_topics": s.queue_topics,
        "queue_leases_in_flight": s.queue_leases_in_flight,
        "sse_connections": s.sse_connections,
        "watch_sessions": s.watch_sessions,
        "ready": s.ready,
        "replay_progress": float(s.replay_progress),
        "uptime_ms": s.uptime_ms,
        "wal": {
            "fsyncs": w.fsyncs,
            "frames": w.frames,
            "batches": w.batches,
            "bytes_written": w.bytes_written,
            "rotations": w.rotations,
            "queue_depth": w.queue_depth,
            "queue_depth_peak": w.queue_depth_peak,
            "submit_full_total": w.submit_full_total,
            "read_only": w.read_only,
            "fsync_count": w.fsync_count,
            "fsync_micros_total": w.fsync_micros_total,
        },
        "delivery": {
            "pressure_level": s.delivery.pressure_level,
            "lag_ms": s.delivery.lag_ms,
            "band_depths": list(s.delivery.band_depths),
            "marked": s.delivery.marked,
            "coalesced": s.delivery.coalesced,
            "woken": s.delivery.woken,
            "deferred_passes": s.delivery.deferred_passes,
            "throttled_writes": s.delivery.throttled_writes,
            "max_wait_ms": s.delivery.max_wait_ms,
            "fanout": {
                "broadcasts": s.delivery.fanout_broadcasts,
                "served": s.delivery.fanout_served,
                "handed": s.delivery.fanout_handed,
                "woken": s.delivery.fanout_woken,
            },
        },
    }
    return orjson.dumps(body)


# --------------------------------------------------------------------------- Prometheus


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _num(v: int | float | bool) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


Sample = tuple[str, str, int | float | bool]
"""(suffix-complete sample name, rendered label set or "", value)."""


def _family(name: str, kind: str, help_text: str, samples: list[Sample]) -> Iterator[str]:
    yield f"# HELP {name} {_escape_help(help_text)}"
    yield f"# TYPE {name} {kind}"
    for sample_name, labels, value in samples:
        yield f"{sample_name}{labels} {_num(value)}"


def _scalar(name: str, kind: str, help_text: str, value: int | float | bool) -> Iterator[str]:
    return _family(name, kind, help_text, [(name, "", value)])


def _per_topic(
    name: str, help_text: str, rows: tuple[TopicMetrics, ...], attr: str
) -> Iterator[str]:
    samples: list[Sample] = []
    for r in rows:
        v = getattr(r, attr)
        if v is not None:
            samples.append((name, f'{{topic="{escape_label(r.topic)}"}}', v))
    return _family(name, "gauge", help_text, samples)


def _lines(s: MetricsSnapshot) -> Iterator[str]:
    ordered = tuple(sorted(s.topic_rows, key=lambda r: r.topic.encode("utf-8", "replace")))
    rows = ordered[:MAX_TOPIC_SERIES]
    w = s.wal
    yield from _scalar("topics_topics", "gauge", "Number of topics.", s.topics)
    yield from _family(
        "topics_topics_by_class",
        "gauge",
        "Number of topics per durability class.",
        [
            ("topics_topics_by_class", f'{{class="{cls}"}}', n)
            for cls, n in (
                ("ephemeral", s.topics_ephemeral),
                ("memory", s.topics_memory),
                ("disk", s.topics_disk),
                ("fsync", s.topics_fsync),
            )
        ],
    )
    yield from _scalar("topics_routers", "gauge", "Number of routers.", s.routers)
    yield from _scalar(
        "topics_records_live", "gauge", "Live records over all topics.", s.records_live
    )
    yield from _scalar(
        "topics_bytes_live", "gauge", "Live payload bytes over all topics.", s.bytes_live
    )
    yield from _per_topic("topics_topic_head_seq", "Highest assigned seq.", rows, "head_seq")
    yield from _per_topic("topics_topic_earliest_seq", "First live seq.", rows, "earliest_seq")
    yield from _per_topic(
        "topics_topic_records_live", "Live records in the topic.", rows, "records_live"
    )
    yield from _per_topic(
        "topics_topic_bytes_live", "Live payload bytes in the topic.", rows, "bytes_live"
    )
    yield from _per_topic(
        "topics_topic_queue_ready", "Claimable jobs (queue topics).", rows, "queue_ready"
    )
    yield from _per_topic(
        "topics_topic_queue_in_flight", "Leased jobs (queue topics).", rows, "queue_in_flight"
    )
    yield from _scalar(
        "topics_topic_metrics_truncated",
        "gauge",
        f"1 if per-topic series were capped at {MAX_TOPIC_SERIES} topics.",
        len(ordered) > MAX_TOPIC_SERIES,
    )
    yield from _scalar("topics_queue_topics", "gauge", "Number of queue topics.", s.queue_topics)
    yield from _scalar(
        "topics_queue_leases_in_flight",
        "gauge",
        "Leases in flight over all queues.",
        s.queue_leases_in_flight,
    )
    yield from _scalar(
        "topics_sse_connections",
        "gauge",
        "Open SSE and WebSocket connections.",
        s.sse_connections,
    )
    yield from _scalar("topics_watch_sessions", "gauge", "Live watch sessions.", s.watch_sessions)
    yield from _scalar("topics_ready", "gauge", "1 once recovery has finished.", s.ready)
    yield from _scalar(
        "topics_recovery_progress", "gauge", "WAL replay progress (0..1).", s.replay_progress
    )
    yield from _scalar("topics_uptime_ms", "counter", "Milliseconds since start.", s.uptime_ms)
    for name, help_text, value in (
        ("topics_wal_frames_total", "WAL frames written.", w.frames),
        ("topics_wal_batches_total", "WAL group-commit batches.", w.batches),
        ("topics_wal_fsyncs_total", "WAL fsync calls.", w.fsyncs),
        ("topics_wal_bytes_written_total", "WAL bytes written.", w.bytes_written),
        ("topics_wal_rotations_total", "WAL file rotations.", w.rotations),
        (
            "topics_wal_submit_full_total",
            "WAL submissions refused: queue full.",
            w.submit_full_total,
        ),
        (
            "topics_wal_torn_tails_total",
            "Torn WAL tails cut by recovery at startup (STORAGE 3.1).",
            w.torn_tails,
        ),
    ):
        yield from _scalar(name, "counter", help_text, value)
    yield from _scalar("topics_wal_queue_depth", "gauge", "WAL writer queue depth.", w.queue_depth)
    yield from _scalar(
        "topics_wal_queue_depth_peak", "gauge", "Peak WAL writer queue depth.", w.queue_depth_peak
    )
    yield from _scalar(
        "topics_wal_read_only", "gauge", "1 if the WAL is read-only after an error.", w.read_only
    )
    hist = "topics_wal_fsync_latency_us"
    buckets: list[Sample] = [
        (f"{hist}_bucket", f'{{le="{bound}"}}', n)
        for bound, n in zip(FSYNC_BUCKETS_US, w.fsync_buckets, strict=True)
    ]
    buckets.append((f"{hist}_bucket", '{le="+Inf"}', w.fsync_count))
    buckets.append((f"{hist}_sum", "", w.fsync_micros_total))
    buckets.append((f"{hist}_count", "", w.fsync_count))
    yield from _family(hist, "histogram", "WAL fsync latency in microseconds.", buckets)
    yield from _delivery_lines(s.delivery)


def _delivery_lines(d: DeliveryMetrics) -> Iterator[str]:
    yield from _scalar(
        "topics_delivery_pressure_level",
        "gauge",
        "Delivery pressure ladder level: 0 none, 1 coalesce, 2 wide group commit, "
        "3 low priority deferred, 4 writes throttled.",
        d.pressure_level,
    )
    yield from _scalar(
        "topics_delivery_lag_ms", "gauge", "Wait of the oldest dirty topic (ms).", d.lag_ms
    )
    yield from _scalar(
        "topics_delivery_max_wait_ms", "gauge", "Longest wait of a dirty topic (ms).", d.max_wait_ms
    )
    depth: list[Sample] = [
        ("topics_delivery_queue_depth", f'{{band="{band}"}}', n)
        for band, n in enumerate(d.band_depths)
    ]
    yield from _family(
        "topics_delivery_queue_depth", "gauge", "Dirty topics queued per priority band.", depth
    )
    for name, help_text, value in (
        ("topics_delivery_marked_total", "Publishes that marked a watched topic dirty.", d.marked),
        ("topics_delivery_coalesced_total", "Marks coalesced into a queued one.", d.coalesced),
        ("topics_delivery_wakeups_total", "Topics whose readers were woken.", d.woken),
        (
            "topics_delivery_deferred_passes_total",
            "Drain passes that deferred low-priority topics.",
            d.deferred_passes,
        ),
        (
            "topics_delivery_throttled_writes_total",
            "Writes refused (429) at pressure level 4.",
            d.throttled_writes,
        ),
        (
            "topics_delivery_fanout_rounds_total",
            "Shared reads made for parked watch streams.",
            d.fanout_broadcasts,
        ),
        (
            "topics_delivery_fanout_sent_total",
            "Frames sent for parked watch streams without waking them.",
            d.fanout_served,
        ),
        (
            "topics_delivery_fanout_handed_total",
            "Sends for parked watch streams that had to wait, finished by the stream.",
            d.fanout_handed,
        ),
        (
            "topics_delivery_fanout_woken_total",
            "Parked watch streams woken for a read of their own.",
            d.fanout_woken,
        ),
    ):
        yield from _scalar(name, "counter", help_text, value)


def render_prometheus(s: MetricsSnapshot) -> bytes:
    """The text exposition (`Content-Type: text/plain; version=0.0.4`)."""
    return ("\n".join(_lines(s)) + "\n").encode("utf-8", "replace")
