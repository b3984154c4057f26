"""Data-source options: parsed and validated once into frozen values (pure, no I/O).

Spark hands options over as a case-insensitive mapping of strings (keys lowercased), so every
parser here lowercases keys and reads strings. Errors are `SeglogOptionError` whose message
starts with the option name, because the first line of a Python error is what a Spark user
sees. Unknown keys are ignored: Spark itself passes extra keys (`checkpointLocation`,
`queryName`, `path`) through the same mapping.

Positions follow Spark's Kafka source, with seqs in place of offsets:
- `startingSeqs` / `endingSeqs`: `earliest`, `latest`, or JSON `{"topic": seq}`; `-2` means
  earliest and `-1` latest. A JSON start seq is the first seq to read (inclusive); an end seq is
  exclusive. `startingOffsets` / `endingOffsets` are accepted as aliases.
- `startingTimestamp` / `endingTimestamp`: epoch ms; resolves to the first seq whose `ts` is at
  or after it, per topic.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from seglog.core.names import valid_topic_name

MAX_SEQ = 2**63 - 1  # Spark's LongType; a larger u64 seq is refused, never wrapped
EARLIEST_SENTINEL = -2
LATEST_SENTINEL = -1
# The columnar diff's page bounds (API §13.1; the JSON diff's are 1,000 and 8 MiB).
DIFF_PAGE_LIMIT = 65_536
DIFF_PAGE_BYTES = 32 * 1024 * 1024
MAX_DIFF_PAGE_BYTES = 64 * 1024 * 1024
MAX_RECORDS_PER_APPEND = 10000  # API §3
# Records per sink append: the server's per-request cost is paid once per chunk, and a
# chunk of ~100-byte records stays far below the write body limit.
DEFAULT_WRITE_BATCH = 5000


class SeglogOptionError(ValueError):
    """An option is missing, malformed or contradicts another one."""


class PositionKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    SEQS = "seqs"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class Position:
    """Where a read starts or ends. `seqs` values are seqs or the -2/-1 sentinels; topics
    absent from `seqs` take `default`."""

    kind: PositionKind
    seqs: tuple[tuple[str, int], ...] = ()
    timestamp_ms: int | None = None
    default: PositionKind = PositionKind.EARLIEST

    def seq_for(self, topic: str) -> int | None:
        for name, seq in self.seqs:
            if name == topic:
                return seq
        return None


EARLIEST = Position(PositionKind.EARLIEST)
LATEST = Position(PositionKind.LATEST, default=PositionKind.LATEST)


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which topics to read: an explicit list, a name prefix, or a regex (full match)."""

    topics: tuple[str, ...] = ()
    prefix: str | None = None
    pattern: str | None = None

    @property
    def is_explicit(self) -> bool:
        return bool(self.topics)

    def matches(self, topic: str) -> bool:
        if self.topics:
            return topic in self.topics
        if self.prefix is not None and not topic.startswith(self.prefix):
            return False
        return self.pattern is None or re.fullmatch(self.pattern, topic) is not None

    def list_prefix(self) -> str | None:
        """The prefix to ask the server for (a regex's literal lead is not worth guessing)."""
        return self.prefix


@dataclass(frozen=True, slots=True)
class ConnOptions:
    url: str
    api_key: str | None = None
    timeout_s: float = 30.0
    retries: int = 5


# A Spark task of a Python data source costs ~90 ms before it reads a row (measured on
# `local[2]`, BENCHMARKS.md, stop 38): partitions must be large for that to vanish. The byte
# budget is Spark's own for files (`spark.sql.files.maxPartitionBytes`).
RECORDS_PER_PARTITION = 1_000_000
BYTES_PER_PARTITION = 128 << 20


@dataclass(frozen=True, slots=True)
class ReadOptions:
    conn: ConnOptions
    subscription: Subscription
    starting: Position
    ending: Position
    min_partitions: int = 1
    max_records_per_partition: int = RECORDS_PER_PARTITION
    max_records_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    data_schema: str | None = None
    include_meta: bool = True
    page_limit: int = DIFF_PAGE_LIMIT
    max_batch_bytes: int = DIFF_PAGE_BYTES
    min_poll_interval_ms: int = 250


