"""Value objects shared by every layer (engine, storage, the HTTP request parsers, offline readers).

All are frozen slotted dataclasses. Record payloads travel as *compact JSON bytes*
(`data_json`, `meta_json`) rather than Python values: the byte length is the record's
size (SEMANTICS §1.2), the WAL/segment blob is built by concatenation, and the HTTP layer
splices the bytes into responses without re-encoding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt
import orjson

from seglog.core.jsonbytes import json_bytes
from seglog.errors import ErrorCode, SeglogError, invalid
from seglog.wire_fields import I32, U64, TagPredicate, TopicName

MAX_RECORD_BYTES = 1_048_576
MAX_META_BYTES = 16_384
MAX_META_KEYS = 64
MAX_TAG_BYTES = 256
MAX_NODE_BYTES = 128
MAX_IDEMPOTENCY_KEY_BYTES = 256
MAX_RECORDS_PER_WRITE = 10_000
MAX_DIFF_LIMIT = 1000
DEFAULT_DIFF_LIMIT = 256
DEFAULT_BATCH_BYTES = 1_048_576
MAX_BATCH_BYTES = 8_388_608
LEASE_MS_MIN = 100
LEASE_MS_MAX = 86_400_000
CLAIM_JITTER_MAX = 5000


def clamp_lease(lease_ms: int) -> int:
    """A queue lease duration as stored and applied: `[100, 86400000]` ms (API §2.1, §9)."""
    return min(max(lease_ms, LEASE_MS_MIN), LEASE_MS_MAX)


U64_MAX = 2**64 - 1


def check_batch_count(n: int) -> None:
    """API §3: a write carries 1..`MAX_RECORDS_PER_WRITE` records (the one copy of the
    rule: the HTTP request parser and the engine both call it)."""
    if n == 0:
        raise invalid("records must contain at least one record")
    if n > MAX_RECORDS_PER_WRITE:
        raise SeglogError(
            ErrorCode.BATCH_TOO_LARGE,
            f"a write may carry at most {MAX_RECORDS_PER_WRITE} records, got {n}",
            {"records": n, "max": MAX_RECORDS_PER_WRITE},
        )


def check_record_size(size: int, index: int) -> None:
    """API §3: a record's data+meta is at most `MAX_RECORD_BYTES`."""
    if size > MAX_RECORD_BYTES:
        raise SeglogError(
            ErrorCode.RECORD_TOO_LARGE,
            f"records[{index}]: data+meta is {size} bytes, the limit is {MAX_RECORD_BYTES}",
            {"index": index, "bytes": size, "max": MAX_RECORD_BYTES},
        )


class Durability(StrEnum):
    EPHEMERAL = "ephemeral"
    MEMORY = "memory"
    DISK = "disk"
    FSYNC = "fsync"

    @property
    def persistent(self) -> bool:
        return self is not Durability.EPHEMERAL


class TopicType(StrEnum):
    LOG = "log"
    QUEUE = "queue"


class Discard(StrEnum):
    OLD = "old"
    REJECT = "reject"


