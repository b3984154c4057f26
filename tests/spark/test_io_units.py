"""Range reads and partition writes against an in-memory stand-in for `seglog.client.Client`.

These isolate the paging, tombstone and idempotency-key logic from Spark and HTTP; the real
server paths are covered in test_spark_e2e.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pytest

client_mod = pytest.importorskip("seglog.client")
if not hasattr(client_mod, "TopicNotFound"):
    pytest.skip("seglog.client is not available yet", allow_module_level=True)

from seglog.client import ArrowPage  # noqa: E402
from seglog.spark.errors import SeglogDataLossError  # noqa: E402
from seglog.spark.offsets import SeqRange  # noqa: E402
from seglog.spark.online import read_range  # noqa: E402
from seglog.spark.options import parse_write_options  # noqa: E402
from seglog.spark.sink import write_partition  # noqa: E402
from tests.spark.test_logic import SPARK_SCHEMA  # noqa: E402


@dataclass
class Rec:
    seq: int
    ts: int
    data: Any
    node: str | None = None
    tag: str | None = None
    meta: Any = None


@dataclass
class Tomb:
    gap_from: int
    gap_to: int
    reason: str


@dataclass
class Diff:
    records: list[Rec]
    next_from_seq: int
    head_seq: int
    tombstone: Tomb | None
    caught_up: bool


@dataclass
class Appended:
    first_seq: int
    last_seq: int
    deduped: bool


@dataclass
class FakeClient:
    """One topic `t` with seqs 1..head; seqs < floor are evicted (tombstone), `deleted` skipped."""

    head: int = 0
    floor: int = 1
    deleted: set[int] = field(default_factory=set)
    calls: list[tuple[int, int]] = field(default_factory=list)
    keys: dict[str, Appended] = field(default_factory=dict)
    written: list[Any] = field(default_factory=list)

    def diff(self, topic: str, from_seq: int = 0, *, limit: int | None = None, **_: Any) -> Diff:
        self.calls.append((from_seq, limit or 256))
        tomb = None
        cur = from_seq
        if from_seq + 1 < self.floor:
            tomb = Tomb(from_seq + 1, self.floor - 1, "cap")
            cur = self.floor - 1
        recs: list[Rec] = []
        while cur < self.head and len(recs) < (limit or 256):
            cur += 1
            if cur not in self.deleted:
                recs.append(
                    Rec(
                        cur,
                        1000 + cur,
                        {"i": cur},
                        tag=f"t{cur}",
                        meta={"m": 1} if cur % 2 else None,
                    )
                )
        return Diff(recs, cur, self.head, tomb, cur == self.head)

    def diff_arrow(self, topic: str, from_seq: int = 0, **kwargs: Any) -> ArrowPage:
        """The columnar diff (API §13.1) of the same read, as the real client returns it."""
        res = self.diff(topic, from_seq, **kwargs)
        recs = res.records
        table = pa.table(
            {
                "seq": pa.array([r.seq for r in recs], pa.int64()),
                "ts": pa.array([r.ts for r in recs], pa.int64()),
                "node": pa.array([r.node for r in recs], pa.string()),
                "tag": pa.array([r.tag for r in recs], pa.string()),
                "data": pa.array([orjson.dumps(r.data).decode() for r in recs], pa.string()),
                "meta": pa.array(
                    [None if r.meta is None else orjson.dumps(r.meta).decode() for r in recs],
                    pa.string(),
                ),
            }
        )
        tomb = res.tombstone
        fields = {
            "next_from_seq": res.next_from_seq,
            "head_seq": res.head_seq,
            "caught_up": res.caught_up,
            "tombstone": None if tomb is None else tomb.__dict__,
        }
        return ArrowPage(table, fields)

    def append_encoded(self, topic: str, records_json: bytes, **kwargs: Any) -> Appended:
        return self.append(topic, orjson.loads(records_json), **kwargs)

    def append(
        self, topic: str, records: list[Any], *, idempotency_key: str | None = None, **_: Any
    ) -> Appended:
        if idempotency_key in self.keys:
            prev = self.keys[idempotency_key]
            return Appended(prev.first_seq, prev.last_seq, True)
        first = len(self.written) + 1
        self.written += records
        res = Appended(first, len(self.written), False)
        if idempotency_key is not None:
            self.keys[idempotency_key] = res
        return res


def arrow() -> pa.Schema:
    from seglog.spark.schema import arrow_schema

    return arrow_schema(SPARK_SCHEMA)


def seqs(batches: list[pa.RecordBatch]) -> list[int]:
    return [s for b in batches for s in b.column(1).to_pylist()]


def test_range_read_pages_and_stops_at_planned_end() -> None:
    c = FakeClient(head=2500, deleted={7, 8})
    got = list(
        read_range(c, SeqRange("t", 5, 2100), arrow(), fail_on_data_loss=True, page_limit=1000)
    )
    assert seqs(got) == [s for s in range(6, 2101) if s not in (7, 8)]
    assert all(limit <= 1000 for _, limit in c.calls)
    assert all(b.schema.equals(arrow()) for b in got)
    assert got[0].column(5).to_pylist()[0] == '{"i":6}'


def test_tombstone_in_range_is_data_loss() -> None:
    c = FakeClient(head=50, floor=21)
    with pytest.raises(
        SeglogDataLossError, match=r"'t': seqs 6\.\.20 \(15 records\) were removed \(cap\)"
    ):
        list(read_range(c, SeqRange("t", 5, 30), arrow(), fail_on_data_loss=True))
    assert seqs(
        list(read_range(c, SeqRange("t", 5, 30), arrow(), fail_on_data_loss=False))
    ) == list(range(21, 31))
    # a gap that ends beyond the planned range is reported only up to the range's end
    with pytest.raises(SeglogDataLossError, match=r"seqs 1\.\.10 "):
        list(read_range(c, SeqRange("t", 0, 10), arrow(), fail_on_data_loss=True))


def test_head_going_backwards_is_reported_as_recreated() -> None:
    c = FakeClient(head=3)
    with pytest.raises(SeglogDataLossError, match="recreated"):
        list(read_range(c, SeqRange("t", 3, 10), arrow(), fail_on_data_loss=True))


def test_partition_writes_are_keyed_and_deduplicated_on_retry() -> None:
    opts = parse_write_options({"url": "http://x", "topic": "out", "writeBatchSize": "4"})
    batch = pa.RecordBatch.from_pydict({"data": [f'{{"n": {i}}}' for i in range(10)]})
    c = FakeClient()
    first = write_partition(c, [batch], opts, "spark:w1:0", 0, 0)
    assert (first.records, first.chunks, first.deduped_chunks) == (10, 3, 0)
    assert sorted(c.keys) == ["spark:w1:0:0", "spark:w1:0:1", "spark:w1:0:2"]
    retry = write_partition(c, [batch.slice(0, 6), batch.slice(6)], opts, "spark:w1:0", 0, 1)
    assert (retry.chunks, retry.deduped_chunks) == (3, 3)
    assert [r["data"]["n"] for r in c.written] == list(range(10))


def test_a_failed_append_ends_the_partition_and_no_later_chunk_is_sent() -> None:
    """The next chunk is cut while an append is in flight, but sent only after that append
    was acknowledged: a failure stops the task with every later chunk unsent."""
    opts = parse_write_options({"url": "http://x", "topic": "out", "writeBatchSize": "2"})
    batch = pa.RecordBatch.from_pydict({"data": [f'{{"n": {i}}}' for i in range(10)]})

    class FailingOnThird(FakeClient):
        def append_encoded(self, topic: str, records_json: bytes, **kwargs: Any) -> Appended:
            if kwargs["idempotency_key"].endswith(":2"):
                raise ConnectionError("server gone")
            return super().append_encoded(topic, records_json, **kwargs)

    c = FailingOnThird()
    with pytest.raises(ConnectionError, match="server gone"):
        write_partition(c, [batch], opts, "spark:w1:0", 0, 0)
    assert [r["data"]["n"] for r in c.written] == [0, 1, 2, 3]
    assert sorted(c.keys) == ["spark:w1:0:0", "spark:w1:0:1"]


def test_an_append_that_failed_while_the_next_chunk_was_cut_is_the_error_reported() -> None:
    """Chunk 0's append fails while chunk 1 cannot be cut (a row that is not JSON): the
    task reports the append's failure, which came first, with the cut's error chained."""
    from seglog.spark.schema import SeglogSchemaError

    opts = parse_write_options({"url": "http://x", "topic": "out", "writeBatchSize": "2"})
    good = pa.RecordBatch.from_pydict({"data": ['{"n": 0}', '{"n": 1}']})
    bad = pa.RecordBatch.from_pydict({"data": ["not json"]})

    class Down(FakeClient):
        def append_encoded(self, topic: str, records_json: bytes, **kwargs: Any) -> Appended:
            raise ConnectionError("server gone")

    with pytest.raises(ConnectionError, match="server gone") as caught:
        write_partition(Down(), [good, bad], opts, "spark:w1:0", 0, 0)
    assert isinstance(caught.value.__cause__, SeglogSchemaError)
