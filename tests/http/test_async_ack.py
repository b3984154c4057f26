"""`AsyncEngine.ack` whose request is cancelled while its delete is in flight (a client
gone, a server stopping): the jobs are settled when the delete lands or fails, as if the
request had waited (SEMANTICS §10.4), not left out of every claim until a restart."""

from __future__ import annotations

import asyncio

import pytest

from seglog.clock import ManualClock
from seglog.core.frames import FrameType
from seglog.core.leases import Claimer
from seglog.http import async_engine
from seglog.http.async_engine import AsyncEngine
from seglog.model import RecordIn, TopicConfig, TopicType
from seglog.storage.wal_commit import Commit, WalError
from tests.conftest import EngineFactory


@pytest.mark.parametrize("outcome", ["delete fails", "delete lands"])
async def test_a_cancelled_ack_settles_its_jobs_when_the_delete_ends(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    e = make_engine()
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, lease_ms=60_000))
    e.write("q", [RecordIn.of({"job": i}) for i in range(3)])
    db = AsyncEngine(e)
    claimed = e.queues.claim("q", [Claimer("w", 3)], None).jobs[0]
    assert [j.record.seq for j in claimed] == [1, 2, 3]
    real, held = e._submit, Commit()

    def holding(tid: int, frames: list[bytes], durable: bool) -> Commit:
        if frames[0][4] == FrameType.DELETE:  # the type byte after the u32 frame length
            return held  # the delete's commit ends when the test says
        return real(tid, frames, durable)

    monkeypatch.setattr(e, "_submit", holding)
    ack = asyncio.ensure_future(db.ack("q", "w", [1, 2], []))
    await asyncio.sleep(0)  # the ack is now waiting for its delete
    assert not ack.done()
    ack.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ack
    assert [j.record.seq for j in e.queues.claim("q", [Claimer("x", 9)], None).jobs[0]] == []
    assert len(async_engine._background) == 1
    held._complete(WalError("disk on fire") if outcome == "delete fails" else None)
    await asyncio.gather(*async_engine._background)  # the task that settles the ack
    again = [j.record.seq for j in e.queues.claim("q", [Claimer("x", 9)], None).jobs[0]]
    assert again == ([1, 2] if outcome == "delete fails" else [])


async def test_ack_and_nack_count_after_a_retention_pass(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    """SEMANTICS §4.2: retention runs before queue counters — an ack's or nack's `ready`
    and `in_flight` leave out jobs whose TTL passed."""
    e = make_engine()
    e.put_topic("q", TopicConfig(type=TopicType.QUEUE, ttl_ms=1_000, lease_ms=60_000))
    e.write("q", [RecordIn.of({"job": i}) for i in range(4)])
    db = AsyncEngine(e)
    assert [j.record.seq for j in e.queues.claim("q", [Claimer("w", 2)], None).jobs[0]] == [1, 2]
    clock.advance(5_000)  # every job expired; the leases (60 s) did not
    nacked = await db.nack("q", "w", [1], [], 0)
    assert nacked.done == [1] and (nacked.ready, nacked.in_flight) == (0, 0)
    skipped = await db.ack("q", "other", [2], [])
    assert skipped.skipped == [2] and (skipped.ready, skipped.in_flight) == (0, 0)
    assert e.topics["q"].expiry_floor == 4
