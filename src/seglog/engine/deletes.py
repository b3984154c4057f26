"""The record-delete path (SEMANTICS §7, STORAGE §3.3): submitted under the topic's lock so
it is ordered with appends, applied by the publisher after its commit. Its bound is the
reservation at submission; applying clamps it to the visible head, so seqs of a write that
failed (holes) never drag the floor above a later acked write (SEMANTICS §3.1)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from seglog.core.frame_bodies import DeleteBody
from seglog.core.frames import FrameType, encode_control
from seglog.engine.ops import OpKind, PendingOp, Submit
from seglog.engine.topic import TopicState
from seglog.errors import internal
from seglog.model import DeleteResult, Durability, Selector
from seglog.storage.wal_commit import Commit

log = logging.getLogger("seglog.engine")


def submit_delete(
    t: TopicState,
    before_seq: int | None,
    match: Selector | None,
    seqs: Sequence[int],
    now: int,
    submit: Submit,
) -> PendingOp:
    bound = t.reserved + 1
    # Only records existing (or reserved) at call time can be deleted (SEMANTICS §7.1): a
    # seq past them names nothing, and logged it would meet a later write on replay.
    named = bool(seqs)
    seqs = [s for s in seqs if s < bound]
    if named and not seqs:
        bound = 0  # kills nothing (`TopicState.apply_delete` below seq 0); nothing logged
        commit = Commit.completed()
    elif t.persistent:
        durable = t.config.durability is Durability.FSYNC
        body = DeleteBody(before_seq, match, tuple(seqs), None if seqs else bound).encode()
        frame = encode_control(FrameType.DELETE, t.topic_id, body, now, durable)
        commit = submit(t.topic_id, [frame], durable)
    else:
        commit = Commit.completed()
    op = PendingOp(
        OpKind.DELETE, commit, before_seq=before_seq, match=match, bound=bound, seqs=tuple(seqs)
    )
    op.owner = t
    t.pending.append(op)
    return op


def apply_delete(t: TopicState, op: PendingOp) -> None:
    """The publisher's step for a completed delete op."""
    err = op.commit.error
    if err is not None:
        op.error = internal(f"WAL commit failed: {err}")
        return
    before = t.count
    killed = t.apply_delete(op.before_seq, op.match, op.bound, op.seqs)
    if t.segments is not None:
        try:
            if killed:
                t.segments.flag_deleted(killed)
            t.segments.drop_dead(t, killed)
        except OSError as e:
            # The delete is durable already (its WAL frame, then snapshots); the flags and
            # unlinks only reclaim space sooner, and recovery redoes them.
            log.warning("topic %r: reclaiming deleted records failed: %s", t.name, e)
    op.delete_result = DeleteResult(
        t.name, before - t.count, t.earliest(), t.head, t.count, t.bytes
    )
