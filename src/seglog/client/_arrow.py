"""The client's side of the columnar diff (API §13.1): one page as a `pyarrow.Table`, and
pages joined into one table for `read_arrow()`. Shared by the sync and async clients;
pyarrow is imported on first use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from seglog.client._base import Call, Reply, RequestSpec, _json, diff_body, topic_path
from seglog.client.exceptions import SeglogProtocolError

ARROW_STREAM = "application/vnd.apache.arrow.stream"


@dataclass(frozen=True, slots=True)
class ArrowPage:
    """One columnar diff: its records (`pyarrow.Table`, no schema metadata) and every scalar
    field of the JSON response (`next_from_seq`, `head_seq`, `tombstone`, ...)."""

    table: Any
    fields: dict[str, Any]


# The columnar diff's largest page (API §13.1 allows more than the JSON diff's 1,000).
ARROW_PAGE_RECORDS = 65_536
ARROW_PAGE_BYTES = 33_554_432


def diff_arrow(
    topic: str,
    from_seq: int,
    *,
    limit: int | None,
    node: str | Sequence[str] | None,
    include_tags: bool,
    include_meta: bool,
    max_batch_bytes: int,
) -> Call[ArrowPage]:
    body = diff_body(from_seq, limit, node, include_tags, include_meta, max_batch_bytes)
    content, headers = _json(body)
    spec = RequestSpec(
        "POST",
        topic_path(topic, "/diff"),
        body=content,
        headers={**headers, "Accept": ARROW_STREAM},
    )
    return Call(spec, _parse_page)


def _parse_page(resp: Reply) -> ArrowPage:
    import pyarrow as pa

    kind = resp.headers.get("content-type", "")
    if not kind.startswith(ARROW_STREAM):
        raise SeglogProtocolError(f"HTTP {resp.status_code}: expected {ARROW_STREAM}, got {kind!r}")
    try:
        reader = pa.ipc.open_stream(resp.content)
        table = reader.read_all()
        fields = orjson.loads((reader.schema.metadata or {})[b"seglog"])
    except (pa.ArrowInvalid, KeyError, orjson.JSONDecodeError) as exc:
        raise SeglogProtocolError(f"HTTP {resp.status_code}: bad Arrow stream ({exc})") from exc
    return ArrowPage(table.replace_schema_metadata(None), fields)


def stop_at(first: ArrowPage, until_seq: int | None) -> int:
    """Where `read_arrow` stops: `until_seq`, else the head its first page saw (a topic
    written while we read does not keep us reading forever)."""
    head = int(first.fields["head_seq"])
    return head if until_seq is None else min(until_seq, head)


def done(page: ArrowPage, stop: int) -> bool:
    return bool(page.fields["caught_up"]) or int(page.fields["next_from_seq"]) >= stop


def join(topic: str, from_seq: int, pages: list[ArrowPage], stop: int) -> Any:
    """The pages as one table of the records with seq ≤ `stop`; its schema metadata
    `seglog` holds the read's `topic`, `from_seq`, `next_from_seq`, `head_seq` and every
    tombstone met on the way (gaps are not rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.concat_tables([p.table for p in pages])
    if len(table) and pc.max(table["seq"]).as_py() > stop:
        table = table.filter(pc.less_equal(table["seq"], stop))
    last = pages[-1].fields
    summary = {
        "topic": topic,
        "from_seq": from_seq,
        "next_from_seq": min(int(last["next_from_seq"]), stop) if len(pages) else from_seq,
        "head_seq": last["head_seq"],
        "tombstones": [p.fields["tombstone"] for p in pages if p.fields.get("tombstone")],
    }
    return table.replace_schema_metadata({b"seglog": orjson.dumps(summary)})
