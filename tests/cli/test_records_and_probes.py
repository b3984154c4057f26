"""`seglog records delete`, `seglog health`, `seglog metrics` against a real server."""

from __future__ import annotations

from seglog.client import Client, ReadRecord
from tests.cli.conftest import run_cli, run_cli_tty
from tests.support.server import ServerProcess


def live(client: Client, topic: str) -> list[int]:
    return [r.seq for r in client.read(topic, 0) if isinstance(r, ReadRecord)]


def test_delete_by_seq_and_by_tag(server: ServerProcess, client: Client) -> None:
    client.append("del", [{"data": i, "tag": f"user-{i % 3}"} for i in range(1, 13)])
    r = run_cli("records", "delete", "del", "--before-seq", "4", url=server.url)
    assert r.code == 0, r.stderr
    assert r.json_lines()[0]["deleted"] == 3
    assert live(client, "del") == list(range(4, 13))
    r = run_cli("records", "delete", "del", "--tag-match", "user-1", url=server.url)
    assert r.json_lines()[0]["deleted"] == 3  # 4, 7, 10
    tty = run_cli_tty("records", "delete", "del", "--tag-match", "user-*", "--before-seq", "9",
                      url=server.url)  # fmt: skip
    assert "del: deleted 3 records" in tty.stdout  # 5, 6, 8
    assert live(client, "del") == [9, 11, 12]
    assert run_cli("records", "delete", "del", url=server.url).code == 2
    gone = run_cli("records", "delete", "nope", "--before-seq", "1", url=server.url)
    assert gone.code == 1 and "topic_not_found" in gone.stderr


def test_health(server: ServerProcess) -> None:
    r = run_cli("health", url=server.url)
    assert r.code == 0, r.stderr
    body = r.json_lines()[0]
    assert body["status"] == "ok" and body["ready"]["status"] == "ready"
    tty = run_cli_tty("health", url=server.url)
    assert f"at {server.address}" in tty.stdout and "ready" in tty.stdout


def test_metrics_text_and_json(server: ServerProcess, client: Client) -> None:
    client.append("m", [{"data": 1}])
    text = run_cli("metrics", url=server.url)
    assert text.code == 0, text.stderr
    assert "# TYPE topics_topics gauge" in text.stdout
    js = run_cli("metrics", "--json", url=server.url)
    assert js.json_lines()[0]["topics"] >= 1