class TopicConfigFields(TypedDict):
    """A topic's whole configuration on the wire, every field present (API §0.11)."""

    type: TopicType
    ttl_ms: U64
    cap_records: U64
    cap_bytes: U64
    discard: Discard
    durable: bool
    durability: Durability
    priority: I32 | None
    auto_priority: bool
    auto_create: bool
    idempotency_window_ms: U64
    dedupe_node: bool
    lease_ms: U64
    claim_jitter_ms: U64
    max_deliveries: U64
    dead_letter: TopicName | None
    leases_durable: bool


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The full, normalized topic config (API §0.11). Field order is the wire order."""

    type: TopicType = TopicType.LOG
    ttl_ms: int = 0
    cap_records: int = 0
    cap_bytes: int = 0
    discard: Discard = Discard.OLD
    durability: Durability = Durability.DISK
    priority: int | None = None
    auto_priority: bool = True
    auto_create: bool = True
    idempotency_window_ms: int = 120_000
    dedupe_node: bool = True
    lease_ms: int = 30_000
    claim_jitter_ms: int = 0
    max_deliveries: int = 0
    dead_letter: str | None = None
    leases_durable: bool = False

    @property
    def durable(self) -> bool:
        return self.durability is Durability.FSYNC

    @property
    def has_retention(self) -> bool:
        return self.ttl_ms > 0 or self.cap_records > 0 or self.cap_bytes > 0

    def to_dict(self) -> TopicConfigFields:
        """The wire/snapshot form, in the exact key order of API §0.11."""
        return {
            "type": self.type,
            "ttl_ms": self.ttl_ms,
            "cap_records": self.cap_records,
            "cap_bytes": self.cap_bytes,
            "discard": self.discard,
            "durable": self.durable,
            "durability": self.durability,
            "priority": self.priority,
            "auto_priority": self.auto_priority,
            "auto_create": self.auto_create,
            "idempotency_window_ms": self.idempotency_window_ms,
            "dedupe_node": self.dedupe_node,
            "lease_ms": self.lease_ms,
            "claim_jitter_ms": self.claim_jitter_ms,
            "max_deliveries": self.max_deliveries,
            "dead_letter": self.dead_letter,
            "leases_durable": self.leases_durable,
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @staticmethod
    def from_dict(obj: Any) -> TopicConfig:
        """Parse a request/snapshot config object; omitted fields take the defaults.

        Raises `invalid_request` on wrong types or enum values. Unknown keys are ignored
        (additive evolution). Name validity of `dead_letter` is checked by the caller,
        which knows the order of checks the API prescribes.
        """
        if not isinstance(obj, dict):
            raise invalid("config must be a JSON object")
        d = TopicConfig()

        def u64(key: str, default: int) -> int:
            v = obj.get(key, default)
            if v is None and key in obj:
                raise invalid(f"config.{key} must be an unsigned integer")
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > U64_MAX:
                raise invalid(f"config.{key} must be an unsigned integer")
            return v

        def boolean(key: str, default: bool) -> bool:
            v = obj.get(key, default)
            if not isinstance(v, bool):
                raise invalid(f"config.{key} must be a boolean")
            return v

        def enum(key: str, cls: Any, default: Any) -> Any:
            v = obj.get(key, default.value)
            try:
                return cls(v)
            except (ValueError, TypeError):
                allowed = ", ".join(repr(m.value) for m in cls)
                raise invalid(f"config.{key} must be one of {allowed}") from None

        type_ = enum("type", TopicType, d.type)
        discard = enum("discard", Discard, d.discard)
        durable = boolean("durable", False)
        # Only an absent `durability` resolves from `durable`; `null` is not a class (only
        # `priority` and `dead_letter` are nullable, API §0.11). Snapshots and WAL records
        # always carry the resolved string, so they never take this path.
        if "durability" in obj:
            durability = enum("durability", Durability, Durability.DISK)
        else:
            durability = Durability.FSYNC if durable else Durability.DISK
        priority = obj.get("priority")
        if priority is not None and (
            isinstance(priority, bool)
            or not isinstance(priority, int)
            or not -(2**31) <= priority < 2**31
        ):
            raise invalid("config.priority must be a 32-bit integer or null")
        dead_letter = obj.get("dead_letter")
        if dead_letter is not None and not isinstance(dead_letter, str):
            raise invalid("config.dead_letter must be a string or null")
        return TopicConfig(
            type=type_,
            ttl_ms=u64("ttl_ms", 0),
            cap_records=u64("cap_records", 0),
            cap_bytes=u64("cap_bytes", 0),
            discard=discard,
            durability=durability,
            priority=priority,
            auto_priority=boolean("auto_priority", True),
            auto_create=boolean("auto_create", True),
            idempotency_window_ms=u64("idempotency_window_ms", 120_000),
            dedupe_node=boolean("dedupe_node", True),
            lease_ms=clamp_lease(u64("lease_ms", 30_000)),
            claim_jitter_ms=min(u64("claim_jitter_ms", 0), CLAIM_JITTER_MAX),
            max_deliveries=u64("max_deliveries", 0),
            dead_letter=dead_letter,
            leases_durable=boolean("leases_durable", False),
        )

    @staticmethod
    def from_json(raw: bytes) -> TopicConfig:
        return TopicConfig.from_dict(orjson.loads(raw))


@dataclass(frozen=True, slots=True)
class Selector:
    """A tag match predicate: `Eq` (exact) or `Glob` (prefix; `value` excludes the `*`)."""

    op: Literal["Eq", "Glob"]
    value: str

    def matches(self, tag: str | None) -> bool:
        if tag is None:
            return False
        return tag == self.value if self.op == "Eq" else tag.startswith(self.value)

    def to_wire(self) -> TagPredicate:
        """Canonical tuple form, e.g. `["tag","Glob","public:*"]` (a JSON array)."""
        return ("tag", self.op, self.value + "*" if self.op == "Glob" else self.value)

    @staticmethod
    def parse(obj: Any) -> Selector:
        """Parse the API §5 predicate grammar; anything else is `invalid_request`."""
        if isinstance(obj, str):
            if obj.endswith("*"):
                return Selector("Glob", obj[:-1])
            return Selector("Eq", obj)
        if (
            isinstance(obj, list | tuple)  # a tuple: `to_wire`'s own form, round-tripped
            and len(obj) == 3
            and obj[0] == "tag"
            and obj[1] in ("Eq", "Glob")
            and isinstance(obj[2], str)
        ):
            if obj[1] == "Eq":
                return Selector("Eq", obj[2])
            if not obj[2].endswith("*"):
                raise invalid("a Glob match value must end with '*'")
            return Selector("Glob", obj[2][:-1])
        raise invalid('match must be ["tag","Eq",V], ["tag","Glob","P*"] or a string')


def json_size(data_json: bytes, meta_json: bytes | None) -> int:
    """bytes(record) of SEMANTICS §1.2."""
    return len(data_json) + (len(meta_json) if meta_json is not None else 0)


# Not frozen: one is built per record on the hot path, and a frozen dataclass __init__
# costs ~4x more. Treat as immutable.
@dataclass(slots=True)
class RecordIn:
    """A record to append. `data_json`/`meta_json` are compact JSON (meta None = absent)."""

    data_json: bytes
    meta_json: bytes | None = None
    node: str | None = None
    tag: str | None = None

    @staticmethod
    def of(
        data: Any, meta: Any = None, node: str | None = None, tag: str | None = None
    ) -> RecordIn:
        """Build from Python values (meta None = absent)."""
        meta_json = None if meta is None else json_bytes(meta)
        return RecordIn(json_bytes(data), meta_json, node, tag)

    @property
    def size(self) -> int:
        return json_size(self.data_json, self.meta_json)


class RecordBatch:
    """The records of one write, column by column: what the write path works on.

    A write of n records is n entries in each of four lists (`meta` None = absent, `node`
    and `tag` None = none), so the steps that touch every record — sizes, the batch node,
    the WAL frames, the topic's slot columns — run over whole lists instead of building
    and reading n `RecordIn` objects. The lists are shared, never mutated: treat a batch
    as immutable. Iterating yields `RecordIn`s for the paths that want records."""

    __slots__ = ("_sizes", "data", "meta", "node", "tag")

    def __init__(
        self,
        data: list[bytes],
        meta: list[bytes | None],
        node: list[str | None],
        tag: list[str | None],
    ) -> None:
        if not len(data) == len(meta) == len(node) == len(tag):
            raise ValueError("a record batch's columns differ in length")
        self.data = data
        self.meta = meta
        self.node = node
        self.tag = tag
        self._sizes: list[int] | None = None

    @classmethod
    def of(cls, records: RecordBatch | Iterable[RecordIn]) -> RecordBatch:
        """`records` as a batch (a batch is returned as it is)."""
        if isinstance(records, RecordBatch):
            return records
        rs = records if isinstance(records, (list, tuple)) else list(records)
        return cls(
            [r.data_json for r in rs],
            [r.meta_json for r in rs],
            [r.node for r in rs],
            [r.tag for r in rs],
        )

    def copy(self) -> RecordBatch:
        """A batch with lists of its own (the values are immutable and shared)."""
        return RecordBatch(list(self.data), list(self.meta), list(self.node), list(self.tag))

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[RecordIn]:
        return map(RecordIn, self.data, self.meta, self.node, self.tag)

    def __getitem__(self, i: int) -> RecordIn:
        return RecordIn(self.data[i], self.meta[i], self.node[i], self.tag[i])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordBatch):
            return NotImplemented
        return (self.data, self.meta, self.node, self.tag) == (
            other.data,
            other.meta,
            other.node,
            other.tag,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordBatch({list(self)!r})"

    def sizes(self) -> list[int]:
        """bytes(record) of SEMANTICS §1.2 for each record (computed once)."""
        if self._sizes is None:
            data, meta = self.data, self.meta
            if meta.count(None) == len(meta):
                self._sizes = list(map(len, data))
            else:
                self._sizes = [
                    len(d) + (0 if m is None else len(m)) for d, m in zip(data, meta, strict=True)
                ]
        return self._sizes

    def with_node(self, node: str) -> RecordBatch:
        """The batch with `node` filled in where a record has none (API §3's batch node)."""
        nodes = self.node
        absent = nodes.count(None)
        if absent == 0:
            return self
        filled: list[str | None] = (
            [node] * len(nodes)
            if absent == len(nodes)
            else [node if n is None else n for n in nodes]
        )
        out = RecordBatch(self.data, self.meta, filled, self.tag)
        out._sizes = self._sizes
        return out


# Not frozen: one is built per record on the hot path, and a frozen dataclass __init__
# costs ~4x more. Treat as immutable.
@dataclass(slots=True)
class Record:
    """A committed record as read back."""

    seq: int
    ts: int
    data_json: bytes
    meta_json: bytes | None = None
    node: str | None = None
    tag: str | None = None

    @property
    def data(self) -> Any:
        return orjson.loads(self.data_json)

    @property
    def meta(self) -> Any:
        return None if self.meta_json is None else orjson.loads(self.meta_json)


class TombstoneReason(StrEnum):
    CAP = "cap"
    TTL = "ttl"
    MIXED = "mixed"
    RECREATED = "recreated"
    SOURCE_TRIM = "source_trim"


class TombstoneFields(TypedDict):
    """A gap the reader skipped over, on the wire (API §4)."""

    gap_from: U64
    gap_to: U64
    reason: TombstoneReason
    missed_estimate: U64
    earliest_seq: U64
    head_seq: U64


@dataclass(frozen=True, slots=True)
class Tombstone:
    gap_from: int
    gap_to: int
    reason: TombstoneReason
    missed_estimate: int
    earliest_seq: int
    head_seq: int

    def to_dict(self) -> TombstoneFields:
        return {
            "gap_from": self.gap_from,
            "gap_to": self.gap_to,
            "reason": self.reason,
            "missed_estimate": self.missed_estimate,
            "earliest_seq": self.earliest_seq,
            "head_seq": self.head_seq,
        }


@dataclass(slots=True)
class RecordColumns:
    """The records of a columnar read as parallel columns (row `i` is one record); `data`
    and `meta` hold compact JSON text."""

    seq: list[int]
    ts: list[int]
    node: list[str | None]
    tag: list[str | None]
    data: list[bytes]
    meta: list[bytes | None]

    @classmethod
    def empty(cls) -> RecordColumns:
        return cls([], [], [], [], [], [])

    def __len__(self) -> int:
        return len(self.seq)


@dataclass(frozen=True, slots=True)
class DataRun:
    """The `data` texts of consecutive rows of a packed read, as spans of one buffer (a
    verified copy of a sealed segment's bytes): row k's text is `buf[starts[k]:ends[k]]`,
    the spans ascending and disjoint."""

    buf: bytes
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class PackedColumns:
    """A columnar read of sealed records that carry no meta, as arrays and segment spans:
    no Python object per record (API §13.1's bulk case). `node` and `tag` are codes into
    `labels` (code 0 is None); `data` holds the rows' texts run by run, in row order."""

    seq: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]
    labels: list[str | None]
    node: npt.NDArray[Any]
    tag: npt.NDArray[Any]
    data: list[DataRun]

    def __len__(self) -> int:
        return len(self.seq)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A read (SEMANTICS §4.4). A columnar read leaves `records` empty and fills `columns`."""

    topic: str
    records: list[Record]
    next_from_seq: int
    head_seq: int
    earliest_seq: int
    tombstone: Tombstone | None
    records_scanned: int
    cold_segments_read: int = 0
    columns: RecordColumns | PackedColumns | None = None

    @property
    def caught_up(self) -> bool:
        return self.next_from_seq == self.head_seq

    @property
    def lag(self) -> int:
        return self.head_seq - self.next_from_seq


@dataclass(frozen=True, slots=True)
class WriteResult:
    topic: str
    first_seq: int
    last_seq: int
    seqs: list[int]
    head_seq: int
    count: int
    created: bool
    deduped: bool
    wal_append_ms: float = 0.0
    fsync_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class DeleteResult:
    topic: str
    deleted: int
    earliest_seq: int
    head_seq: int
    count: int
    bytes: int


@dataclass(frozen=True, slots=True)
class PutTopicResult:
    topic: str
    created: bool
    config: TopicConfig


@dataclass(frozen=True, slots=True)
class DropTopicResult:
    topic: str
    deleted: bool
    routers_removed: list[str]


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """The `queue` member of a queue topic's state (API §2.2, SEMANTICS §10.5)."""

    ready: int
    in_flight: int
    dead_lettered: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """Topic state as reported by GET /v0/topics/:topic and the list endpoint."""

    topic: str
    config: TopicConfig
    head_seq: int
    earliest_seq: int
    count: int
    bytes: int
    effective_priority: int
    last_write_ts: int | None
    last_read_ts: int | None
    queue: QueueCounts | None = None  # queue topics only

    @property
    def next_seq(self) -> int:
        return self.head_seq + 1
