"""`seglog topics ls|describe|create|alter|delete`.

`create` never replaces an existing topic's config (a PUT would: omitted fields take their
defaults, API §0.11): it looks first and refuses unless `--if-not-exists`. `alter` is a
read-modify-write of only the fields given: GET the stored config, change those fields, PUT
the whole object back, print the diff. Neither is atomic against a concurrent writer of the
same topic's config (the API has no compare-and-set); the last PUT wins.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.panel import Panel
from rich.table import Table

from seglog.cli import common
from seglog.cli.common import AS_JSON, DEFAULT_URL, KEY, URL
from seglog.cli.output import (
    client_errors,
    emit_json,
    fail,
    human_bytes,
    iso_ms,
    note,
    stdout_console,
    usage,
    want_json,
)
from seglog.client import TopicNotFound, TopicState

app = typer.Typer(help="Create, list, describe, alter and delete topics.", no_args_is_help=True)

TOPIC = Annotated[str, typer.Argument(metavar="TOPIC", help="Topic name.")]
DURABILITY = Annotated[
    str | None, typer.Option(help="ephemeral | memory | disk | fsync (fsync: acked = on disk).")
]
TTL = Annotated[int | None, typer.Option(help="Records expire after this many ms (0 = never).")]
CAP_RECORDS = Annotated[
    int | None, typer.Option(help="Keep at most this many records (0 = no cap).")
]
CAP_BYTES = Annotated[int | None, typer.Option(help="Keep at most this many bytes (0 = no cap).")]
DISCARD = Annotated[
    str | None, typer.Option(help="At the cap: old (evict the oldest) or reject (refuse writes).")
]
PRIORITY = Annotated[
    str | None, typer.Option(help="Retention priority -1000..1000, or 'auto' (recency-based).")
]
AUTO_CREATE = Annotated[
    bool | None, typer.Option(help="Whether a write may create the topic lazily.")
]
IDEM_WINDOW = Annotated[
    int | None, typer.Option(help="How long idempotency keys are remembered (ms).")
]
LEASE_MS = Annotated[int | None, typer.Option(help="Queue: default job lease (ms).")]
MAX_DELIVERIES = Annotated[
    int | None,
    typer.Option(help="Queue: dead-letter a job after this many deliveries (0 = never)."),
]
DEAD_LETTER = Annotated[
    str | None, typer.Option(help="Queue: topic for dead-lettered jobs ('none' to clear).")
]
RATE_WINDOW = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="Seconds between two looks at the head, for the write rate (0: no rate).",
    ),
]
LEASES_DURABLE = Annotated[
    bool | None, typer.Option(help="Queue: write lease events to the WAL (leases survive a crash).")
]


def asdict(obj: Any) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(obj).items() if v is not None}


def given_fields(**opts: Any) -> dict[str, Any]:
    """The config fields given on the command line, in wire form (absent options left out)."""
    out = {k: v for k, v in opts.items() if v is not None}
    if "priority" in out:
        p = out["priority"]
        if p == "auto":
            out["priority"] = None
        else:
            try:
                out["priority"] = int(p)
            except ValueError:
                usage(f"--priority must be an integer or 'auto', not {p!r}")
    if out.get("dead_letter") in ("none", ""):
        out["dead_letter"] = None
    return out


@app.command("ls")
def topics_ls(
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    prefix: Annotated[str, typer.Option(help="Only topics whose name starts with this.")] = "",
    as_json: AS_JSON = False,
) -> None:
    """List topics with head, earliest, count and size.

    A table on a terminal, JSON lines when piped."""
    with client_errors(url), common.client(url, api_key) as c:
        rows = list(c.iter_topics(prefix=prefix or None))
    if want_json(as_json):
        for r in rows:
            emit_json(asdict(r))
        return
    table = Table("topic", "head", "earliest", "count", "size", "durable", "priority")
    for r in rows:
        table.add_row(
            r.topic,
            str(r.head_seq),
            str(r.earliest_seq),
            str(r.count),
            human_bytes(r.bytes),
            "yes" if r.durable else "no",
            str(r.effective_priority),
        )
    stdout_console().print(table)


# `list` as well: what Kafka (`kafka-topics --list`) and most CLIs call it.
app.command("list", hidden=True)(topics_ls)


@dataclasses.dataclass(frozen=True)
class WriteRate:
    """Seqs handed out per second between two looks at a topic's head (failed writes,
    which leave holes, count too: it is the rate the head moves)."""

    records_per_s: float
    window_s: float

    @staticmethod
    def between(head_before: int, head_after: int, seconds: float) -> WriteRate:
        moved = max(head_after - head_before, 0)
        return WriteRate(moved / seconds if seconds > 0 else 0.0, seconds)

    def __str__(self) -> str:
        return f"{self.records_per_s:,.1f} records/s (over {self.window_s:.1f} s)"


def _panel(st: TopicState, rate: WriteRate | None = None) -> Panel:
    state = Table.grid(padding=(0, 2))
    state.add_column(style="bold")
    state.add_column()
    rows = [
        ("type", st.type),
        ("head / earliest", f"{st.head_seq} / {st.earliest_seq}"),
        ("records", str(st.count)),
        ("size", human_bytes(st.bytes)),
        ("priority", str(st.effective_priority)),
        ("last write", iso_ms(st.last_write_ts)),
        ("last read", iso_ms(st.last_read_ts)),
    ]
    if rate is not None:
        rows.append(("write rate", str(rate)))
    if st.queue is not None:
        q = st.queue
        rows.append(
            (
                "queue",
                f"ready {q.get('ready', 0)}, in flight {q.get('in_flight', 0)}, "
                f"dead-lettered {q.get('dead_lettered', 0)}",
            )
        )
    for k, v in rows:
        state.add_row(k, v)
    config = Table("config", "value", box=None, pad_edge=False)
    for k, v in st.config.items():
        shown = human_bytes(v) if k == "cap_bytes" and v else v
        shown = "auto" if k == "priority" and v is None else shown
        config.add_row(k, str(shown))
    return Panel(Group(state, "", config), title=f"topic {st.topic}", expand=False)


@app.command("describe")
def topics_describe(
    topic: TOPIC,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: AS_JSON = False,
    rate_window: RATE_WINDOW = 1.0,
) -> None:
    """Show a topic's state (heads, count, size, write rate, queue counts) and config.

    A panel on a terminal, one JSON object when piped or with --json (the topic's state as
    the API returns it, plus `write_rate`). The rate comes from looking at the head twice,
    --rate-window apart, without marking the topic read."""
    rate = None
    with client_errors(url), common.client(url, api_key) as c:
        st = c.get_topic(topic, touch=False)
        if rate_window > 0:
            t0 = time.monotonic()
            time.sleep(rate_window)
            before = st.head_seq
            st = c.get_topic(topic, touch=False)
            rate = WriteRate.between(before, st.head_seq, time.monotonic() - t0)
    if want_json(as_json):
        out = asdict(st)
        if rate is not None:
            out["write_rate"] = dataclasses.asdict(rate)
        emit_json(out)
    else:
        stdout_console().print(_panel(st, rate))


@app.command("create")
def topics_create(
    topic: TOPIC,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    type_: Annotated[
        str, typer.Option("--type", help="log, or queue (claim/ack jobs); fixed once created.")
    ] = "log",
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed, changing nothing, if it exists.")
    ] = False,
    durability: DURABILITY = None,
    ttl_ms: TTL = None,
    cap_records: CAP_RECORDS = None,
    cap_bytes: CAP_BYTES = None,
    discard: DISCARD = None,
    priority: PRIORITY = None,
    auto_create: AUTO_CREATE = None,
    idempotency_window_ms: IDEM_WINDOW = None,
    lease_ms: LEASE_MS = None,
    max_deliveries: MAX_DELIVERIES = None,
    dead_letter: DEAD_LETTER = None,
    leases_durable: LEASES_DURABLE = None,
    as_json: AS_JSON = False,
) -> None:
    """Create a topic; fails if it exists unless --if-not-exists.

    Settings not given take the server's defaults; change an existing topic with `alter`."""
    config = {"type": type_} | given_fields(
        durability=durability,
        ttl_ms=ttl_ms,
        cap_records=cap_records,
        cap_bytes=cap_bytes,
        discard=discard,
        priority=priority,
        auto_create=auto_create,
        idempotency_window_ms=idempotency_window_ms,
        lease_ms=lease_ms,
        max_deliveries=max_deliveries,
        dead_letter=dead_letter,
        leases_durable=leases_durable,
    )
    with client_errors(url), common.client(url, api_key) as c:
        try:
            existing = c.get_topic(topic, touch=False)
        except TopicNotFound:
            existing = None
        if existing is not None:
            if not if_not_exists:
                fail(
                    f"topic {topic!r} already exists; hint: 'seglog topics alter {topic} ...' "
                    "changes it, --if-not-exists accepts it as it is"
                )
            differ = sorted(k for k, v in config.items() if existing.config.get(k) != v)
            if differ:
                note(f"{topic}: exists; left as it is (differs in: {', '.join(differ)})")
            _report(topic, "exists", existing.config, as_json)
            return
        res = c.put_topic(topic, config)
    if not res.created:
        note(f"{topic}: created concurrently by another client; its config is now this one")
    _report(topic, "created" if res.created else "updated", res.config, as_json)


