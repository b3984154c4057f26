"""`seglog produce`: stdin lines (or arguments) to records, streamed in batches.

Lines are read on a thread as they arrive and handed to the sender through a queue, so a batch
goes out when it reaches `--batch-size` records or when its first record has waited
`--linger-ms`, whichever comes first: `tail -f app.log | seglog produce t` sends each line
within the linger time, and a 10,001-line file goes out in batches the server accepts. Each
batch is one atomic write; a failure reports the line number and what was already committed.

The reader hands over blocks: whatever one read of stdin returned (`read1`: a line typed or
piped in as soon as it is there, up to 64 KiB of a file), cut into lines. One queue hand-off
per line cost more than the rest of the line's work (~90k lines/s before, BENCHMARKS.md
"Stop 41").
"""

from __future__ import annotations

import codecs
import io
import os
import queue
import stat
import string
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, NoReturn, TextIO

import orjson
import typer
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)

from seglog.cli import common
from seglog.cli.common import DEFAULT_URL, KEY, URL
from seglog.cli.output import describe_error, err, fail, note, usage
from seglog.client import Client, SeglogClientError

MAX_BATCH = 10_000  # records per write (API §11)
_EOF = None


class _Fields(dict[str, Any]):
    def __missing__(self, key: str) -> Any:
        raise KeyError(key)


def fields_of(data: Any) -> Mapping[str, Any]:
    """What a `--tag`/`--node` template may name: the keys of an object line, else `data`."""
    return _Fields(data) if isinstance(data, dict) else _Fields(data=data)


def render(template: str, data: Any) -> str:
    """`--tag 'user-{user}'` → `user-42` for the line `{"user": 42}`; `{a[b]}` reaches into
    nested objects; a template without braces is used as is."""
    if "{" not in template:
        return template
    return string.Formatter().vformat(template, (), fields_of(data))


@dataclass
class Tally:
    records: int = 0
    batches: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    deduped: int = 0
    failures: list[str] = field(default_factory=list)

    def summary(self, topic: str) -> str:
        if not self.records:
            return f"{topic}: no records sent"
        text = (
            f"{topic}: {self.records} records in {self.batches} "
            f"batch{'es' if self.batches != 1 else ''}, seqs {self.first_seq}..{self.last_seq}"
        )
        return text + (f" ({self.deduped} batches deduped)" if self.deduped else "")


@dataclass
class Producer:
    client: Client
    topic: str
    url: str
    raw: bool
    tag: str | None
    node: str | None
    idempotency_key: str | None
    tally: Tally = field(default_factory=Tally)
    batch: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # the input line of each batch record
    pending_bytes: int = 0
    on_sent: Callable[[int, int], None] | None = None
    """Called after each batch with (records, input bytes): the progress bar."""

    def parse(self, lineno: int, line: str) -> dict[str, Any] | None:
        text = line.rstrip("\r\n")
        if not text.strip():
            return None
        if not text.isascii() and not _utf8(text):  # bytes stdin's encoding could not decode
            self.abort(lineno, "holds bytes that are not text in the input's encoding (UTF-8)")
        if self.raw:
            data: Any = text
        else:
            try:
                data = orjson.loads(text)
            except orjson.JSONDecodeError as e:
                self.abort(lineno, f"not JSON ({e}); hint: use --raw for plain-text lines")
        rec: dict[str, Any] = {"data": data}
        try:
            if self.tag is not None:
                rec["tag"] = render(self.tag, data)
            if self.node is not None:
                rec["node"] = render(self.node, data)
        except (KeyError, IndexError, ValueError, AttributeError) as e:
            self.abort(lineno, f"a --tag/--node template field is missing or malformed: {e}")
        return rec

    def add(self, lineno: int, rec: dict[str, Any]) -> None:
        self.batch.append(rec)
        self.lines.append(lineno)

    def send(self) -> None:
        """Send the batch. With an idempotency key, a batch the server has seen under its
        key (`KEY:<first line>`) may have been a shorter one — the batch an earlier run sent
        just before it failed or was interrupted: the deduped answer's seqs say how many
        records it held, and the rest goes on under the key of its own first line, so a
        re-run neither loses nor repeats a line."""
        while self.batch:
            first = self.lines[0]
            key = None if self.idempotency_key is None else f"{self.idempotency_key}:{first}"
            try:
                res = self.client.append(self.topic, self.batch, idempotency_key=key)
            except SeglogClientError as e:
                n = len(self.batch)
                self.batch, self.lines = [], []
                self.abort(
                    first,
                    f"the batch of lines from {first} ({n} records) was not written: "
                    + describe_error(e, self.url),
                )
            # a write's seqs are contiguous: a deduped answer's span is the earlier batch
            covered = res.last_seq - res.first_seq + 1 if res.deduped else len(self.batch)
            if not 0 < covered <= len(self.batch):
                n = len(self.batch)
                self.batch, self.lines = [], []
                self.abort(
                    first,
                    f"--idempotency-key: {key!r} was used for a batch of {covered} records, "
                    f"this one holds {n}; re-run with the --batch-size of the run that used it",
                )
            t = self.tally
            t.records += covered
            t.batches += 1
            t.deduped += res.deduped
            t.first_seq = res.first_seq if t.first_seq is None else t.first_seq
            t.last_seq = res.last_seq
            self.batch, self.lines = self.batch[covered:], self.lines[covered:]
            if self.on_sent is not None:
                self.on_sent(covered, 0 if self.batch else self.pending_bytes)
        self.pending_bytes = 0

    def abort(self, lineno: int, why: str) -> NoReturn:
        """Send what came before the failing line, then stop with its number."""
        self.send()  # a failure here reports itself (and the line it started at)
        note(self.tally.summary(self.topic), style="green")
        fail(f"line {lineno}: {why}")


