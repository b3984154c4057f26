"""`watch()`, the WebSocket session and `seglog tail --follow` against a real server process."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import pytest

from seglog.client import (
    AsyncClient,
    Client,
    ReconnectPolicy,
    TopicNotFound,
    WatchCaughtUp,
    WatchRecord,
    WatchTombstone,
    WatchTopicDeleted,
)
from tests.support.server import ServerProcess, clean_env

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def url(server: ServerProcess) -> str:
    return server.url


@pytest.fixture
def client(url: str) -> Iterator[Client]:
    with Client(url) as c:
        yield c


@pytest.fixture
async def aclient(url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(url) as c:
        yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until_caught_up(events: Iterator[Any]) -> list[int]:
    seqs: list[int] = []
    for ev in events:
        if isinstance(ev, WatchCaughtUp):
            return seqs
        if isinstance(ev, WatchRecord):
            seqs.append(ev.seq)
    raise AssertionError("the watch ended before catching up")


def test_sync_watch_backlog_then_live(client: Client) -> None:
    client.append("live-a", [{"data": i} for i in range(1, 4)])
    with client.watch(["live-a"], heartbeat_ms=1000) as w:
        assert until_caught_up(w) == [1, 2, 3]
        client.append("live-a", [{"data": 4, "tag": "t4", "node": "n1"}])
        ev = next(ev for ev in w if isinstance(ev, WatchRecord))
        assert (ev.topic, ev.seq, ev.data, ev.node, ev.tag) == ("live-a", 4, 4, "n1", None)
        assert w.cursors == {"live-a": 4}
    client.delete_topic("live-a")


def test_multi_topic_watch_resumes_from_last_event_id(client: Client) -> None:
    client.append("live-b1", [{"data": 1}, {"data": 2}])
    client.append("live-b2", [{"data": 1}])
    with client.watch({"live-b1": 0, "live-b2": None}) as w:
        first = next(ev for ev in w if isinstance(ev, WatchRecord))
        assert (first.topic, first.seq) == ("live-b1", 1)
        resume = w.last_event_id
    assert resume is not None
    client.append("live-b2", [{"data": 2}])
    with client.watch(["live-b1", "live-b2"], last_event_id=resume) as w:
        got: set[tuple[str, int]] = set()
        while len(got) < 2:
            ev = next(w)
            if isinstance(ev, WatchRecord):
                got.add((ev.topic, ev.seq))
    assert got == {("live-b1", 2), ("live-b2", 2)}


def test_watch_ends_when_its_topic_is_deleted(client: Client) -> None:
    client.append("live-c", [{"data": 1}])
    with client.watch("live-c") as w:
        assert until_caught_up(w) == [1]
        client.delete_topic("live-c")
        rest = list(w)
    last = rest[-1]
    assert isinstance(last, WatchTopicDeleted) and last.topic == "live-c"


def test_resume_into_a_recreated_topic_delivers_the_new_records(client: Client) -> None:
    client.append("live-re", [{"data": i} for i in range(1, 6)])
    with client.watch("live-re") as w:
        assert until_caught_up(w) == [1, 2, 3, 4, 5]
        resume = w.last_event_id
    client.delete_topic("live-re")
    client.append("live-re", [{"data": "new-1"}, {"data": "new-2"}])
    with client.watch("live-re", last_event_id=resume) as w:
        events = []
        for ev in w:
            events.append(ev)
            if isinstance(ev, WatchCaughtUp):
                break
    tomb = events[0]
    assert isinstance(tomb, WatchTombstone) and tomb.gap_from == 1
    assert [e.data for e in events if isinstance(e, WatchRecord)] == ["new-1", "new-2"]


def test_watch_of_an_unknown_topic_raises(client: Client) -> None:
    with pytest.raises(TopicNotFound):
        client.watch("live-never-created").open()


async def test_async_watch_backlog_then_live(aclient: AsyncClient) -> None:
    await aclient.append("live-d", [{"data": 1}])
    async with aclient.watch("live-d") as w:
        seqs: list[int] = []
        async for ev in w:
            if isinstance(ev, WatchRecord):
                seqs.append(ev.seq)
                if ev.seq == 2:
                    break
            elif isinstance(ev, WatchCaughtUp) and seqs == [1]:
                await aclient.append("live-d", [{"data": 2}])
    assert seqs == [1, 2]


def test_watch_resumes_across_a_server_restart(tmp_path: Path) -> None:
    port = free_port()
    with (
        ServerProcess(tmp_path / "data", extra_args=("--port", str(port))) as srv,
        Client(srv.url) as c,
    ):
        c.append("live-r", [{"data": i} for i in range(1, 6)])
        policy = ReconnectPolicy(initial=0.1, max_delay=1.0, attempts=50)
        with c.watch("live-r", reconnect=policy) as w:
            assert until_caught_up(w) == [1, 2, 3, 4, 5]
            srv.restart()
            c.append("live-r", [{"data": i} for i in range(6, 9)])
            seqs: list[int] = []
            for ev in w:  # the stream breaks, the session is gone (404), a new one resumes at 5
                if isinstance(ev, WatchRecord):
                    seqs.append(ev.seq)
                    if ev.seq == 8:
                        break
        assert seqs == [6, 7, 8]


def test_tail_follow_survives_a_server_restart(tmp_path: Path) -> None:
    port = free_port()
    with (
        ServerProcess(tmp_path / "data", extra_args=("--port", str(port))) as srv,
        Client(srv.url) as c,
    ):
        c.append("live-t", [{"data": i} for i in range(1, 4)])
        env = clean_env({"PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
        cmd = [sys.executable, "-m", "seglog", "tail", "live-t", "-f", "--from", "0"]
        proc = subprocess.Popen(
            [*cmd, "--url", srv.url], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        lines = JsonLines(proc)
        try:
            assert [lines.next()["$seq"] for _ in range(3)] == [1, 2, 3]
            srv.restart()
            c.append("live-t", [{"data": i} for i in range(4, 7)])
            assert [lines.next()["$seq"] for _ in range(3)] == [4, 5, 6]
            c.delete_topic("live-t")
            assert proc.wait(30) == 0
            assert lines.remaining() == []  # nothing after 6: no duplicate
        finally:
            proc.kill()
            proc.wait(10)
        assert proc.stderr is not None
        assert b"topic deleted" in proc.stderr.read()


class JsonLines:
    """The JSON lines a process prints, read by a thread so a test can wait with a timeout
    (select() on a buffered pipe would miss lines already pulled into the buffer)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self._lines: queue.Queue[bytes] = queue.Queue()
        self.rest: list[bytes] = []
        self._thread = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(b"")

    def next(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no output from seglog tail in time") from None
        assert line, "seglog tail exited early"
        obj = orjson.loads(line)
        assert isinstance(obj, dict)
        return obj

    def remaining(self, timeout: float = 30.0) -> list[bytes]:
        """Every further line until the process closes its stdout."""
        self._thread.join(timeout)
        out = []
        while not self._lines.empty():
            out.append(self._lines.get_nowait())
        return [line for line in out if line]


def test_websocket_subscribe_publish_ping(client: Client) -> None:
    client.put_topic("live-ws")
    with client.websocket() as ws:
        sub = ws.subscribe("live-ws")
        assert sub.topics["live-ws"].from_seq == 0
        ack = ws.publish("live-ws", [{"data": {"p": 1}}])
        assert (ack.first_seq, ack.last_seq) == (1, 1)
        ev = ws.next_event(10.0)
        while not isinstance(ev, WatchRecord):
            ev = ws.next_event(10.0)
        assert (ev.topic, ev.seq, ev.data) == ("live-ws", 1, {"p": 1})
        assert ws.ping() >= 0.0
        with pytest.raises(TopicNotFound):
            ws.subscribe("live-ws-never-created")
        assert ws.unsubscribe("live-ws").topics == ["live-ws"]


async def test_async_websocket_subscribe_publish(aclient: AsyncClient) -> None:
    await aclient.put_topic("live-aws")
    async with aclient.websocket() as ws:
        await ws.subscribe("live-aws", tail=True)
        await ws.publish("live-aws", [{"data": 1}, {"data": 2}])
        seqs: list[int] = []
        async for ev in ws:
            if isinstance(ev, WatchRecord):
                seqs.append(ev.seq)
                if len(seqs) == 2:
                    break
    assert seqs == [1, 2]