@dataclass(frozen=True, slots=True)
class FilesOptions:
    path: Path
    subscription: Subscription
    cold_path: Path | None = None
    data_schema: str | None = None
    include_meta: bool = True
    require_stopped: bool = False  # refuse a directory a running server holds
    max_records_per_partition: int = RECORDS_PER_PARTITION  # live records of whole segments
    max_bytes_per_partition: int = BYTES_PER_PARTITION  # segment file bytes per task


class DataFormat(enum.Enum):
    JSON = "json"  # a string `data` column holds JSON text and is parsed before sending
    TEXT = "text"  # a string `data` column is sent as a JSON string value


@dataclass(frozen=True, slots=True)
class WriteOptions:
    conn: ConnOptions
    topic: str | None = None
    write_batch_size: int = DEFAULT_WRITE_BATCH
    write_max_bytes: int = 8 * 1024 * 1024
    write_id: str | None = None
    node: str | None = None
    data_format: DataFormat = DataFormat.JSON
    create: bool | None = None


# ---- scalar parsers -----------------------------------------------------------------------


def _lower(raw: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in raw.items() if v is not None}


def _get(opts: Mapping[str, str], *names: str) -> str | None:
    for n in names:
        v = opts.get(n.lower())
        if v is not None and v.strip() != "":
            return v.strip()
    return None


def parse_bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise SeglogOptionError(f"{name}: expected true or false, got {value!r}")


def parse_int(
    name: str, value: str | None, default: int, *, minimum: int = 0, maximum: int = MAX_SEQ
) -> int:
    if value is None:
        return default
    try:
        n = int(value.strip())
    except ValueError:
        raise SeglogOptionError(f"{name}: expected an integer, got {value!r}") from None
    if n < minimum or n > maximum:
        raise SeglogOptionError(f"{name}: must be between {minimum} and {maximum}, got {n}")
    return n


def parse_topic_list(name: str, value: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in value.split(",") if t.strip())
    if not topics:
        raise SeglogOptionError(f"{name}: no topic names in {value!r}")
    for t in topics:
        if not valid_topic_name(t):
            raise SeglogOptionError(f"{name}: {t!r} is not a valid topic name")
    if len(set(topics)) != len(topics):
        raise SeglogOptionError(f"{name}: duplicate topic in {value!r}")
    return topics


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    topics = _get(opts, "topics", "topic", "subscribe")
    prefix = _get(opts, "topicPrefix")
    pattern = _get(opts, "topicPattern", "subscribePattern")
    given = [
        n for n, v in (("topics", topics), ("topicPrefix", prefix), ("topicPattern", pattern)) if v
    ]
    if topics and (prefix or pattern):
        raise SeglogOptionError(
            f"topics: give either topics or topicPrefix/topicPattern, not {given}"
        )
    if topics:
        return Subscription(topics=parse_topic_list("topics", topics))
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise SeglogOptionError(f"topicPattern: invalid regex {pattern!r}: {e}") from None
    if prefix is None and pattern is None:
        raise SeglogOptionError(
            "topics: which topics to read is required: set topics (comma list), "
            "topicPrefix or topicPattern"
        )
    return Subscription(prefix=prefix, pattern=pattern)


def parse_position(
    name: str, value: str | None, default: Position, *, allow_earliest: bool = True
) -> Position:
    """`earliest` | `latest` | JSON object of topic → seq (-2 earliest, -1 latest)."""
    if value is None:
        return default
    v = value.strip()
    if v.lower() == "earliest":
        if not allow_earliest:
            raise SeglogOptionError(f"{name}: 'earliest' is not allowed here")
        return EARLIEST
    if v.lower() == "latest":
        return LATEST
    try:
        doc = orjson.loads(v)
    except orjson.JSONDecodeError:
        raise SeglogOptionError(
            f"{name}: expected 'earliest', 'latest' or a JSON object {{\"topic\": seq}}, got {value!r}"
        ) from None
    if not isinstance(doc, dict) or not doc:
        raise SeglogOptionError(f"{name}: expected a non-empty JSON object of topic -> seq")
    pairs: list[tuple[str, int]] = []
    for topic, seq in doc.items():
        if not valid_topic_name(topic):
            raise SeglogOptionError(f"{name}: {topic!r} is not a valid topic name")
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise SeglogOptionError(f"{name}: seq for {topic!r} must be an integer, got {seq!r}")
        if seq < EARLIEST_SENTINEL or seq > MAX_SEQ:
            raise SeglogOptionError(
                f"{name}: seq for {topic!r} must be -2 (earliest), -1 (latest) or 0..{MAX_SEQ}, got {seq}"
            )
        if seq == EARLIEST_SENTINEL and not allow_earliest:
            raise SeglogOptionError(f"{name}: -2 (earliest) is not allowed for {topic!r}")
        pairs.append((topic, seq))
    return Position(PositionKind.SEQS, seqs=tuple(sorted(pairs)), default=default.kind)