READ_BYTES = 65536
UNIVERSAL_NEWLINES = os.name == "nt"  # how Python opens sys.stdin (`newline=None` there)


@dataclass(slots=True)
class Block:
    """Lines that one read completed: `lines[i]` is line number `first + i`, its newline
    dropped; `nbytes` is what the read took from the input (for the progress bar)."""

    first: int
    lines: list[str]
    nbytes: int


@dataclass(slots=True)
class ReadFailed:
    """Reading the input failed (an I/O error) at line `line`."""

    line: int
    error: Exception


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _read_blocks(source: Iterable[str] | TextIO, q: queue.Queue[Block | ReadFailed | None]) -> None:
    number = 1
    try:
        buffer = getattr(source, "buffer", None)
        if buffer is not None and hasattr(buffer, "read1"):
            blocks = _stream_blocks(source, buffer)  # type: ignore[arg-type]
        else:  # the arguments (or a stream without a byte buffer): one line at a time
            blocks = (
                Block(n, [line], len(line.encode(errors="surrogateescape")))
                for n, line in enumerate(source, 1)
            )
        for block in blocks:
            q.put(block)
            number = block.first + len(block.lines)
    except Exception as e:  # the pump reports it, after sending what came before
        q.put(ReadFailed(number, e))
    finally:
        q.put(_EOF)


def _stream_blocks(stream: TextIO, buffer: io.BufferedReader) -> Iterator[Block]:
    """What `for line in sys.stdin` yields, a read at a time: the stream's encoding (and
    error handler, but that bytes it cannot decode are left for the parse to refuse), and
    its newlines — lines end at `\n` (a `\r` stays in the line: the
    parse strips it at the end), except on Windows, where `\r\n` and `\r` end lines
    too. A line longer than a read is joined once it is complete."""
    # Bytes it cannot decode become surrogates, which the parse refuses with their line
    # number, after the lines before them are sent (a strict handler would fail the whole
    # read instead, without saying which line).
    errors = stream.errors or "strict"
    decoder: codecs.IncrementalDecoder | io.IncrementalNewlineDecoder
    decoder = codecs.getincrementaldecoder(stream.encoding or "utf-8")(
        "surrogateescape" if errors == "strict" else errors
    )
    if UNIVERSAL_NEWLINES:
        decoder = io.IncrementalNewlineDecoder(decoder, translate=True)
    pieces: list[str] = []  # the line being read
    number, nbytes = 1, 0
    while True:
        raw = buffer.read1(READ_BYTES)
        nbytes += len(raw)
        text = decoder.decode(raw, final=not raw)
        cut = text.rfind("\n")
        lines: list[str] = []
        if cut >= 0:
            pieces.append(text[:cut])
            lines = "".join(pieces).split("\n")
            pieces = [text[cut + 1 :]]
        elif text:
            pieces.append(text)
        if not raw:
            last = "".join(pieces)
            if last:
                lines.append(last)  # the last line, without a newline
        if lines:
            yield Block(number, lines, nbytes)
            number, nbytes = number + len(lines), 0
        if not raw:
            return


