"""`seglog tail`/`consume` against a real server: kcat-style offsets, --until, --last with
--from, format strings, wire-shaped JSON lines, tombstones in words, and follow mode across a
server restart without a gap or a duplicate."""

from __future__ import annotations

import queue
import socket
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson
import pytest

from seglog.client import Client, ReadRecord
from tests.cli.conftest import cli_argv, cli_env, run_cli, run_cli_tty
from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
def filled(server: ServerProcess) -> Iterator[str]:
    """Topic `t20`: records 1..20 written in two batches (so two commit times), tagged."""
    with Client(server.url) as c:
        c.append("t20", [{"data": {"i": i}, "tag": f"k{i}"} for i in range(1, 11)], node="n1")
        c.append("t20", [{"data": {"i": i}, "tag": f"k{i}"} for i in range(11, 21)], node="n1")
    yield server.url


def seqs(*args: str, url: str) -> list[int]:
    r = run_cli(*args, url=url)
    assert r.code == 0, r.stderr
    return [line["$seq"] for line in r.json_lines()]


def test_offsets(filled: str) -> None:
    assert seqs("consume", "t20", url=filled) == list(range(1, 21))
    assert seqs("tail", "t20", url=filled) == list(range(11, 21))  # the last 10 by default
    assert seqs("tail", "t20", "-o", "beginning", url=filled) == list(range(1, 21))
    assert seqs("tail", "t20", "-o", "-3", url=filled) == [18, 19, 20]
    assert seqs("tail", "t20", "-o", "15", "--until", "17", url=filled) == [15, 16, 17]
    assert seqs("tail", "t20", "-o", "end", url=filled) == []
    assert seqs("consume", "t20", "--from", "18", url=filled) == [19, 20]
    assert seqs("tail", "t20", "--from", "0", "--last", "2", url=filled) == [19, 20]
    assert seqs("consume", "t20", "--until", "3", url=filled) == [1, 2, 3]
    past = run_cli("tail", "t20", "-o", "100", url=filled)  # not read as a recreated topic
    assert (past.code, past.stdout) == (0, "")
    assert "past the head (20)" in past.stderr


def test_offset_by_time(filled: str, client: Client) -> None:
    recs = [r for r in client.read("t20", 0) if isinstance(r, ReadRecord)]
    t = recs[10].ts  # record 11: the second batch
    want = [r.seq for r in recs if r.ts >= t]
    assert seqs("consume", "t20", "-o", f"@{t}", url=filled) == want
    iso = datetime.fromtimestamp(t / 1000, UTC).isoformat(timespec="milliseconds")
    assert seqs("consume", "t20", "-o", f"@{iso}", url=filled) == want
    assert seqs("consume", "t20", "-o", f"@{recs[-1].ts + 1}", url=filled) == []
    assert seqs("consume", "t20", "-o", "@0", url=filled) == list(range(1, 21))


def test_bad_starts_are_usage_errors_not_tracebacks(filled: str) -> None:
    for args in (["--from", "-10"], ["-o", "sideways"], ["-o", "@yesterday"], ["-o", "1", "--from", "2"]):  # fmt: skip
        r = run_cli("tail", "t20", *args, url=filled)
        assert r.code == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert "-o -10" in run_cli("tail", "t20", "--from", "-10", url=filled).stderr


def test_json_lines_use_the_wire_fields(filled: str) -> None:
    r = run_cli("tail", "t20", "-o", "20", url=filled)
    assert r.json_lines() == [
        {"$seq": 20, "$ts": r.json_lines()[0]["$ts"], "data": {"i": 20}, "$node": "n1", "$tag": "k20"}
    ]  # fmt: skip


def test_format_strings(filled: str) -> None:
    r = run_cli("tail", "t20", "-o", "-2", "-F", "%T %s %k %n %d %%", url=filled)
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == ['t20 19 k19 n1 {"i":19} %', 't20 20 k20 n1 {"i":20} %']
    r = run_cli("tail", "t20", "-o", "-1", "-F", "%s\\t%t\\n", url=filled)
    seq, ts = r.stdout.rstrip("\n").split("\t")
    assert seq == "20" and ts.isdigit()