def parse_timestamp(name: str, value: str | None) -> Position | None:
    if value is None:
        return None
    ms = parse_int(name, value, 0, minimum=0)
    return Position(PositionKind.TIMESTAMP, timestamp_ms=ms)


def parse_conn(opts: Mapping[str, str]) -> ConnOptions:
    url = _get(opts, "url")
    if url is None:
        raise SeglogOptionError(
            "url: the seglog server URL is required, e.g. http://127.0.0.1:4000"
        )
    if not re.match(r"^https?://", url):
        raise SeglogOptionError(f"url: expected http://host:port, got {url!r}")
    timeout_ms = parse_int("requestTimeoutMs", _get(opts, "requestTimeoutMs"), 30_000, minimum=1)
    retries = parse_int("numRetries", _get(opts, "numRetries"), 5, minimum=0, maximum=100)
    return ConnOptions(
        url=url.rstrip("/"),
        api_key=_get(opts, "apiKey"),
        timeout_s=timeout_ms / 1000.0,
        retries=retries,
    )


def parse_data_schema(raw: Mapping[str, str]) -> str | None:
    """The `dataSchema` DDL as a Spark type: a struct field list is wrapped in `struct<...>`."""
    ddl = _get(_lower(raw), "dataSchema")
    if ddl is None:
        return None
    if ddl.lower().startswith("struct<") or ddl.lower() == "string":
        return ddl
    return f"struct<{ddl}>"


# ---- option sets --------------------------------------------------------------------------


def parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    opts = _lower(raw)
    conn = parse_conn(opts)
    sub = parse_subscription(opts)
    start_default = LATEST if streaming else EARLIEST
    starting = parse_position(
        "startingSeqs", _get(opts, "startingSeqs", "startingOffsets"), start_default
    )
    ts_start = parse_timestamp("startingTimestamp", _get(opts, "startingTimestamp"))
    if ts_start is not None:
        if _get(opts, "startingSeqs", "startingOffsets") is not None:
            raise SeglogOptionError(
                "startingTimestamp: give either startingSeqs or startingTimestamp"
            )
        starting = ts_start
    ending_raw = _get(opts, "endingSeqs", "endingOffsets")
    ts_end = parse_timestamp("endingTimestamp", _get(opts, "endingTimestamp"))
    if streaming and (ending_raw is not None or ts_end is not None):
        raise SeglogOptionError("endingSeqs: ending positions apply to batch reads only")
    ending = parse_position("endingSeqs", ending_raw, LATEST, allow_earliest=False)
    if ts_end is not None:
        if ending_raw is not None:
            raise SeglogOptionError("endingTimestamp: give either endingSeqs or endingTimestamp")
        ending = ts_end
    if ending.kind is PositionKind.EARLIEST:
        raise SeglogOptionError("endingSeqs: 'earliest' is not a valid end")
    mrpt_raw = _get(opts, "maxRecordsPerTrigger", "maxOffsetsPerTrigger")
    return ReadOptions(
        conn=conn,
        subscription=sub,
        starting=starting,
        ending=ending,
        min_partitions=parse_int(
            "minPartitions", _get(opts, "minPartitions"), 1, minimum=1, maximum=100_000
        ),
        max_records_per_partition=parse_int(
            "maxRecordsPerPartition",
            _get(opts, "maxRecordsPerPartition"),
            RECORDS_PER_PARTITION,
            minimum=1,
        ),
        max_records_per_trigger=None
        if mrpt_raw is None
        else parse_int("maxRecordsPerTrigger", mrpt_raw, 0, minimum=1),
        fail_on_data_loss=parse_bool("failOnDataLoss", _get(opts, "failOnDataLoss"), True),
        data_schema=parse_data_schema(opts),
        include_meta=parse_bool("includeMeta", _get(opts, "includeMeta"), True),
        page_limit=parse_int(
            "pageLimit",
            _get(opts, "pageLimit"),
            DIFF_PAGE_LIMIT,
            minimum=1,
            maximum=DIFF_PAGE_LIMIT,
        ),
        max_batch_bytes=parse_int(
            "maxBatchBytes",
            _get(opts, "maxBatchBytes"),
            DIFF_PAGE_BYTES,
            minimum=1,
            maximum=MAX_DIFF_PAGE_BYTES,
        ),
        min_poll_interval_ms=parse_int(
            "minPollIntervalMs", _get(opts, "minPollIntervalMs"), 250, minimum=0
        ),
    )


