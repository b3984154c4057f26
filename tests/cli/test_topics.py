"""`seglog topics`: create refuses to replace an existing topic, alter changes only the fields
given and prints the diff, describe is a panel on a terminal and JSON in a pipe, with the
write rate seen between two looks at the head."""

from __future__ import annotations

import threading

from seglog.cli.topics import WriteRate
from seglog.client import Client
from tests.cli.conftest import run_cli, run_cli_tty
from tests.support.server import ServerProcess


def test_create_fails_on_an_existing_topic_and_leaves_it_alone(
    server: ServerProcess, client: Client
) -> None:
    r = run_cli("topics", "create", "keep", "--durability", "fsync", "--cap-records", "1000",
                url=server.url)  # fmt: skip
    assert r.code == 0, r.stderr
    again = run_cli("topics", "create", "keep", url=server.url)
    assert again.code == 1
    assert "already exists" in again.stderr and "topics alter" in again.stderr
    cfg = client.get_topic("keep").config
    assert (cfg["durability"], cfg["cap_records"]) == ("fsync", 1000)
    ok = run_cli("topics", "create", "keep", "--if-not-exists", "--ttl-ms", "5", url=server.url)
    assert ok.code == 0, ok.stderr
    assert "ttl_ms" in ok.stderr  # said that it differs, changed nothing
    assert ok.json_lines()[0]["result"] == "exists"
    assert client.get_topic("keep").config["ttl_ms"] == 0


def test_alter_changes_only_the_given_fields(server: ServerProcess, client: Client) -> None:
    client.put_topic("alt", {"durability": "fsync", "cap_records": 1000, "ttl_ms": 60_000})
    r = run_cli("topics", "alter", "alt", "--cap-records", "50", url=server.url)
    assert r.code == 0, r.stderr
    assert r.json_lines() == [{"topic": "alt", "changed": {"cap_records": [1000, 50]}}]
    cfg = client.get_topic("alt").config
    assert (cfg["durability"], cfg["cap_records"], cfg["ttl_ms"]) == ("fsync", 50, 60_000)
    tty = run_cli_tty("topics", "alter", "alt", "--durability", "disk", "--priority", "7",
                      url=server.url)  # fmt: skip
    assert "durability: 'fsync' -> 'disk'" in tty.stdout
    assert "priority: None -> 7" in tty.stdout
    same = run_cli_tty("topics", "alter", "alt", "--priority", "7", url=server.url)
    assert "no change" in same.stdout
    assert run_cli("topics", "alter", "alt", url=server.url).code == 2
    missing = run_cli("topics", "alter", "nope", "--ttl-ms", "1", url=server.url)
    assert missing.code == 1 and "topic_not_found" in missing.stderr


def test_describe_is_a_panel_on_a_terminal_and_json_in_a_pipe(
    server: ServerProcess, client: Client
) -> None:
    client.put_topic("jobsq", {"type": "queue", "cap_bytes": 3 * 1024 * 1024})
    client.append("jobsq", [{"data": "x" * 2000} for _ in range(3)])
    piped = run_cli("topics", "describe", "jobsq", url=server.url)
    assert piped.code == 0, piped.stderr
    st = piped.json_lines()[0]
    assert st["type"] == "queue" and st["count"] == 3
    assert st["queue"] == {"ready": 3, "in_flight": 0, "dead_lettered": 0}
    tty = run_cli_tty("topics", "describe", "jobsq", url=server.url)
    assert tty.code == 0, tty.stderr
    for text in ("topic jobsq", "KiB", "3.0 MiB", "ready 3, in flight 0", "durability"):
        assert text in tty.stdout, tty.stdout


def test_write_rate_is_the_head_moved_over_the_window() -> None:
    assert WriteRate.between(10, 60, 2.0) == WriteRate(25.0, 2.0)
    assert WriteRate.between(5, 5, 1.0).records_per_s == 0.0
    assert WriteRate.between(9, 3, 1.0).records_per_s == 0.0  # a recreated topic: no rate
    assert str(WriteRate(1234.5, 1.0)) == "1,234.5 records/s (over 1.0 s)"


def test_describe_shows_the_write_rate_without_marking_the_topic_read(
    server: ServerProcess, client: Client
) -> None:
    client.put_topic("rated", {})
    stop = threading.Event()

    def write() -> None:
        with Client(server.url) as w:
            while not stop.is_set():
                w.append("rated", [{"data": 1}] * 10)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        busy = run_cli("topics", "describe", "rated", "--rate-window", "0.5", url=server.url)
    finally:
        stop.set()
        writer.join()
    assert busy.code == 0, busy.stderr
    rate = busy.json_lines()[0]["write_rate"]
    assert rate["records_per_s"] > 0 and rate["window_s"] >= 0.5
    quiet = run_cli("topics", "describe", "rated", "--rate-window", "0.2", url=server.url)
    st = quiet.json_lines()[0]
    assert st["write_rate"]["records_per_s"] == 0.0
    assert st.get("last_read_ts") is None  # describing is not reading
    off = run_cli("topics", "describe", "rated", "--rate-window", "0", url=server.url)
    assert "write_rate" not in off.json_lines()[0]
    tty = run_cli_tty("topics", "describe", "rated", "--rate-window", "0.1", url=server.url)
    assert "write rate" in tty.stdout and "records/s" in tty.stdout, tty.stdout
