"""Per-topic ordered operations: appends and deletes that were reserved and submitted to
the WAL under the topic lock and are applied in memory strictly in submission order once
their commit completes (SEMANTICS §3.1, STORAGE §3.3 ordering rules).

Owner: `TopicState.pending` holds these; the engine appends under the topic lock and the
first thread that observes a completed head-of-queue op applies it (also under the lock).
A WAL commit completes on the shard's writer thread, which never takes topic locks, or,
for a buffered write the submitter wrote inline, before `submit` returns (still under the
topic lock, with no callback attached yet).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from seglog.errors import SeglogError
from seglog.model import DeleteResult, RecordBatch, Selector, WriteResult

if TYPE_CHECKING:
    from seglog.engine.topic import RetentionCut
    from seglog.storage.wal_commit import Commit


class OpKind(IntEnum):
    APPEND = 1
    DELETE = 2
    EVICT = 3  # an EvictWatermark whose floors apply after its commit
    FORWARD = 4  # router copies (and source-trim holes before them): no WAL frames


@dataclass(slots=True, eq=False)
class PendingOp:
    kind: OpKind
    commit: Commit
    # append
    first_seq: int = 0
    ts: int = 0
    records: RecordBatch | None = None
    size: int = 0
    reservation: int = 0  # the disk head reservation logged with this write (0: none)
    idempotency_key: str | None = None
    # forward: source-trim holes at `first_seq ..` before the copies in `records`
    holes: int = 0
    # delete
    before_seq: int | None = None
    match: Selector | None = None
    bound: int = 0
    seqs: tuple[int, ...] = ()
    # evict
    cut: RetentionCut | None = None
    # outcome
    applied: bool = False
    error: SeglogError | None = None
    write_result: WriteResult | None = None
    delete_result: DeleteResult | None = None
    owner: Any = None  # the TopicState whose queue holds this op

    @property
    def count(self) -> int:
        return len(self.records) if self.records is not None else 0

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1


# How the engine's paths submit frames: `(topic_id, frames, durable) -> Commit`; raises the
# API error (throttled / internal) when the WAL refuses the submission.
Submit = Callable[[int, list[bytes], bool], "Commit"]


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """What `Engine.write_begin` hands back: finish it with `write_finish` (sync) or by
    awaiting its commit and calling `write_publish` (async callers)."""

    topic: str
    op: PendingOp
    created: bool
    deduped: bool
