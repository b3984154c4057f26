"""The write path's pure-ish steps, run by the engine under the topic's lock: dedupe,
admission, seq reservation and frame submission (SEMANTICS §3, STORAGE §3.3).

A write reserves its seqs for good: the reservation counter only moves up, and a write
whose submission fails later becomes a hole when the publisher reaches it (SEMANTICS §3.1).
Nothing here waits for the disk."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from seglog.core.append_frames import encode_appends
from seglog.core.frame_bodies import HeadWatermarkBody
from seglog.core.frames import FrameType, encode_control
from seglog.engine.ops import OpKind, PendingOp, Submit
from seglog.engine.topic import DedupeEntry, TopicState
from seglog.errors import ErrorCode, SeglogError, throttled
from seglog.model import (
    MAX_RECORD_BYTES,
    Discard,
    Durability,
    RecordBatch,
    RecordIn,
    check_batch_count,
    check_record_size,
)
from seglog.storage.wal_commit import Commit

HEAD_RESERVATION_STEP = 256


def checked_batch(
    records: RecordBatch | Sequence[RecordIn], node: str | None
) -> tuple[RecordBatch, int]:
    """API §3's batch rules; the records as a batch of the engine's own (a caller's batch
    is copied: its lists may change after the call) with the batch `node` filled in, and
    their bytes."""
    check_batch_count(len(records))
    batch = records.copy() if isinstance(records, RecordBatch) else RecordBatch.of(records)
    sizes = batch.sizes()
    if max(sizes) > MAX_RECORD_BYTES:
        first = next(i for i, n in enumerate(sizes) if n > MAX_RECORD_BYTES)
        check_record_size(sizes[first], first)  # raises, naming the first record over
    size = sum(sizes)
    return (batch if node is None else batch.with_node(node)), size


def dedupe_lookup(t: TopicState, key: str, now: int) -> DedupeEntry | None:
    """SEMANTICS §3.3: expire old keys (oldest first), then look `key` up."""
    window = t.config.idempotency_window_ms
    d = t.dedupe
    while d:
        k = next(iter(d))
        if now - d[k].created_ms > window:
            del d[k]
        else:
            break
    return d.get(key)


def admit(t: TopicState, n: int, size: int) -> None:
    """SEMANTICS §4.3: a `discard: reject` topic refuses a write that does not fit."""
    cfg = t.config
    if cfg.discard is Discard.REJECT and (cfg.cap_records or cfg.cap_bytes):
        if (cfg.cap_records and n > cfg.cap_records) or (cfg.cap_bytes and size > cfg.cap_bytes):
            raise SeglogError(
                ErrorCode.RECORD_TOO_LARGE,
                f"the write ({n} records, {size} bytes) exceeds topic {t.name!r}'s whole cap",
                {"topic": t.name, "cap_records": cfg.cap_records, "cap_bytes": cfg.cap_bytes},
            )
        count = t.count + t.pending_count
        used = t.bytes + t.pending_bytes
        if (cfg.cap_records and count + n > cfg.cap_records) or (
            cfg.cap_bytes and used + size > cfg.cap_bytes
        ):
            raise SeglogError(
                ErrorCode.TOPIC_FULL,
                f"topic {t.name!r} is full",
                {
                    "topic": t.name,
                    "cap_records": cfg.cap_records,
                    "cap_bytes": cfg.cap_bytes,
                    "head_seq": t.head,
                    "earliest_seq": t.earliest(),
                },
            )


def check_quota(size: int, max_total_bytes: int, topics: Iterable[TopicState]) -> None:
    """API §11: the server-wide live byte quota (`max_total_bytes`, 0 = none)."""
    total = sum(x.bytes + x.pending_bytes for x in topics)
    if total + size > max_total_bytes:
        raise throttled(
            "server-wide live byte quota reached",
            {"limit": "max_total_bytes", "max": max_total_bytes},
        )


def _settle_pre_reservation(t: TopicState) -> None:
    """Under `t.lock`: a reservation submitted ahead that has committed is durable now."""
    pre = t.pre_reservation
    if pre is None or not pre[1].done():
        return
    t.pre_reservation = None
    if pre[1].error is None and pre[0] > t.reservation_durable:
        t.reservation_durable = pre[0]


def _reserve_ahead(t: TopicState, last: int, ts: int, tid: int, submit: Submit) -> None:
    """Log the next head reservation (SEMANTICS §3.2: max(head, reservation) + 256) in a
    submission of its own once the head is within one step of the current one, instead of
    when a write needs it: a disk write then finds its seqs already covered by a committed
    reservation and does not wait for that fsync. The reservation stays under head + 512,
    so a crash leaves at most that many holes. The write submitted just before is not held
    back by it; a failure only means a later write carries its own reservation, as it
    would have anyway."""
    reservation = max(last, t.reservation) + HEAD_RESERVATION_STEP
    body = HeadWatermarkBody(reservation).encode()
    frame = encode_control(FrameType.HEAD_WATERMARK, tid, body, ts, True)
    try:
        commit = submit(tid, [frame], True)
    except SeglogError:
        return  # the WAL queue is full: the next write that needs one carries it
    t.reservation = reservation
    t.pre_reservation = (reservation, commit)


def submit_append(
    t: TopicState,
    records: RecordBatch,
    size: int,
    now: int,
    submit: Submit,
    submit_ahead: Submit | None = None,
) -> PendingOp:
    """Reserve the next seqs, submit the frames (with a head reservation when a disk write
    needs one) and queue the op for the publisher. Raises (reserving nothing) if the
    submission is refused. `submit_ahead` (default `submit`) logs a reservation ahead:
    nobody waits for that one, so it must wake the WAL writer even when `submit` does
    not."""
    first = t.reserved + 1
    last = first + len(records) - 1
    # ts never goes down in seq order (TTL cuts bisect on it): pending deletes and
    # evictions carry no ts, so the last reserved write's is kept on the topic.
    ts = max(now, t.last_write_ts or 0, t.last_reserved_ts)
    t.last_reserved_ts = ts
    cls = t.config.durability
    reservation = 0
    if cls is Durability.EPHEMERAL:
        commit = Commit.completed()
    else:
        durable = cls is Durability.FSYNC
        frames: list[bytes] = []
        tid = t.topic_id
        if cls is Durability.DISK:
            _settle_pre_reservation(t)
        if cls is Durability.DISK and last > t.reservation_durable:
            # A disk write becomes visible only under a head reservation that is known
            # committed, or that rides in its own atomic submission: then a crash never
            # hands out an acked seq twice (SEMANTICS §3.2), even when an earlier
            # reservation's batch failed.
            if last >= t.reservation:
                t.reservation = last + HEAD_RESERVATION_STEP
            reservation = t.reservation
            body = HeadWatermarkBody(reservation).encode()
            frames.append(encode_control(FrameType.HEAD_WATERMARK, tid, body, ts, True, more=True))
            durable = True
        # Every frame but the last says `more`: replay applies the write whole or not at all.
        encode_appends(
            tid, first, ts, records.data, records.meta, records.node, records.tag, durable, frames
        )
        commit = submit(tid, frames, durable)
        if (
            cls is Durability.DISK
            and t.pre_reservation is None
            and t.reservation - last < HEAD_RESERVATION_STEP
        ):
            _reserve_ahead(t, last, ts, tid, submit if submit_ahead is None else submit_ahead)
    # Seqs are assigned for good from here on: the counter never moves down, and if this
    # write fails its seqs become a hole (SEMANTICS §3.1).
    t.reserved = last
    op = PendingOp(
        OpKind.APPEND,
        commit,
        first_seq=first,
        ts=ts,
        records=records,
        size=size,
        reservation=reservation,
        owner=t,
    )
    t.pending.append(op)
    t.pending_count += len(records)
    t.pending_bytes += size
    return op