def _pump(p: Producer, q: queue.Queue[Block | ReadFailed | None], size: int, linger: float) -> None:
    deadline = 0.0
    while True:
        timeout = max(deadline - time.monotonic(), 0.0) if p.batch else None
        try:
            block = q.get(timeout=timeout)
        except queue.Empty:
            p.send()  # linger expired: the first record of the batch waited long enough
            continue
        if block is _EOF:
            p.send()
            return
        if isinstance(block, ReadFailed):
            p.abort(block.line, f"cannot read the input: {block.error}")
        # The read's bytes, shared out over its lines: each batch's share for the bar.
        share, rest = divmod(block.nbytes, len(block.lines))
        p.pending_bytes += rest
        for lineno, line in enumerate(block.lines, block.first):
            p.pending_bytes += share
            rec = p.parse(lineno, line)
            if rec is None:
                continue
            if not p.batch:
                deadline = time.monotonic() + linger
            p.add(lineno, rec)
            if len(p.batch) >= size:
                p.send()


def produce(
    topic: Annotated[
        str, typer.Argument(metavar="TOPIC", help="Topic to append to (created on first write).")
    ],
    data: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="DATA",
            help="Records as arguments (one JSON value each); stdin lines if none.",
        ),
    ] = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    raw: Annotated[
        bool, typer.Option("--raw", help='Plain-text lines: each becomes {"data": "<line>"}.')
    ] = False,
    tag: Annotated[
        str | None,
        typer.Option(help="Tag of each record; a template like '{user}' takes fields of the line."),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(help="Writer node id of each record (template like --tag)."),
    ] = None,
    batch_size: Annotated[
        int, typer.Option(help="Send a batch once it has this many records (max 10000).")
    ] = 500,
    linger_ms: Annotated[
        int, typer.Option(help="Send a batch once its first record waited this long (ms).")
    ] = 100,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            help="Retry-safe writes: each batch is sent with KEY:<its first line number>, "
            "so re-running the same input dedupes instead of appending twice."
        ),
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", hidden=True, help="Deprecated: --idempotency-key.")
    ] = None,
) -> None:
    """Append records from stdin lines (or arguments), sent in batches as they arrive.

    Each line is one JSON value (or plain text with --raw). A summary (records, first/last
    seq) goes to stderr."""
    if not 1 <= batch_size <= MAX_BATCH:
        usage(f"--batch-size must be 1..{MAX_BATCH}")
    if linger_ms < 0:
        usage("--linger-ms must be >= 0")
    if key is not None:
        note(
            "seglog: warning: --key is deprecated; it sets the idempotency key (not a message "
            "key): use --idempotency-key"
        )
        idempotency_key = idempotency_key or key
    q: queue.Queue[Block | ReadFailed | None] = queue.Queue(maxsize=8)
    size = None if data else file_size(sys.stdin)
    with common.client(url, api_key) as c, progress_bar(size) as on_sent:
        p = Producer(c, topic, url, raw, tag, node, idempotency_key, on_sent=on_sent)
        source: Iterable[str] | TextIO = data if data else sys.stdin
        threading.Thread(target=_read_blocks, args=(source, q), daemon=True).start()
        try:
            _pump(p, q, batch_size, linger_ms / 1000)
        except KeyboardInterrupt:
            p.send()
            note(p.tally.summary(topic), style="green")
            raise typer.Exit(130) from None
    note(p.tally.summary(topic), style="green")


def file_size(stream: TextIO) -> int | None:
    """The size of stdin when it is a regular file (`< file`), else None (a pipe, a tty)."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


@contextmanager
def progress_bar(total: int | None) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar with the record rate on stderr, for a file on stdin when stderr is a
    terminal; nothing otherwise (a pipe has no size, a log wants no bar)."""
    if total is None or not err.is_terminal:
        yield None
        return
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[records]} records"),
        TextColumn("{task.fields[rate]}/s"),
        TimeRemainingColumn(),
    )
    started = time.monotonic()
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("produce", total=total, records=0, rate=0)
        sent = 0

        def on_sent(records: int, nbytes: int) -> None:
            nonlocal sent
            sent += records
            rate = int(sent / max(time.monotonic() - started, 1e-3))
            bar.update(task, advance=nbytes, records=sent, rate=rate)

        yield on_sent
