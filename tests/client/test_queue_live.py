"""The client's queue surface against a real server: claim/ack/nack/extend, and `work()`
(sync and async) that keeps leases alive while a handler runs, acks on success and nacks on
an exception."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from seglog.client import AsyncClient, Client, Job, NotAQueue, TopicNotFound
from tests.client.test_watch_live import free_port
from tests.support.server import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url) as c:
        yield c


def make_queue(c: Client, name: str, n: int, **cfg: object) -> None:
    c.put_topic(name, {"type": "queue", **cfg})
    c.append(name, [{"data": {"i": i}, "tag": f"t{i}"} for i in range(n)])


def test_claim_ack_nack_extend(client: Client) -> None:
    make_queue(client, "cq.basic", 3)
    got = client.claim("cq.basic", "w1", max=2, lease_ms=10_000)
    assert [j.seq for j in got.jobs] == [1, 2] and got.ready == 1
    j: Job = got.jobs[0]
    assert (j.topic, j.data, j.tag, j.deliveries) == ("cq.basic", {"i": 0}, "t0", 1)
    assert j.lease_id.startswith("lease_") and j.deadline > j.ts
    ext = client.extend("cq.basic", "w1", [1, 3], 20_000)
    assert ext.done == 1 and ext.skipped == [3] and ext.deadlines[1] > j.deadline
    assert ext.ready is None
    nack = client.nack("cq.basic", "w1", [2], delay_ms=0)
    assert (nack.done, nack.ready, nack.in_flight) == (1, 2, 1)
    acked = client.ack("cq.basic", "w1", [1], lease_ids=[j.lease_id])
    assert acked.done == 1 and acked.in_flight == 0
    assert client.ack("cq.basic", "w1", [1]).skipped == [1]
    assert client.get_topic("cq.basic").queue == {"ready": 2, "in_flight": 0, "dead_lettered": 0}
    with pytest.raises(TopicNotFound):
        client.claim("cq.absent", "w")
    client.append("cq.log", [{"data": 1}])
    with pytest.raises(NotAQueue):
        client.ack("cq.log", "w", [1])


def test_work_acks_on_success_and_nacks_on_exception(client: Client) -> None:
    make_queue(client, "cq.work", 6)
    seen: list[tuple[int, int]] = []
    with client.work("cq.work", "w", max=3) as jobs:
        for job in jobs:
            seen.append((job.seq, job.deliveries))
            try:
                with job:
                    if job.seq == 2 and job.deliveries == 1:
                        raise ValueError("handler failed")
            except ValueError:
                pass
            if len(seen) == 7:
                break
    assert sorted(seen) == [(1, 1), (2, 1), (2, 2), (3, 1), (4, 1), (5, 1), (6, 1)]
    state = client.get_topic("cq.work")
    assert state.count == 0 and state.queue == {"ready": 0, "in_flight": 0, "dead_lettered": 0}


def test_work_keeps_the_lease_alive_while_the_handler_runs(client: Client) -> None:
    """A 300 ms lease outlives a 1.2 s handler only if the heartbeat extends it: meanwhile a
    second worker must get nothing."""
    make_queue(client, "cq.slow", 1)
    with client.work("cq.slow", "w", lease_ms=300) as jobs:
        job = next(jobs)
        with job:
            until = time.monotonic() + 1.2
            while time.monotonic() < until:
                assert client.claim("cq.slow", "thief").jobs == []
                time.sleep(0.05)
    assert client.get_topic("cq.slow").count == 0  # acked by the with block


def test_leaving_work_releases_what_it_held(client: Client) -> None:
    make_queue(client, "cq.leave", 4, lease_ms=600_000)
    jobs = client.work("cq.leave", "w", max=4)
    first = next(jobs)
    assert first.seq == 1
    jobs.close()  # 4 were leased to the stream; none settled
    deadline = time.monotonic() + 10
    while client.get_topic("cq.leave").queue["in_flight"] and time.monotonic() < deadline:  # type: ignore[index]
        time.sleep(0.02)
    assert [j.seq for j in client.claim("cq.leave", "other", max=10).jobs] == [1, 2, 3, 4]


def test_work_on_a_log_topic_raises(client: Client) -> None:
    client.append("cq.notq", [{"data": 1}])
    with pytest.raises(NotAQueue), client.work("cq.notq", "w") as jobs:
        next(jobs)


async def test_async_work(server: ServerProcess, client: Client) -> None:
    make_queue(client, "cq.async", 5)
    seen: list[int] = []
    async with AsyncClient(server.url) as ac:
        got = await ac.claim("cq.async", "poller")
        assert (await ac.nack("cq.async", "poller", [got.jobs[0].seq])).done == 1
        async with ac.work("cq.async", "aw", max=2) as jobs:
            async for job in jobs:
                try:
                    async with job:
                        seen.append(job.seq)
                        if job.seq == 3 and job.deliveries == 1:
                            raise RuntimeError("retry me")
                except RuntimeError:
                    pass
                if len(seen) == 6:
                    break
    assert sorted(seen) == [1, 2, 3, 3, 4, 5]
    assert client.get_topic("cq.async").count == 0


def test_work_reconnects_after_a_server_crash(tmp_path: Path) -> None:
    """SIGKILL mid-stream: the iterator reopens the stream once the server is back; the job
    held when the server died comes again, acked ones never do."""
    port = free_port()
    with (
        ServerProcess(tmp_path / "data", extra_args=("--port", str(port))) as srv,
        Client(srv.url, retries=20, max_backoff=0.5) as c,
    ):
        c.put_topic("cq.crash", {"type": "queue", "durability": "fsync"})
        c.append("cq.crash", [{"data": i} for i in range(6)])
        acked: list[int] = []
        seen: list[int] = []
        with c.work("cq.crash", "w", max=1) as jobs:
            for job in jobs:
                seen.append(job.seq)
                if job.seq == 3 and 3 not in acked and seen.count(3) == 1:
                    srv.kill()  # the crash loses this stream and job 3's lease
                    srv.start()
                    continue
                with job:
                    pass
                acked.append(job.seq)
                if sorted(acked) == [1, 2, 3, 4, 5, 6]:
                    break
        assert seen.count(3) == 2 and len(acked) == 6 and len(set(acked)) == 6
        assert c.get_topic("cq.crash").count == 0
