"""`seglog tail` / `consume` against a real server, where deleted seqs sit at the edges:
`--until` on a deleted seq ends a follow, "the last N" counts records, and a reader that
closes stdout is not a failure."""

from __future__ import annotations

import subprocess

import orjson

from seglog.client import Client
from tests.cli.conftest import cli_argv, cli_env, run_cli
from tests.support.server import ServerProcess


def _seqs(stdout: str) -> list[int]:
    return [orjson.loads(line)["$seq"] for line in stdout.splitlines()]


def _five_with_last_deleted(client: Client, topic: str) -> None:
    client.append(topic, [{"data": i, "tag": f"t{i}"} for i in range(1, 6)])
    client.delete_records(topic, match="t5")  # live 1..4, head 5


def test_follow_until_a_deleted_seq_ends_once_the_cursor_passes_it(
    server: ServerProcess, client: Client
) -> None:
    """docs/cli.md: --until stops after that seq, also when following — no record 5
    will ever come to say so."""
    _five_with_last_deleted(client, "u")
    plain = run_cli("tail", "u", "-o", "1", "--until", "5", url=server.url)
    assert plain.code == 0 and _seqs(plain.stdout) == [1, 2, 3, 4]
    follow = run_cli("tail", "u", "-o", "1", "--until", "5", "-f", url=server.url, timeout=30)
    assert follow.code == 0 and _seqs(follow.stdout) == [1, 2, 3, 4]


def test_the_last_n_are_records_not_seqs(server: ServerProcess, client: Client) -> None:
    _five_with_last_deleted(client, "l")
    client.delete_records("l", match="t2")  # live 1, 3, 4
    for args in (("-o", "-2"), ("--last", "2"), ("-o", "beginning", "--last", "2")):
        r = run_cli("tail", "l", *args, url=server.url)
        assert r.code == 0 and _seqs(r.stdout) == [3, 4], args
    r = run_cli("tail", "l", "-o", "-10", url=server.url)
    assert _seqs(r.stdout) == [1, 3, 4]  # fewer than N: all of them
    r = run_cli("tail", "l", "-o", "-0", url=server.url)
    assert r.code == 0 and r.stdout == ""


def test_a_closed_stdout_ends_the_command_as_sigpipe_would(
    server: ServerProcess, client: Client
) -> None:
    """`seglog consume t | head -1`: 141, as for a Unix tool stopped by SIGPIPE, quietly —
    not 1, which means a failure of seglog (docs/cli.md)."""
    client.append("p", [{"data": "x" * 200} for _ in range(5_000)])
    for args in (("consume", "p"), ("tail", "p", "-o", "beginning", "-f")):
        proc = subprocess.Popen(
            cli_argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cli_env(server.url),
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        proc.stdout.close()  # the reader goes away
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 141, (args, stderr)
        assert b"Traceback" not in stderr and b"error" not in stderr, stderr
