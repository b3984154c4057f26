"""`seglog tail` and `seglog consume`: print a topic's records, optionally following it live.

Where to start is kcat's `-o`: `beginning`, `end`, `-N` (the last N), `@<time>` (the first
record written at or after an epoch-ms or ISO-8601 time) or `<seq>` (that record first); or
`--from` with the exclusive cursor the API uses. A time is turned into a seq by reading: a
binary search of one-record diffs over [earliest, head], which relies on `$ts` not going
backwards along the seqs (the server assigns both at commit).

Output: `-F` format strings; else JSON lines in the wire's shape (`$seq`, `$ts`, ...) when
piped or `--json`; else one readable line per record. Tombstones (records that will never
come) are explained in words on stderr, and in JSON mode are also a `{"tombstone": ...}`
line in the stream. `--follow` reads over `Client.watch()`, which reconnects and resumes
after the last record delivered: nothing is printed twice, nothing skipped silently.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import typer

from seglog.cli import common
from seglog.cli.common import AS_JSON, DEFAULT_URL, KEY, URL
from seglog.cli.output import client_errors, emit_json, iso_ms, note, usage, want_json
from seglog.client import (
    Client,
    ReadRecord,
    Tombstone,
    WatchRecord,
    WatchTombstone,
    WatchTopicDeleted,
)

Rec = ReadRecord | WatchRecord

_REASONS = {
    "cap": "were evicted by the topic's cap",
    "ttl": "expired (the topic's TTL)",
    "mixed": "were evicted by the topic's cap and TTL",
    "recreated": "are gone: the topic was deleted and recreated, and its seqs restarted",
    "source_trim": "were trimmed at the router's source before being forwarded",
    "from_seq_too_old": "were already gone when reading started",
}


def describe_gap(topic: str, gap_from: int, gap_to: int, reason: str, missed: int) -> str:
    """'jobs: records 5..9 were evicted by the topic's cap; 5 missed'."""
    why = _REASONS.get(reason, f"are gone (reason {reason!r})")
    span = f"record {gap_from}" if gap_from == gap_to else f"records {gap_from}..{gap_to}"
    if missed == 0:
        return f"{topic}: no records lost; {why.removeprefix('are gone: ')}"
    return f"{topic}: {span} {why}; {missed} missed"


