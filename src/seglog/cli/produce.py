"""`seglog produce`."""

from __future__ import annotations

import sys
from typing import Annotated

import orjson
import typer

from seglog.cli import common
from seglog.cli.common import DEFAULT_URL, KEY, URL
from seglog.cli.output import client_errors, fail, note, usage


def produce(
    topic: Annotated[str, typer.Argument(help="Topic to append to.")],
    data: Annotated[
        list[str] | None, typer.Argument(help="JSON values; stdin lines if none.")
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    tag: Annotated[str | None, typer.Option(help="Tag for every record.")] = None,
    node: Annotated[str | None, typer.Option(help="Writer node id of the records.")] = None,
    key: Annotated[str | None, typer.Option(help="Idempotency key for the batch.")] = None,
) -> None:
    """Append records (one JSON value per argument or per stdin line) in one atomic write."""
    raw = data if data else [line for line in sys.stdin.read().splitlines() if line.strip()]
    try:
        values = [orjson.loads(v) for v in raw]
    except orjson.JSONDecodeError as e:
        fail(f"not JSON: {e}")
    if not values:
        usage("nothing to produce")
    recs = [{"data": v, **({"tag": tag} if tag else {})} for v in values]
    with client_errors(url), common.client(url, api_key) as c:
        res = c.append(topic, recs, node=node, idempotency_key=key)
    note(
        f"{topic}: seqs {res.first_seq}..{res.last_seq}" + (" (deduped)" if res.deduped else ""),
        style="green",
    )
