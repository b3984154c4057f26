"""`seglog topics ls|describe|create|delete`."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer
from rich.table import Table

from seglog.cli import common
from seglog.cli.common import AS_JSON, DEFAULT_URL, KEY, URL
from seglog.cli.output import client_errors, emit_json, stdout_console, want_json

app = typer.Typer(help="Create, list, describe, alter and delete topics.", no_args_is_help=True)

TOPIC = Annotated[str, typer.Argument(help="Topic name.")]


def asdict(obj: Any) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(obj).items() if v is not None}


@app.command("ls")
def topics_ls(
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    prefix: Annotated[str, typer.Option(help="Only topics whose name starts with this.")] = "",
    as_json: AS_JSON = False,
) -> None:
    """List topics with head, earliest, count and bytes (a table on a terminal, JSON lines
    when piped)."""
    with client_errors(url), common.client(url, api_key) as c:
        rows = list(c.iter_topics(prefix=prefix or None))
    if want_json(as_json):
        for r in rows:
            emit_json(asdict(r))
        return
    table = Table("topic", "head", "earliest", "count", "bytes", "durable", "priority")
    for r in rows:
        table.add_row(
            r.topic,
            str(r.head_seq),
            str(r.earliest_seq),
            str(r.count),
            str(r.bytes),
            "yes" if r.durable else "no",
            str(r.effective_priority),
        )
    stdout_console().print(table)


@app.command("describe")
def topics_describe(topic: TOPIC, url: URL = DEFAULT_URL, api_key: KEY = None) -> None:
    """Show a topic's state and full config (JSON)."""
    with client_errors(url), common.client(url, api_key) as c:
        st = c.get_topic(topic, touch=False)
    emit_json(asdict(st))


@app.command("create")
def topics_create(
    topic: TOPIC,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    durability: Annotated[str | None, typer.Option(help="ephemeral|memory|disk|fsync")] = None,
    ttl_ms: Annotated[int, typer.Option(help="Record TTL in ms (0 = none).")] = 0,
    cap_records: Annotated[int, typer.Option(help="Keep at most this many records.")] = 0,
    cap_bytes: Annotated[int, typer.Option(help="Keep at most this many bytes.")] = 0,
    discard: Annotated[str, typer.Option(help="When full: old (evict) or reject.")] = "old",
) -> None:
    """Create or reconfigure a topic (PUT: omitted settings take their defaults)."""
    config: dict[str, Any] = {
        "ttl_ms": ttl_ms,
        "cap_records": cap_records,
        "cap_bytes": cap_bytes,
        "discard": discard,
    }
    if durability is not None:
        config["durability"] = durability
    with client_errors(url), common.client(url, api_key) as c:
        res = c.put_topic(topic, config)
    stdout_console().print(f"{'created' if res.created else 'updated'} {topic}")


@app.command("delete")
def topics_delete(
    topic: TOPIC,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    if_empty: Annotated[bool, typer.Option(help="Refuse if the topic still has records.")] = False,
) -> None:
    """Delete a topic and all its records (irreversible)."""
    with client_errors(url), common.client(url, api_key) as c:
        res = c.delete_topic(topic, if_empty=if_empty)
    stdout_console().print(f"{'deleted' if res.deleted else 'absent'} {topic}")