def is_offline(raw: Mapping[str, str]) -> bool:
    """A `path` (data dir) and no `url` selects the offline segment-file reader."""
    opts = _lower(raw)
    return _get(opts, "path") is not None and _get(opts, "url") is None


def parse_files_options(raw: Mapping[str, str]) -> FilesOptions:
    opts = _lower(raw)
    path = _get(opts, "path")
    if path is None:
        raise SeglogOptionError("path: the seglog data directory is required for offline reads")
    for unsupported in ("startingSeqs", "endingSeqs", "startingTimestamp", "endingTimestamp"):
        if _get(opts, unsupported) is not None:
            raise SeglogOptionError(
                f"{unsupported}: not supported by the offline reader; filter on seq/ts instead"
            )
    cold = _get(opts, "coldPath")
    any_topic = any(
        _get(opts, k) is not None for k in ("topics", "topic", "topicPrefix", "topicPattern")
    )
    return FilesOptions(
        path=Path(path),
        subscription=parse_subscription(opts) if any_topic else Subscription(prefix=""),
        cold_path=Path(cold) if cold else None,
        data_schema=parse_data_schema(opts),
        include_meta=parse_bool("includeMeta", _get(opts, "includeMeta"), True),
        require_stopped=parse_bool("requireStopped", _get(opts, "requireStopped"), False),
        max_records_per_partition=parse_int(
            "maxRecordsPerPartition",
            _get(opts, "maxRecordsPerPartition"),
            RECORDS_PER_PARTITION,
            minimum=1,
        ),
        max_bytes_per_partition=parse_int(
            "maxBytesPerPartition",
            _get(opts, "maxBytesPerPartition"),
            BYTES_PER_PARTITION,
            minimum=1,
        ),
    )


def parse_write_options(raw: Mapping[str, str]) -> WriteOptions:
    opts = _lower(raw)
    topic = _get(opts, "topic")
    if topic is not None and not valid_topic_name(topic):
        raise SeglogOptionError(f"topic: {topic!r} is not a valid topic name")
    fmt = (_get(opts, "dataFormat") or "json").lower()
    try:
        data_format = DataFormat(fmt)
    except ValueError:
        raise SeglogOptionError(f"dataFormat: expected json or text, got {fmt!r}") from None
    create_raw = _get(opts, "createTopic")
    write_id = _get(opts, "writeId")
    if write_id is not None and len(write_id) > 64:
        raise SeglogOptionError(
            "writeId: at most 64 characters (it becomes part of idempotency keys)"
        )
    return WriteOptions(
        conn=parse_conn(opts),
        topic=topic,
        write_batch_size=parse_int(
            "writeBatchSize",
            _get(opts, "writeBatchSize"),
            DEFAULT_WRITE_BATCH,
            minimum=1,
            maximum=MAX_RECORDS_PER_APPEND,
        ),
        write_max_bytes=parse_int(
            "writeMaxBytes", _get(opts, "writeMaxBytes"), 8 * 1024 * 1024, minimum=1024
        ),
        write_id=write_id,
        node=_get(opts, "node"),
        data_format=data_format,
        create=None if create_raw is None else parse_bool("createTopic", create_raw, True),
    )
