"""`seglog queue` against a real server: claim, ack, nack, extend, stats, and work running a
command per job (exit 0 acks, anything else nacks)."""

from __future__ import annotations

import sys

from seglog.client import Client
from tests.cli.conftest import run_cli, run_cli_tty
from tests.support.server import ServerProcess


def test_claim_ack_nack_extend_stats(server: ServerProcess, client: Client) -> None:
    client.put_topic("q1", {"type": "queue"})
    client.append("q1", [{"data": {"n": i}, "tag": f"t{i}"} for i in range(1, 6)])
    r = run_cli("queue", "claim", "q1", "--node", "w1", "--max", "3", url=server.url)
    assert r.code == 0, r.stderr
    jobs = r.json_lines()
    assert [(j["$seq"], j["data"], j["deliveries"]) for j in jobs] == [
        (1, {"n": 1}, 1),
        (2, {"n": 2}, 1),
        (3, {"n": 3}, 1),
    ]
    assert jobs[0]["lease_id"].startswith("lease_") and jobs[0]["$tag"] == "t1"
    assert "q1: claimed 3; 2 ready" in r.stderr

    a = run_cli("queue", "ack", "q1", "1", "9", "--node", "w1", url=server.url)
    assert a.code == 0, a.stderr
    body = a.json_lines()[0]
    assert (body["result"], body["done"], body["skipped"]) == ("acked", 1, [9])
    e = run_cli("queue", "extend", "q1", "2", "--node", "w1", "--lease-ms", "60000",
                url=server.url)  # fmt: skip
    assert e.json_lines()[0]["done"] == 1
    n = run_cli_tty("queue", "nack", "q1", "3", "--node", "w1", "--delay-ms", "60000",
                    url=server.url)  # fmt: skip
    assert "q1: nacked 1" in n.stdout
    s = run_cli("queue", "stats", "q1", url=server.url)
    assert s.json_lines() == [{"topic": "q1", "ready": 2, "in_flight": 1, "dead_lettered": 0}]
    tty = run_cli_tty("queue", "claim", "q1", "--node", "w2", url=server.url)
    assert "lease_" in tty.stdout and '{"n":4}' in tty.stdout


def test_queue_commands_on_a_log_topic(server: ServerProcess, client: Client) -> None:
    client.put_topic("notq")
    r = run_cli("queue", "claim", "notq", "--node", "w", url=server.url)
    assert r.code == 1 and "not_a_queue" in r.stderr and "--type queue" in r.stderr
    s = run_cli("queue", "stats", "notq", url=server.url)
    assert s.code == 1 and "not a queue" in s.stderr


def test_work_runs_a_command_per_job(server: ServerProcess, client: Client) -> None:
    client.put_topic("q2", {"type": "queue"})
    client.append("q2", [{"data": {"ok": ok}} for ok in (True, False, True)])
    handler = (
        "import json, os, sys; job = json.load(sys.stdin); "
        "assert os.environ['SEGLOG_JOB_SEQ'] == str(job['$seq']); "
        "print('handled', job['$seq']); sys.exit(0 if job['data']['ok'] else 3)"
    )
    r = run_cli(
        "queue", "work", "q2", "--node", "w1", "--count", "3", "--nack-delay-ms", "60000",
        "--", sys.executable, "-c", handler, url=server.url,
    )  # fmt: skip
    assert r.code == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["handled 1", "handled 2", "handled 3"]
    assert "job 2 failed (exit 3); nacked" in r.stderr
    assert "q2: 2 acked, 1 nacked" in r.stderr
    st = client.get_topic("q2")
    assert st.count == 1  # only the failed job is left
