"""The retention pass (SEMANTICS §4.2) as the engine runs it, under the topic's lock and
never waiting for the disk: a cut that needs no watermark applies at once; one that raises
a TTL or byte-cap floor of a persistent topic is durable before it is visible (STORAGE §7),
so its EvictWatermark is submitted as a pending op that the publisher applies, in order,
after its commit. A failed watermark changes nothing; the next pass retries."""

from __future__ import annotations

import logging

from seglog.core.frame_bodies import EvictWatermarkBody
from seglog.core.frames import FrameType, encode_control
from seglog.engine.ops import OpKind, PendingOp, Submit
from seglog.engine.topic import RetentionCut, TopicState
from seglog.errors import SeglogError, internal

log = logging.getLogger("seglog.engine")


def retain(t: TopicState, now: int, submit: Submit) -> PendingOp | None:
    """Run the pass; returns the watermark op in flight (for a caller that may wait on it),
    or None when nothing is pending."""
    cut = t.retention_cut(now)
    if cut is None:
        return None
    if not (cut.needs_watermark and t.persistent):
        apply_cut(t, cut)
        return None
    inflight: PendingOp | None = t.pending_cut
    if inflight is not None and inflight.cut is not None and inflight.cut.covers(cut):
        return inflight
    top = max(cut.evict_floor, cut.expiry_floor, t.source_trim_floor, t.delete_floor)
    body = EvictWatermarkBody(cut.evict_floor, top + 1, cut.expiry_floor).encode()
    frame = encode_control(FrameType.EVICT_WATERMARK, t.topic_id, body, now, True)
    try:
        commit = submit(t.topic_id, [frame], True)
    except SeglogError as e:
        log.warning("topic %r: eviction watermark not queued: %s", t.name, e.message)
        return None
    op = PendingOp(OpKind.EVICT, commit, cut=cut, owner=t)
    t.pending.append(op)
    t.pending_cut = op
    return op


def unlogged(t: TopicState, now: int) -> bool:
    """After a pass under `t.lock`: whether a floor it must raise has no watermark in
    flight (its submission was refused): a read must then fail, not pass the records the
    floor covers without their tombstone (SEMANTICS §4.2 step 4)."""
    cut = t.retention_cut(now)
    if cut is None or not (cut.needs_watermark and t.persistent):
        return False
    inflight: PendingOp | None = t.pending_cut
    return inflight is None or inflight.cut is None or not inflight.cut.covers(cut)


def apply_cut(t: TopicState, cut: RetentionCut) -> None:
    """Raise the floors, pop the dead front, drop sealed segments that became fully dead."""
    t.apply_cut(cut)
    if t.segments is not None:
        t.segments.drop_dead(t)


def apply_evict(t: TopicState, op: PendingOp) -> None:
    """The publisher's step for a completed EvictWatermark op."""
    if t.pending_cut is op:
        t.pending_cut = None
    if op.commit.error is not None:
        log.warning("topic %r: eviction watermark failed: %s", t.name, op.commit.error)
        op.error = internal(f"eviction watermark failed: {op.commit.error}")
        return
    assert op.cut is not None
    apply_cut(t, op.cut)