# --- where to start ------------------------------------------------------------------------


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC when it names no zone)."""
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        usage(f"-o @{text}: not epoch milliseconds or an ISO-8601 time")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def seq_at_time(c: Client, topic: str, t_ms: int, earliest: int, head: int) -> int:
    """The cursor after which every record has `$ts >= t_ms`: the smallest x in
    [earliest-1, head] whose next live record is at or after the time (binary search)."""

    def first_ts_after(x: int) -> float:
        page = c.diff(topic, x, limit=1)
        return page.records[0].ts if page.records else float("inf")

    lo, hi = max(earliest - 1, 0), head
    while lo < hi:
        mid = (lo + hi) // 2
        if first_ts_after(mid) >= t_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def start_cursor(
    c: Client, topic: str, offset: str | None, from_seq: int | None, last: int | None
) -> int:
    """The exclusive cursor to read after (API `from_seq`)."""
    if offset is not None and from_seq is not None:
        usage("give -o/--offset or --from, not both")
    if from_seq is not None and from_seq < 0:
        usage(f"--from is a seq cursor (>= 0); for the last {-from_seq} records use -o {from_seq}")
    if last is not None and last < 0:
        usage("--last must be >= 0")
    if offset is None and from_seq is None and last is None:
        offset = "-10"
    if offset == "beginning" or (offset is None and from_seq is None):
        cursor = 0
    elif from_seq is not None:
        cursor = from_seq
    else:
        cursor = -1  # needs the topic's state
    needs_state = cursor < 0 or last is not None
    if not needs_state:
        return cursor
    st = c.get_topic(topic, touch=False)
    floor = max(st.earliest_seq - 1, 0)
    if cursor < 0:
        assert offset is not None
        if offset.isdigit():  # kcat: -o <offset> is the first record printed
            cursor = max(int(offset) - 1, 0)
            if cursor > st.head_seq:  # a cursor past the head would read as a recreated topic
                note(f"{topic}: seq {offset} is past the head ({st.head_seq}); starting there")
                cursor = st.head_seq
        elif offset == "end":
            cursor = st.head_seq
        elif re.fullmatch(r"-\d+", offset):
            cursor = last_n_cursor(c, topic, int(offset[1:]), st.head_seq, floor)
        elif offset.startswith("@"):
            cursor = seq_at_time(c, topic, parse_time_ms(offset[1:]), st.earliest_seq, st.head_seq)
        else:
            usage(f"-o {offset}: expected beginning, end, -N, @<time> or <seq>")
    if last is not None:
        # only an explicit --from cursor reports a gap below the live records
        cursor = max(
            cursor, last_n_cursor(c, topic, last, st.head_seq, 0 if from_seq is not None else floor)
        )
    return cursor


def last_n_cursor(c: Client, topic: str, n: int, head: int, floor: int) -> int:
    """The cursor after which the last `n` live records lie (`floor` when there are fewer):
    "the last N" counts records, not seqs — deleted and acked ones take no room. A window
    back from the head, doubled until it holds `n`."""
    span = n
    while n > 0:
        cursor = max(head - span, floor)
        seqs = [
            r.seq
            for r in c.read(topic, cursor, until_seq=head, include_tags=False, include_meta=False)
            if isinstance(r, ReadRecord)
        ]
        if len(seqs) >= n:
            return seqs[-n] - 1
        if cursor <= floor:
            return floor
        span *= 2
    return head


# --- how to print ---------------------------------------------------------------------------

_FORMAT = re.compile(r"%[stdknT%]|\\[nt\\]")


def formatter(fmt: str, topic: str) -> Callable[[Rec], str]:
    """kcat-style `-F`: %s seq, %t ts (epoch ms), %d data (JSON), %k tag, %n node, %T topic,
    %% a percent sign; \\n and \\t are a newline and a tab. A newline ends each record unless
    the format ends with one."""
    trailing = "" if fmt.endswith("\\n") else "\n"

    def one(rec: Rec) -> str:
        def sub(m: re.Match[str]) -> str:
            k = m.group(0)
            if k == "%d":
                return orjson.dumps(rec.data).decode()
            fixed = {"%%": "%", "\\n": "\n", "\\t": "\t", "\\\\": "\\", "%T": topic}
            if k in fixed:
                return fixed[k]
            fields = {"%s": rec.seq, "%t": rec.ts, "%k": rec.tag, "%n": rec.node}
            value = fields[k]
            return "" if value is None else str(value)

        return _FORMAT.sub(sub, fmt) + trailing

    return one


def wire_json(rec: Rec) -> dict[str, Any]:
    """A record as the API writes it: `$seq`, `$ts`, `data`, then `$node`/`$tag`/`meta`."""
    fields = {
        "$seq": rec.seq,
        "$ts": rec.ts,
        "data": rec.data,
        "$node": rec.node,
        "$tag": rec.tag,
        "meta": rec.meta,
    }
    return {k: v for k, v in fields.items() if v is not None or k == "data"}


def readable(rec: Rec) -> str:
    tag = f"  [{rec.tag}]" if rec.tag else ""
    return f"{rec.seq}  {iso_ms(rec.ts)}{tag}  {orjson.dumps(rec.data).decode()}\n"


class Printer:
    def __init__(self, topic: str, fmt: str | None, as_json: bool) -> None:
        self.topic = topic
        self.json = fmt is None and want_json(as_json)
        self.line = formatter(fmt, topic) if fmt is not None else readable

    def record(self, rec: Rec) -> None:
        if self.json:
            emit_json(wire_json(rec))
        else:
            sys.stdout.write(self.line(rec))

    def gap(self, gap_from: int, gap_to: int, reason: str, missed: int, obj: Any) -> None:
        if self.json:
            emit_json({"tombstone": obj})
        note(describe_gap(self.topic, gap_from, gap_to, reason, missed))


# --- the commands ---------------------------------------------------------------------------


def _read(c: Client, p: Printer, topic: str, cursor: int, until: int | None) -> None:
    for item in c.read(topic, cursor, until_seq=until, include_tags=True):
        if isinstance(item, Tombstone):
            body = {
                "gap_from": item.gap_from,
                "gap_to": item.gap_to,
                "reason": item.reason,
                "missed_estimate": item.missed_estimate,
                "earliest_seq": item.earliest_seq,
                "head_seq": item.head_seq,
            }
            p.gap(item.gap_from, item.gap_to, item.reason, item.missed_estimate, body)
        else:
            p.record(item)


def _follow(c: Client, p: Printer, topic: str, cursor: int, until: int | None) -> None:
    """Stream `topic` after `cursor` over the SSE watch until `until` or the topic's deletion.
    The watch resumes by itself (Last-Event-ID, or a new session from its cursor after a
    server restart)."""
    if until is not None and cursor >= until:
        return
    with c.watch({topic: cursor}, include_tags=True) as w:
        for ev in w:
            if isinstance(ev, WatchRecord):
                if until is not None and ev.seq > until:
                    return
                p.record(ev)
                sys.stdout.flush()  # a live tail is read as it happens, often through a pipe
                if until is not None and ev.seq >= until:
                    return
            elif isinstance(ev, WatchTombstone):
                body = {
                    "gap_from": ev.gap_from,
                    "gap_to": ev.gap_to,
                    "reason": ev.reason,
                    "missed_estimate": ev.missed,
                    "earliest_seq": ev.earliest_seq,
                    "head_seq": ev.head_seq,
                }
                p.gap(ev.gap_from, ev.gap_to, ev.reason, ev.missed, body)
            elif isinstance(ev, WatchTopicDeleted):
                note(f"{ev.topic}: topic deleted; nothing more will come")
            # The seq `until` may be deleted or inside a gap: no record names it, but the
            # stream's cursor passes it (a record batch's `to_seq`, a gap, a caught-up).
            if until is not None and w.cursors.get(topic, 0) >= until:
                return


TOPIC = Annotated[str, typer.Argument(metavar="TOPIC", help="Topic to read.")]
OFFSET = Annotated[
    str | None,
    typer.Option(
        "--offset",
        "-o",
        help="Where to start: beginning | end | -N (the last N) | @<epoch ms or ISO time> | "
        "<seq> (that record first).",
    ),
]
FROM = Annotated[
    int | None,
    typer.Option("--from", help="Start after this seq (the API's exclusive cursor; >= 0)."),
]
LAST = Annotated[
    int | None,
    typer.Option(help="At most the last N records (also with --from or -o: whichever is later)."),
]
UNTIL = Annotated[int | None, typer.Option(help="Stop after this seq (inclusive).")]
FOLLOW = Annotated[
    bool,
    typer.Option("--follow", "-f", help="Keep streaming new records (live; survives restarts)."),
]
FORMAT = Annotated[
    str | None,
    typer.Option(
        "--format",
        "-F",
        help="Per-record format: %s seq, %t ts (ms), %d data JSON, %k tag, %n node, %T topic.",
    ),
]


def _run(
    topic: str,
    url: str,
    api_key: str | None,
    offset: str | None,
    from_seq: int | None,
    last: int | None,
    until: int | None,
    follow: bool,
    fmt: str | None,
    as_json: bool,
) -> None:
    if until is not None and until < 0:
        usage("--until must be >= 0")
    p = Printer(topic, fmt, as_json)
    with client_errors(url), common.client(url, api_key) as c:
        cursor = start_cursor(c, topic, offset, from_seq, last)
        if follow:
            _follow(c, p, topic, cursor, until)
        else:
            _read(c, p, topic, cursor, until)
        sys.stdout.flush()


def tail(
    topic: TOPIC,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    offset: OFFSET = None,
    from_seq: FROM = None,
    last: LAST = None,
    until: UNTIL = None,
    follow: FOLLOW = False,
    fmt: FORMAT = None,
    as_json: AS_JSON = False,
) -> None:
    """Print a topic's records (by default the last 10); -f keeps following it.

    Gaps (records evicted or expired) are explained on stderr."""
    _run(topic, url, api_key, offset, from_seq, last, until, follow, fmt, as_json)


def consume(
    topic: TOPIC,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    offset: OFFSET = None,
    from_seq: FROM = None,
    last: LAST = None,
    until: UNTIL = None,
    follow: FOLLOW = False,
    fmt: FORMAT = None,
    as_json: AS_JSON = False,
) -> None:
    """Like `tail`, but from the beginning unless told otherwise (kcat -C)."""
    if offset is None and from_seq is None and last is None:
        offset = "beginning"
    _run(topic, url, api_key, offset, from_seq, last, until, follow, fmt, as_json)
