"""`EngineStats`: an immutable value describing the engine at one instant, for whoever
renders metrics (`/v0/metrics`). Built by `Engine.stats()`, which takes each topic's lock
briefly; the value itself holds no references into engine state."""

from __future__ import annotations

from dataclasses import dataclass

from seglog.model import Durability, QueueCounts
from seglog.storage.wal_metrics import WalMetrics


@dataclass(frozen=True, slots=True)
class TopicStats:
    topic: str
    durability: Durability
    is_queue: bool
    head_seq: int
    earliest_seq: int
    records_live: int
    bytes_live: int
    queue: QueueCounts | None = None  # queue topics only


@dataclass(frozen=True, slots=True)
class EngineStats:
    topics: tuple[TopicStats, ...]  # by name
    ready: bool
    replay_progress: float
    wal: WalMetrics
    wal_torn_tails_total: int
    routers: int = 0
