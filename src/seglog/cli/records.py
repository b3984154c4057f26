"""`seglog records delete`: permanent deletes by seq prefix and/or tag (API §5)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from seglog.cli import common
from seglog.cli.common import AS_JSON, DEFAULT_URL, KEY, URL
from seglog.cli.output import client_errors, emit_json, stdout_console, usage, want_json

app = typer.Typer(help="Delete records permanently.", no_args_is_help=True)


@app.command("delete")
def records_delete(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="Topic to delete records from.")],
    before_seq: Annotated[
        int | None, typer.Option(help="Delete every live record with a seq below this.")
    ] = None,
    tag_match: Annotated[
        str | None,
        typer.Option(help="Delete records with this tag; a trailing * matches a tag prefix."),
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: AS_JSON = False,
) -> None:
    """Delete records for good, by seq prefix and/or tag (both: records matching both).

    Readers see no tombstone for them; the seqs are simply gone."""
    if before_seq is None and tag_match is None:
        usage("give --before-seq and/or --tag-match")
    if before_seq is not None and before_seq < 0:
        usage("--before-seq must be >= 0")
    with client_errors(url), common.client(url, api_key) as c:
        res = c.delete_records(topic, before_seq=before_seq, match=tag_match)
    if want_json(as_json):
        body = dataclasses.asdict(res)
        body.pop("performance", None)
        emit_json(body)
        return
    stdout_console().print(
        f"{topic}: deleted {res.deleted} records; {res.count} left, "
        f"earliest {res.earliest_seq}, head {res.head_seq}",
        markup=False,
    )
