"""`seglog tail`."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from seglog.cli import common
from seglog.cli.common import DEFAULT_URL, KEY, URL
from seglog.cli.output import client_errors, emit_json, note
from seglog.client import (
    Client,
    ReadRecord,
    Tombstone,
    WatchRecord,
    WatchTombstone,
    WatchTopicDeleted,
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
    with client_errors(url), common.client(url, api_key) as c:
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
                emit_json({"tombstone": _asdict(item)})
            else:
                emit_json(_record_json(item))


def _follow(c: Client, topic: str, start: int) -> None:
    """Stream `topic` after `start` over the SSE watch until the topic is deleted. The watch
    resumes by itself (Last-Event-ID, or a new session from its cursor after a restart), so
    nothing printed is ever printed twice and nothing is skipped silently."""
    with c.watch({topic: start}, include_tags=True) as w:
        for ev in w:
            if isinstance(ev, WatchRecord):
                emit_json(_record_json(ev))
                sys.stdout.flush()  # a live tail is read as it happens, often through a pipe
            elif isinstance(ev, WatchTombstone):
                note(f"gap: {ev.describe()}")
            elif isinstance(ev, WatchTopicDeleted):
                note(f"{ev.topic}: topic deleted; nothing more will come")


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


def _asdict(obj: Any) -> dict[str, Any]:
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: v for k, v in dataclasses.asdict(obj).items() if v is not None}
    return dict(vars(obj))
