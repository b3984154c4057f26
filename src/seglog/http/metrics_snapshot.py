"""Map the engine's `EngineStats` and the server's own counters onto a `MetricsSnapshot`
(the pure renderer's input). No engine locks here: the engine builds its value itself."""

from __future__ import annotations

from seglog.engine.stats import EngineStats
from seglog.http.metrics_text import MetricsSnapshot, TopicMetrics, WalMetrics
from seglog.model import Durability


def collect(stats: EngineStats, uptime_ms: int) -> MetricsSnapshot:
    by_class = dict.fromkeys(Durability, 0)
    rows: list[TopicMetrics] = []
    for t in stats.topics:
        by_class[t.durability] += 1
        rows.append(
            TopicMetrics(
                topic=t.topic,
                head_seq=t.head_seq,
                earliest_seq=t.earliest_seq,
                records_live=t.records_live,
                bytes_live=t.bytes_live,
                queue_ready=None if t.queue is None else t.queue.ready,
                queue_in_flight=None if t.queue is None else t.queue.in_flight,
            )
        )
    m = stats.wal
    wal = WalMetrics(
        frames=m.frames,
        batches=m.batches,
        fsyncs=m.fsyncs,
        bytes_written=m.bytes_written,
        rotations=m.rotations,
        submit_full_total=m.submit_full_total,
        queue_depth=m.queue_depth,
        queue_depth_peak=m.queue_depth_peak,
        read_only=m.read_only,
        fsync_count=m.fsync_count,
        fsync_micros_total=m.fsync_micros_total,
        fsync_buckets=tuple(m.fsync_hist),
        torn_tails=stats.wal_torn_tails_total,
    )
    return MetricsSnapshot(
        topics=len(rows),
        topics_ephemeral=by_class[Durability.EPHEMERAL],
        topics_memory=by_class[Durability.MEMORY],
        topics_disk=by_class[Durability.DISK],
        topics_fsync=by_class[Durability.FSYNC],
        routers=stats.routers,
        records_live=sum(t.records_live for t in stats.topics),
        bytes_live=sum(t.bytes_live for t in stats.topics),
        queue_topics=sum(t.is_queue for t in stats.topics),
        queue_leases_in_flight=sum(t.queue.in_flight for t in stats.topics if t.queue),
        ready=stats.ready,
        replay_progress=stats.replay_progress,
        uptime_ms=uptime_ms,
        wal=wal,
        topic_rows=tuple(rows),
    )
