"""Client-side commands: the daily verbs (produce, tail, topics ls/describe/create/delete,
lag), every one scriptable with `--json`. They use only `seglog.client`."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from seglog.client import (
    Client,
    ReadRecord,
    SeglogClientError,
    Tombstone,
    WatchRecord,
    WatchTombstone,
    WatchTopicDeleted,
)

URL = Annotated[str, typer.Option("--url", envvar="SEGLOG_URL", help="Server base URL.")]
KEY = Annotated[
    str | None, typer.Option("--api-key", envvar="SEGLOG_API_KEY", help="Bearer API key.")
]
AS_JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
DEFAULT_URL = "http://127.0.0.1:4000"

out = Console()
err = Console(stderr=True)


def _client(url: str, api_key: str | None) -> Client:
    return Client(url, api_key=api_key)


def _emit_json(obj: Any) -> None:
    sys.stdout.write(orjson.dumps(obj).decode() + "\n")


def _fail(e: SeglogClientError) -> typer.Exit:
    err.print(f"[red]error:[/red] {e}")
    return typer.Exit(1)


topics_app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)


@topics_app.command("ls")
def topics_ls(
    url: URL = DEFAULT_URL, api_key: KEY = None, prefix: str = "", as_json: AS_JSON = False
) -> None:
    """List topics with head, earliest, count and bytes."""
    try:
        with _client(url, api_key) as c:
            rows = list(c.iter_topics(prefix=prefix or None))
    except SeglogClientError as e:
        raise _fail(e) from None
    if as_json:
        _emit_json([_asdict(r) for r in rows])
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
    out.print(table)


@topics_app.command("describe")
def topics_describe(topic: str, url: URL = DEFAULT_URL, api_key: KEY = None) -> None:
    """Show a topic's state and full config (JSON)."""
    try:
        with _client(url, api_key) as c:
            st = c.get_topic(topic, touch=False)
    except SeglogClientError as e:
        raise _fail(e) from None
    _emit_json(_asdict(st))


@topics_app.command("create")
def topics_create(
    topic: str,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    durability: Annotated[str | None, typer.Option(help="ephemeral|memory|disk|fsync")] = None,
    ttl_ms: int = 0,
    cap_records: int = 0,
    cap_bytes: int = 0,
    discard: Annotated[str, typer.Option(help="old|reject")] = "old",
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
    try:
        with _client(url, api_key) as c:
            res = c.put_topic(topic, config)
    except SeglogClientError as e:
        raise _fail(e) from None
    out.print(f"{'created' if res.created else 'updated'} {topic}")


@topics_app.command("delete")
def topics_delete(
    topic: str, url: URL = DEFAULT_URL, api_key: KEY = None, if_empty: bool = False
) -> None:
    """Delete a topic and all its records (irreversible)."""
    try:
        with _client(url, api_key) as c:
            res = c.delete_topic(topic, if_empty=if_empty)
    except SeglogClientError as e:
        raise _fail(e) from None
    out.print(f"{'deleted' if res.deleted else 'absent'} {topic}")


def produce(
    topic: str,
    data: Annotated[
        list[str] | None, typer.Argument(help="JSON values; stdin lines if none.")
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    tag: str | None = None,
    node: str | None = None,
    key: Annotated[str | None, typer.Option(help="Idempotency key for the batch.")] = None,
) -> None:
    """Append records (one JSON value per argument or per stdin line) in one atomic write."""
    raw = data if data else [line for line in sys.stdin.read().splitlines() if line.strip()]
    try:
        values = [orjson.loads(v) for v in raw]
    except orjson.JSONDecodeError as e:
        err.print(f"[red]error:[/red] not JSON: {e}")
        raise typer.Exit(2) from None
    if not values:
        err.print("[red]error:[/red] nothing to produce")
        raise typer.Exit(2)
    recs = [{"data": v, **({"tag": tag} if tag else {})} for v in values]
    try:
        with _client(url, api_key) as c:
            res = c.append(topic, recs, node=node, idempotency_key=key)
    except SeglogClientError as e:
        raise _fail(e) from None
    out.print(
        f"{topic}: seqs {res.first_seq}..{res.last_seq}" + (" (deduped)" if res.deduped else "")
    )


def tail(
    topic: str,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    from_seq: Annotated[int | None, typer.Option("--from", help="Start after this seq.")] = None,
    last: Annotated[int | None, typer.Option(help="Start with the last N records.")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep streaming new records (live watch).")
    ] = False,
) -> None:
    """Print records (one JSON object per line). Gaps appear as tombstone lines; with
    `--follow` they are explained on stderr, and the stream survives server restarts."""
    try:
        with _client(url, api_key) as c:
            if from_seq is not None:
                start = from_seq
            else:
                st = c.get_topic(topic, touch=False)
                start = max(st.head_seq - (last if last is not None else 10), 0)
            if follow:
                _follow(c, topic, start)
                return
            for item in c.read(topic, start, include_tags=True):
                if isinstance(item, Tombstone):
                    _emit_json({"tombstone": _asdict(item)})
                else:
                    _emit_json(_record_json(item))
    except SeglogClientError as e:
        raise _fail(e) from None
    except KeyboardInterrupt:
        pass


def _follow(c: Client, topic: str, start: int) -> None:
    """Stream `topic` after `start` over the SSE watch until the topic is deleted. The watch
    resumes by itself (Last-Event-ID, or a new session from its cursor after a restart), so
    nothing printed is ever printed twice and nothing is skipped silently."""
    with c.watch({topic: start}, include_tags=True) as w:
        for ev in w:
            if isinstance(ev, WatchRecord):
                _emit_json(_record_json(ev))
                sys.stdout.flush()  # a live tail is read as it happens, often through a pipe
            elif isinstance(ev, WatchTombstone):
                _note(f"gap: {ev.describe()}")
            elif isinstance(ev, WatchTopicDeleted):
                _note(f"{ev.topic}: topic deleted; nothing more will come")


def _note(text: str) -> None:
    sys.stdout.flush()  # keep the note after the records printed before it
    err.print(text, markup=False, highlight=False, style="yellow")


def _record_json(rec: ReadRecord | WatchRecord) -> dict[str, Any]:
    """One output line: seq, ts, data, then node/tag/meta when present (both tail modes)."""
    fields = {
        "seq": rec.seq,
        "ts": rec.ts,
        "data": rec.data,
        "node": rec.node,
        "tag": rec.tag,
        "meta": rec.meta,
    }
    return {k: v for k, v in fields.items() if v is not None}


def lag(
    topic: str,
    from_seq: Annotated[int, typer.Option("--from", help="The consumer's cursor.")],
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
) -> None:
    """How far a consumer at `--from` is behind the head (records and seqs)."""
    try:
        with _client(url, api_key) as c:
            st = c.get_topic(topic, touch=False)
    except SeglogClientError as e:
        raise _fail(e) from None
    behind = max(st.head_seq - from_seq, 0)
    lost = max(st.earliest_seq - 1 - from_seq, 0)
    _emit_json(
        {
            "topic": topic,
            "head_seq": st.head_seq,
            "cursor": from_seq,
            "lag": behind,
            "below_earliest": lost,
        }
    )


def _asdict(obj: Any) -> dict[str, Any]:
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: v for k, v in dataclasses.asdict(obj).items() if v is not None}
    return dict(vars(obj))


def register_client_commands(app: typer.Typer) -> None:
    app.add_typer(topics_app, name="topics")
    app.command()(produce)
    app.command()(tail)
    app.command()(lag)
