"""`seglog produce` against a real server: lines are sent as they arrive (linger), big inputs go
in several batches, a bad line is reported by number, --raw, tag/node templates, idempotency."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

from seglog.client import Client, ReadRecord
from tests.cli.conftest import cli_argv, cli_env, run_cli
from tests.support.server import ServerProcess


def records(client: Client, topic: str) -> list[ReadRecord]:
    return [r for r in client.read(topic, 0) if isinstance(r, ReadRecord)]


def test_lines_are_sent_as_they_arrive(server: ServerProcess, client: Client) -> None:
    client.put_topic("live")
    proc = subprocess.Popen(
        cli_argv("produce", "live", "--linger-ms", "20"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(server.url),
    )
    assert proc.stdin is not None
    try:
        reader = client.read("live", 0, follow=True, wait_ms=10_000)
        for n in range(1, 4):
            proc.stdin.write(b'{"n": %d}\n' % n)
            proc.stdin.flush()
            rec = next(reader)  # long-polls until the record is committed; stdin stays open
            assert isinstance(rec, ReadRecord)
            assert (rec.seq, rec.data) == (n, {"n": n})
            assert proc.poll() is None
        reader.close()
    finally:
        _, err = proc.communicate(timeout=30)  # closes stdin: EOF ends the producer
    assert proc.returncode == 0, err
    assert "live: 3 records in 3 batches, seqs 1..3" in err.decode()


def test_ten_thousand_and_one_lines_go_in_several_batches(
    server: ServerProcess, client: Client
) -> None:
    lines = "".join(f'{{"i": {i}}}\n' for i in range(10_001))
    r = run_cli("produce", "big", url=server.url, stdin=lines)
    assert r.code == 0, r.stderr
    assert "big: 10001 records in 21 batches, seqs 1..10001" in r.stderr
    st = client.get_topic("big")
    assert (st.count, st.head_seq) == (10_001, 10_001)
    assert r.stdout == ""


def test_a_bad_line_is_reported_by_number(server: ServerProcess, client: Client) -> None:
    r = run_cli(
        "produce", "bad", url=server.url, stdin='{"a": 1}\n\n{"a": 2}\nnot json\n{"a": 3}\n'
    )
    assert r.code == 1
    assert "line 4: not JSON" in r.stderr
    assert "--raw" in r.stderr
    assert "Traceback" not in r.stderr
    assert [x.data for x in records(client, "bad")] == [{"a": 1}, {"a": 2}]


def test_undecodable_input_is_reported_by_line(server: ServerProcess, client: Client) -> None:
    """Bytes that are not UTF-8 (a binary file, a Latin-1 log) stop the run at their line,
    after sending the lines before it, with or without --raw, whatever stdin's error
    handler (strict in most UTF-8 locales, surrogateescape in C.UTF-8): no traceback, no
    exit 0 with lines left unsent."""
    body = b'{"a": 1}\n"two"\nbad \xff\n{"a": 3}\n'
    runs = [
        (f"undecodable-{i}", raw, io)
        for raw in ((), ("--raw",))
        for i, io in enumerate(
            ({}, {"PYTHONIOENCODING": "utf-8:strict"}, {"LC_ALL": "C"}, {"LC_ALL": "C.UTF-8"})
        )
    ]
    for topic, raw, io in runs:
        topic += "-raw" if raw else ""
        p = subprocess.run(
            cli_argv("produce", topic, *raw),
            input=body,
            capture_output=True,
            env=cli_env(server.url, io),
            timeout=60,
            check=False,
        )
        err = p.stderr.decode()
        assert p.returncode == 1, err
        assert "Traceback" not in err, (io, err)
        assert "line 3: holds bytes that are not text" in err, (io, err)
        assert len(records(client, topic)) == 2


def test_raw_lines_and_templates(server: ServerProcess, client: Client) -> None:
    r = run_cli("produce", "raw", "--raw", url=server.url, stdin="hello world\n{not json}\n")
    assert r.code == 0, r.stderr
    assert [x.data for x in records(client, "raw")] == ["hello world", "{not json}"]
    lines = '{"user": "ann", "host": {"name": "h1"}}\n{"user": "bob", "host": {"name": "h2"}}\n'
    r = run_cli(
        "produce", "tpl", "--tag", "user-{user}", "--node", "{host[name]}",
        url=server.url, stdin=lines,
    )  # fmt: skip
    assert r.code == 0, r.stderr
    got = records(client, "tpl")
    assert [(x.tag, x.node) for x in got] == [("user-ann", "h1"), ("user-bob", "h2")]
    r = run_cli("produce", "tpl", "--tag", "{missing}", url=server.url, stdin='{"a": 1}\n')
    assert r.code == 1 and "line 1" in r.stderr and "missing" in r.stderr


def test_arguments_and_idempotency_key(server: ServerProcess, client: Client) -> None:
    args = ("produce", "idem", '{"x": 1}', '"two"', "--idempotency-key", "run-1")
    assert run_cli(*args, url=server.url).code == 0
    again = run_cli(*args, url=server.url)
    assert again.code == 0
    assert "deduped" in again.stderr
    assert client.get_topic("idem").count == 2


def test_a_rerun_after_a_failed_run_writes_every_line_once(
    server: ServerProcess, client: Client
) -> None:
    """docs/cli.md: --idempotency-key makes re-running the same input safe. The failed run
    sent lines 4–5 as a short batch before line 6 stopped it, under the key a full batch
    4–6 reuses: the re-run must still write line 6, and must not write 4–5 again."""
    lines = [f'{{"n": {i}}}' for i in range(1, 10)]
    bad = [*lines[:5], '{"n": 6', *lines[6:]]
    args = ("produce", "imp", "--batch-size", "3", "--idempotency-key", "import-1")
    assert run_cli(*args, url=server.url, stdin="\n".join(bad) + "\n").code == 1
    assert [x.data["n"] for x in records(client, "imp")] == [1, 2, 3, 4, 5]
    for _ in range(2):  # and a third run changes nothing
        again = run_cli(*args, url=server.url, stdin="\n".join(lines) + "\n")
        assert again.code == 0, again.stderr
        assert [x.data["n"] for x in records(client, "imp")] == list(range(1, 10))
    assert "imp: 9 records in 4 batches" in again.stderr
    two = ("produce", "imp", "--batch-size", "2", "--idempotency-key", "import-1")
    other = run_cli(*two, url=server.url, stdin="\n".join(lines))
    assert other.code == 1 and "--batch-size" in other.stderr  # batches that do not line up


def test_key_is_a_deprecated_alias(server: ServerProcess, client: Client) -> None:
    r = run_cli("produce", "oldkey", "1", "--key", "k1", url=server.url)
    assert r.code == 0
    assert "--key is deprecated" in r.stderr and "--idempotency-key" in r.stderr
    assert run_cli("produce", "oldkey", "1", "--key", "k1", url=server.url).code == 0
    assert client.get_topic("oldkey").count == 1
    assert "--key" not in run_cli("produce", "--help").stdout


def test_a_server_rejection_names_the_batch(server: ServerProcess) -> None:
    r = run_cli("produce", "bad name!", "1", url=server.url)
    assert r.code == 1
    assert "line 1" in r.stderr and "invalid_request" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 2  # summary + the error


def test_a_file_on_a_terminal_gets_a_progress_bar(
    server: ServerProcess, client: Client, tmp_path: Path
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(f'{{"i": {i}}}\n' for i in range(20_000)))
    master, slave = pty.openpty()
    with src.open("rb") as stdin:
        proc = subprocess.Popen(
            cli_argv("produce", "bar", "--batch-size", "1000"),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=slave,
            env=cli_env(server.url, {"TERM": "xterm"}),
        )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(60) == 0
    shown = b"".join(chunks).decode(errors="replace")
    assert "records" in shown and "/s" in shown
    assert "bar: 20000 records in 20 batches, seqs 1..20000" in shown
    assert client.get_topic("bar").count == 20_000
