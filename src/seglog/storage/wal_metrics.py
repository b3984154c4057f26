"""The WAL's counters: one `WalMetrics` per shard, summed over shards by `Wal.metrics`.

Whoever writes a shard's batch (its writer thread, or a submitter writing inline) updates
its counters under the shard's `_lock`; readers on other threads copy them out under that
lock (`WalShard.add_metrics_to`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

FSYNC_BUCKETS_US = (50, 100, 250, 500, 1000, 5000, 10000, 50000, 100000)


@dataclass
class WalMetrics:
    """One shard's counters, or their sum over shards. `fsync_hist[i]` counts fsyncs ≤
    `FSYNC_BUCKETS_US[i]` µs (cumulative); the +Inf bucket is `fsync_count` and the sum
    `fsync_micros_total`."""

    frames: int = 0
    batches: int = 0
    inline_batches: int = 0  # of `batches`, written by the submitting thread (not rendered)
    fsyncs: int = 0
    bytes_written: int = 0
    rotations: int = 0
    queue_depth: int = 0
    queue_depth_peak: int = 0
    submit_full_total: int = 0
    read_only: int = 0
    fsync_count: int = 0
    fsync_micros_total: int = 0
    fsync_hist: list[int] = field(default_factory=lambda: [0] * len(FSYNC_BUCKETS_US))

    def add(self, m: WalMetrics) -> None:
        self.frames += m.frames
        self.batches += m.batches
        self.inline_batches += m.inline_batches
        self.fsyncs += m.fsyncs
        self.bytes_written += m.bytes_written
        self.rotations += m.rotations
        self.queue_depth += m.queue_depth
        self.queue_depth_peak = max(self.queue_depth_peak, m.queue_depth_peak)
        self.submit_full_total += m.submit_full_total
        self.read_only = max(self.read_only, m.read_only)
        self.fsync_count += m.fsync_count
        self.fsync_micros_total += m.fsync_micros_total
        self.fsync_hist = [a + b for a, b in zip(self.fsync_hist, m.fsync_hist, strict=True)]
