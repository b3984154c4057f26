"""The `/work` stream loop (API §9.5) in process, with a fake engine and the 250 ms
re-check pushed out of reach: a settle of the topic's jobs (ack/nack) refills the stream
at once, an append does too, and closing releases the stream's leases and wakes others."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from seglog.clock import ManualClock
from seglog.core.leases import Claimer
from seglog.engine.aio import Kick
from seglog.engine.queues import Job
from seglog.http import work_stream
from seglog.http.queue_request import WorkQuery
from seglog.http.work_stream import WorkStream
from seglog.model import Record


class FakeDb:
    def __init__(self) -> None:
        self.held = 0
        self.held_by: dict[int, int] | None = None  # per connection, when a test sets it
        self.claims: asyncio.Queue[int] = asyncio.Queue()
        self.next_seq = 1
        self.released: list[int] = []

    def queue_topic(self, name: str) -> None:
        return None

    def held_by_conn(self, name: str, conn: int) -> int:
        return self.held if self.held_by is None else self.held_by.get(conn, 0)

    async def claim(self, name: str, c: Claimer, lease_ms: int | None) -> tuple[list[Job], int]:
        jobs = []
        for _ in range(c.max):
            jobs.append(Job(Record(self.next_seq, 0, b"{}"), self.next_seq, 10**13, 1))
            self.next_seq += 1
        self.held += len(jobs)
        if self.held_by is not None:
            self.held_by[c.conn] = self.held_by.get(c.conn, 0) + len(jobs)
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
        self.work_kicks: dict[str, dict[int, Kick]] = {}
        self.appended = asyncio.Event()
        self.queue_settled = ServerState.queue_settled.__get__(self)
        self.work_kick = ServerState.work_kick.__get__(self)
        self.drop_work_kick = ServerState.drop_work_kick.__get__(self)

    async def wait_for_append(
        self, topics: list[str], timeout_s: float, kick: Kick | None = None
    ) -> bool:
        """The real one's contract: an append (here: `appended`), `kick`, or the timeout."""
        if kick is not None and kick.is_set():
            return True
        settled: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if kick is not None:
            kick.arm(settled)
        appended = asyncio.ensure_future(self.appended.wait())
        try:
            done, _ = await asyncio.wait(
                (settled, appended), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if kick is not None:
                kick.arm(None)
            appended.cancel()
        if appended in done:
            self.appended.clear()
        return bool(done)


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
    st.queue_settled("jobs", {stream.conn})
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
    other = st.work_kick("jobs", 10**9)  # another stream of the topic
    await stream.close()
    assert st.db.released == [stream.conn] and other.is_set()  # released: anyone may take
    assert stream.conn not in st.work_kicks["jobs"]


async def test_an_ack_wakes_only_the_stream_that_held_the_jobs(slow_recheck: None) -> None:
    st: Any = FakeState()
    st.db.held_by = {}
    streams = [WorkStream(st, "jobs", WorkQuery(f"w{i}", 2, None), ManualClock()) for i in range(3)]

    async def send(_b: bytes) -> None:
        pass

    tasks = [asyncio.ensure_future(s.run(send)) for s in streams]
    for _ in streams:
        assert await asyncio.wait_for(st.db.claims.get(), 5) == 2
    for stream in streams:
        st.db.held_by[stream.conn] = 0  # every stream's jobs were acked ...
    st.queue_settled("jobs", {streams[1].conn})  # ... but this ack names stream 1's only
    assert await asyncio.wait_for(st.db.claims.get(), 5) == 2
    for _ in range(50):  # loop turns enough for any woken stream to claim: none does
        await asyncio.sleep(0)
    assert st.db.claims.empty()
    st.queue_settled("jobs", None)  # a nack: every stream re-checks; 0 and 2 refill
    for _ in range(2):
        assert await asyncio.wait_for(st.db.claims.get(), 5) == 2
    assert st.db.held_by == {s.conn: 2 for s in streams}
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