def test_a_terminal_gets_readable_lines(filled: str) -> None:
    r = run_cli_tty("tail", "t20", "-o", "-1", url=filled)
    assert r.code == 0, r.stderr
    assert "20  " in r.stdout and "[k20]" in r.stdout and '{"i":20}' in r.stdout
    assert "$seq" not in r.stdout


def test_tombstones_are_explained_in_words(server: ServerProcess, client: Client) -> None:
    client.put_topic("capped", {"cap_records": 5})
    client.append("capped", [{"data": i} for i in range(10)])
    r = run_cli("consume", "capped", url=server.url)
    assert r.code == 0, r.stderr
    assert "capped: records 1..5 were evicted by the topic's cap; 5 missed" in r.stderr
    lines = r.json_lines()
    assert lines[0]["tombstone"]["gap_to"] == 5
    assert [x["$seq"] for x in lines[1:]] == [6, 7, 8, 9, 10]
    last = run_cli("tail", "capped", "--last", "8", url=server.url)
    assert [x["$seq"] for x in last.json_lines()] == [6, 7, 8, 9, 10]
    assert last.stderr == ""
    tty = run_cli_tty("consume", "capped", "-F", "%s", url=server.url)
    assert tty.stdout.split() == ["6", "7", "8", "9", "10"]
    assert "were evicted" in tty.stderr


def test_an_unknown_topic_is_one_error_line(server: ServerProcess) -> None:
    r = run_cli("tail", "nope", url=server.url)
    assert r.code == 1
    assert "topic_not_found" in r.stderr and len(r.stderr.strip().splitlines()) == 1


class Lines:
    """A process's stdout lines, read on a thread so the test can wait with a timeout."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.q: queue.Queue[bytes] = queue.Queue()
        self.t = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.t.start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.q.put(line)
        self.q.put(b"")

    def next(self) -> dict[str, Any]:
        line = self.q.get(timeout=30)
        assert line, "seglog exited early"
        obj = orjson.loads(line)
        assert isinstance(obj, dict)
        return obj

    def rest(self) -> list[bytes]:
        self.t.join(30)
        out = []
        while not self.q.empty():
            out.append(self.q.get_nowait())
        return [x for x in out if x]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_follow_survives_a_server_restart(tmp_path: Path) -> None:
    port = free_port()
    with (
        ServerProcess(tmp_path / "data", extra_args=("--port", str(port))) as srv,
        Client(srv.url) as c,
    ):
        c.append("live", [{"data": i} for i in range(1, 4)])
        proc = subprocess.Popen(
            cli_argv("tail", "live", "-f", "-o", "beginning", "--json"),
            env=cli_env(srv.url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        lines = Lines(proc.stdout)
        try:
            assert [lines.next()["$seq"] for _ in range(3)] == [1, 2, 3]
            srv.restart()
            c.append("live", [{"data": i} for i in range(4, 7)])
            assert [lines.next()["$seq"] for _ in range(3)] == [4, 5, 6]
            c.delete_topic("live")
            assert proc.wait(30) == 0
            assert lines.rest() == []  # nothing after 6: no duplicate
        finally:
            proc.kill()
            proc.wait(10)
        assert b"topic deleted" in proc.stderr.read()


def test_follow_stops_at_until(server: ServerProcess, client: Client) -> None:
    client.append("fu", [{"data": i} for i in range(1, 3)])
    proc = subprocess.Popen(
        cli_argv("tail", "fu", "-f", "-o", "beginning", "--until", "4", "-F", "%s"),
        env=cli_env(server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines = Lines(proc.stdout)
    assert [lines.q.get(timeout=30).strip() for _ in range(2)] == [b"1", b"2"]
    client.append("fu", [{"data": i} for i in range(3, 7)])
    assert proc.wait(30) == 0  # stopped by itself after seq 4
    assert [x.strip() for x in lines.rest()] == [b"3", b"4"]