def _report(topic: str, what: str, config: dict[str, Any], as_json: bool) -> None:
    if want_json(as_json):
        emit_json({"topic": topic, "result": what, "config": config})
    else:
        stdout_console().print(f"{what} {topic}", markup=False)


@app.command("alter")
def topics_alter(
    topic: TOPIC,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    durability: DURABILITY = None,
    ttl_ms: TTL = None,
    cap_records: CAP_RECORDS = None,
    cap_bytes: CAP_BYTES = None,
    discard: DISCARD = None,
    priority: PRIORITY = None,
    auto_create: AUTO_CREATE = None,
    idempotency_window_ms: IDEM_WINDOW = None,
    lease_ms: LEASE_MS = None,
    max_deliveries: MAX_DELIVERIES = None,
    dead_letter: DEAD_LETTER = None,
    leases_durable: LEASES_DURABLE = None,
    as_json: AS_JSON = False,
) -> None:
    """Change only the settings given, keep the rest, and print the diff.

    Reads the config, changes those fields, writes it back."""
    changes = given_fields(
        durability=durability,
        ttl_ms=ttl_ms,
        cap_records=cap_records,
        cap_bytes=cap_bytes,
        discard=discard,
        priority=priority,
        auto_create=auto_create,
        idempotency_window_ms=idempotency_window_ms,
        lease_ms=lease_ms,
        max_deliveries=max_deliveries,
        dead_letter=dead_letter,
        leases_durable=leases_durable,
    )
    if not changes:
        usage("nothing to change: give at least one setting (see --help)")
    with client_errors(url), common.client(url, api_key) as c:
        old = c.get_topic(topic, touch=False).config
        new = dict(old) | changes
        if "durability" in changes:
            new.pop("durable", None)  # the alias would contradict the new durability
        stored = old if new == old else c.put_topic(topic, new).config
    diff = {k: [old.get(k), stored.get(k)] for k in stored if old.get(k) != stored.get(k)}
    if want_json(as_json):
        emit_json({"topic": topic, "changed": diff})
        return
    con = stdout_console()
    if not diff:
        con.print(f"{topic}: no change", markup=False)
    for k, (a, b) in diff.items():
        con.print(f"{topic}: {k}: {a!r} -> {b!r}", markup=False)


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
    stdout_console().print(f"{'deleted' if res.deleted else 'absent'} {topic}", markup=False)
