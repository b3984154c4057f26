"""Gather a `MetricsSnapshot` (the pure renderer's input) from the engine and server."""

from __future__ import annotations

from seglog.http.app_state import ServerState
from seglog.http.metrics_text import MetricsSnapshot, TopicMetrics, WalMetrics
from seglog.model import Durability, TopicType


def collect(state: ServerState, uptime_ms: int) -> MetricsSnapshot:
    engine = state.engine
    by_class = dict.fromkeys(Durability, 0)
    rows: list[TopicMetrics] = []
    records = nbytes = queues = 0
    for name in sorted(engine.topics):
        t = engine.topics.get(name)
        if t is None:
            continue
        with t.lock:
            head, earliest, count, size = t.head, t.earliest(), t.count, t.bytes
            cls, typ = t.config.durability, t.config.type
        by_class[cls] += 1
        records += count
        nbytes += size
        is_queue = typ is TopicType.QUEUE
        queues += is_queue
        rows.append(
            TopicMetrics(
                topic=name,
                head_seq=head,
                earliest_seq=earliest,
                records_live=count,
                bytes_live=size,
                queue_ready=count if is_queue else None,
                queue_in_flight=0 if is_queue else None,
            )
        )
    wal = WalMetrics()
    if engine.wal is not None:
        m = engine.wal.metrics()
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
        )
    return MetricsSnapshot(
        topics=len(rows),
        topics_ephemeral=by_class[Durability.EPHEMERAL],
        topics_memory=by_class[Durability.MEMORY],
        topics_disk=by_class[Durability.DISK],
        topics_fsync=by_class[Durability.FSYNC],
        records_live=records,
        bytes_live=nbytes,
        queue_topics=queues,
        ready=engine.ready,
        replay_progress=engine.replay_progress,
        uptime_ms=uptime_ms,
        wal=wal,
        topic_rows=tuple(rows),
    )
