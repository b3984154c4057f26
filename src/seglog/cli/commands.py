"""Client-side commands: the daily verbs, each in its noun module (`produce`, `tail`,
`topics`, ...), registered here on the root app. They use only `seglog.client`."""

from __future__ import annotations

from typing import Annotated

import typer

from seglog.cli import common, probes, produce, queue, records, tail, topics
from seglog.cli.common import AS_JSON, DEFAULT_URL, KEY, URL
from seglog.cli.output import client_errors, emit_json, stdout_console, want_json


def lag(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="Topic name.")],
    from_seq: Annotated[
        int, typer.Option("--from", help="The consumer's cursor (last seq it read).")
    ],
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: AS_JSON = False,
) -> None:
    """How far a consumer at `--from` is behind the head (records and seqs)."""
    with client_errors(url), common.client(url, api_key) as c:
        st = c.get_topic(topic, touch=False)
    row = {
        "topic": topic,
        "head_seq": st.head_seq,
        "cursor": from_seq,
        "lag": max(st.head_seq - from_seq, 0),
        "below_earliest": max(st.earliest_seq - 1 - from_seq, 0),
    }
    if want_json(as_json):
        emit_json(row)
    else:
        stdout_console().print(
            f"{topic}: {row['lag']} behind head {st.head_seq}"
            + (f", {row['below_earliest']} already gone" if row["below_earliest"] else "")
        )


def register_client_commands(app: typer.Typer) -> None:
    app.add_typer(topics.app, name="topics")
    app.add_typer(records.app, name="records")
    app.add_typer(queue.app, name="queue")
    app.command()(produce.produce)
    app.command()(tail.tail)
    app.command()(tail.consume)
    app.command()(lag)
    app.command()(probes.health)
    app.command()(probes.metrics)
