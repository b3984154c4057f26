"""The `/work` stream loop (API §9.5) in process, with a fake engine and the 250 ms
re-check pushed out of reach: a settle of the topic's jobs (ack/nack) refills the stream
at once, an append does too, and closing releases the stream's leases and wakes others."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from seglog.clock import ManualClock
from seglog.core.leases import Claimer
from seglog.engine.queues import Job
from seglog.http import work_stream
from seglog.http.queue_request import WorkQuery
from seglog.http.work_stream import WorkStream
from seglog.model import Record


class FakeDb:
    def __init__(self) -> None:
        self.held = 0
        self.claims: asyncio.Queue[int] = asyncio.Queue()
        self.next_seq = 1
        self.released: list[int] = []

    def queue_topic(self, name: str) -> None:
        return None

    def held_by_conn(self, name: str, conn: int) -> int:
        return self.held

    async def claim(self, name: str, c: Claimer, lease_ms: int | None) -> tuple[list[Job], int]:
        jobs = []
        for _ in range(c.max):
            jobs.append(Job(Record(self.next_seq, 0, b"{}"), self.next_seq, 10**13, 1))
            self.next_seq += 1
        self.held += len(jobs)
        await self.claims.put(c.max)
        return jobs, 0

    def release_conn(self, name: str, conn: int) -> int:
        self.released.append(conn)
        return self.held


class FakeState:
    """The parts of ServerState the stream uses; the settle events are the real ones."""

    def __init__(self) -> None:
        from seglog.http.app_state import ServerState

        self.db = FakeDb()
        self.shutting_down = False
        self.queue_settles: dict[str, asyncio.Event] = {}
        self.appended = asyncio.Event()
        self.queue_settled = ServerState.queue_settled.__get__(self)
        self.queue_settle_event = ServerState.queue_settle_event.__get__(self)

    async def wait_for_append(self, topics: list[str], timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self.appended.wait(), timeout_s)
        except TimeoutError:
            return False
        self.appended.clear()
        return True


@pytest.fixture
def slow_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(work_stream, "RECHECK_S", 3600.0)


async def test_a_settle_or_an_append_refills_at_once(slow_recheck: None) -> None:
    st: Any = FakeState()
    frames: list[bytes] = []

    async def send(b: bytes) -> None:
        frames.append(b)

    stream = WorkStream(st, "jobs", WorkQuery("w", 3, None), ManualClock())
    task = asyncio.ensure_future(stream.run(send))
    assert await asyncio.wait_for(st.db.claims.get(), 5) == 3
    st.db.held = 1  # two of the three were acked
    st.queue_settled("jobs")
    assert await asyncio.wait_for(st.db.claims.get(), 5) == 2
    st.db.held = 2  # one more acked, and new jobs appended
    st.appended.set()
    assert await asyncio.wait_for(st.db.claims.get(), 5) == 1
    sent = [f for f in frames if b"event: job" in f]
    assert len(sent) == 3  # one send per claim, however many jobs it leased
    assert b"".join(sent).count(b"\nevent: job\n") == 6
    assert all(f.startswith(b"id: ") and f.endswith(b"\n\n") for f in sent)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    other = st.queue_settle_event("jobs")
    await stream.close()
    assert st.db.released == [stream.conn] and other.is_set()
