"""Pure connector logic: options, offsets, planning, proration, chunking, Arrow building.

No SparkSession and no server; property tests pin the invariants the Spark paths rely on.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from seglog.spark.offsets import (
    OffsetFormatError,
    SeqRange,
    TopicOffset,
    batch_ranges,
    decode_offset,
    encode_offset,
    first_seq_at_or_after,
    prorate,
    resolve_end,
    resolve_start,
    split_ranges,
)
from seglog.spark.options import (
    EARLIEST,
    LATEST,
    PositionKind,
    SeglogOptionError,
    parse_files_options,
    parse_read_options,
    parse_write_options,
)
from seglog.spark.schema import (
    SeglogSchemaError,
    arrow_schema,
    batch_records,
    build_batch,
    validate_sink_columns,
)
from seglog.spark.stream import plan_latest

URL = {"url": "http://127.0.0.1:1"}

# ---- options -------------------------------------------------------------------------------


def test_read_options_defaults_follow_kafka() -> None:
    batch = parse_read_options({**URL, "topics": "a, b"}, streaming=False)
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting == EARLIEST and batch.ending == LATEST
    assert batch.fail_on_data_loss is True
    stream = parse_read_options({**URL, "TOPICS": "a", "maxRecordsPerTrigger": "7"}, streaming=True)
    assert stream.starting == LATEST and stream.max_records_per_trigger == 7


def test_json_positions_and_sentinels() -> None:
    o = parse_read_options(
        {**URL, "topics": "a,b", "startingSeqs": '{"a": 5, "b": -2}', "endingSeqs": '{"a": -1}'},
        streaming=False,
    )
    assert resolve_start(o.starting, "a", 3, 10) == 5
    assert resolve_start(o.starting, "b", 3, 10) == 3
    assert resolve_end(o.ending, "a", 10) == 11
    assert resolve_end(o.ending, "b", 10) == 11  # absent topics take the default (latest)
    assert (
        resolve_end(
            parse_read_options(
                {**URL, "topics": "a", "endingSeqs": '{"a": 99}'}, streaming=False
            ).ending,
            "a",
            10,
        )
        == 11
    )


@pytest.mark.parametrize(
    ("opts", "streaming", "needle"),
    [
        ({"topics": "a"}, False, "url"),
        ({**URL}, False, "topics"),
        ({**URL, "topics": "a", "topicPrefix": "x"}, False, "topics"),
        ({**URL, "topics": "bad name"}, False, "not a valid topic name"),
        ({**URL, "topicPattern": "("}, False, "topicPattern"),
        ({**URL, "topics": "a", "startingSeqs": "soon"}, False, "startingSeqs"),
        ({**URL, "topics": "a", "startingSeqs": '{"a": "x"}'}, False, "startingSeqs"),
        ({**URL, "topics": "a", "startingSeqs": '{"a": -3}'}, False, "startingSeqs"),
        ({**URL, "topics": "a", "endingSeqs": "earliest"}, False, "endingSeqs"),
        ({**URL, "topics": "a", "endingSeqs": "latest"}, True, "batch reads only"),
        ({**URL, "topics": "a", "minPartitions": "0"}, False, "minPartitions"),
        ({**URL, "topics": "a", "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
        (
            {**URL, "topics": "a", "startingSeqs": "earliest", "startingTimestamp": "5"},
            False,
            "startingTimestamp",
        ),
    ],
)
def test_bad_read_options_name_the_option(
    opts: dict[str, str], streaming: bool, needle: str
) -> None:
    with pytest.raises(SeglogOptionError) as e:
        parse_read_options(opts, streaming=streaming)
    assert needle in str(e.value)


def test_write_and_files_options() -> None:
    w = parse_write_options({**URL, "topic": "out", "writeBatchSize": "100", "dataFormat": "TEXT"})
    assert (w.topic, w.write_batch_size, w.data_format.value) == ("out", 100, "text")
    with pytest.raises(SeglogOptionError, match="writeBatchSize"):
        parse_write_options({**URL, "writeBatchSize": "10001"})
    f = parse_files_options({"path": "/d", "dataSchema": "a int"})
    assert f.subscription.matches("anything") and f.data_schema == "struct<a int>"
    with pytest.raises(SeglogOptionError, match="startingSeqs"):
        parse_files_options({"path": "/d", "startingSeqs": "earliest"})


def test_timestamp_position() -> None:
    o = parse_read_options({**URL, "topics": "a", "startingTimestamp": "1000"}, streaming=True)
    assert o.starting.kind is PositionKind.TIMESTAMP and o.starting.timestamp_ms == 1000
    assert resolve_start(o.starting, "a", 1, 5) is None


# ---- planning ------------------------------------------------------------------------------

ranges_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 500), st.integers(0, 300)),
    max_size=4,
    unique_by=lambda x: x[0],
).map(lambda xs: [SeqRange(t, lo, lo + n) for t, lo, n in xs])


@given(ranges_st, st.integers(1, 60), st.integers(1, 40))
def test_split_ranges_covers_exactly(ranges: list[SeqRange], max_per: int, min_parts: int) -> None:
    parts = split_ranges(ranges, max_per, min_parts)
    total = sum(r.size for r in ranges)
    assert sum(p.size for p in parts) == total
    assert all(1 <= p.size <= max_per for p in parts)
    assert len(parts) >= min(min_parts, total)
    for r in ranges:  # each topic's pieces tile its range contiguously
        mine = [p for p in parts if p.topic == r.topic]
        if r.size:
            assert mine[0].after == r.after and mine[-1].upto == r.upto
            assert all(x.upto == y.after for x, y in itertools.pairwise(mine))
    assert parts == split_ranges(ranges, max_per, min_parts)


@given(st.integers(0, 2000), st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 1000)))
def test_prorate_is_exact_and_fair(budget: int, lags: dict[str, int]) -> None:
    alloc = prorate(budget, lags)
    assert set(alloc) == set(lags)
    assert sum(alloc.values()) == min(budget, sum(lags.values()))
    assert all(0 <= alloc[t] <= lags[t] for t in lags)
    lagging = [t for t in lags if lags[t] > 0]
    if budget >= len(lagging):
        assert all(alloc[t] >= 1 for t in lagging)


def test_prorate_matches_lag_share() -> None:
    assert prorate(10, {"a": 90, "b": 10}) == {"a": 9, "b": 1}
    assert prorate(3, {"a": 100, "b": 1, "c": 1}) == {"a": 1, "b": 1, "c": 1}


@st.composite
def logs(draw: Any) -> tuple[list[tuple[int, int, bool]], int]:
    n = draw(st.integers(0, 40))
    ts, out = 0, []
    for seq in range(1, n + 1):
        ts += draw(st.integers(0, 3))
        out.append((seq, ts, draw(st.booleans())))
    return out, draw(st.integers(0, ts + 2))


@given(logs())
def test_timestamp_search_finds_first_record_at_or_after(
    case: tuple[list[tuple[int, int, bool]], int],
) -> None:
    recs, target = case
    live = [(s, t) for s, t, ok in recs if ok]
    head = len(recs)

    def probe(after: int) -> tuple[int, int] | None:
        return next(((s, t) for s, t in live if s > after), None)

    x = first_seq_at_or_after(target, 1, head, probe)
    first = probe(x - 1)
    assert first is None or first[1] >= target
    assert all(t < target for s, t in live if s < x)


@given(logs(), st.data())
def test_timestamp_search_stays_inside_its_range(
    case: tuple[list[tuple[int, int, bool]], int], data: st.DataObject
) -> None:
    """The probe reads past `head` when the seqs up to it are deleted; the answer must
    still be in [earliest, head + 1], or a pushed `ts` bound widens a range past its
    consumed `seq` bound and Spark returns rows the filter excluded."""
    recs, target = case
    live = [(s, t) for s, t, ok in recs if ok]
    earliest = data.draw(st.integers(1, len(recs) + 1))
    head = data.draw(st.integers(earliest - 1, len(recs)))

    def probe(after: int) -> tuple[int, int] | None:
        return next(((s, t) for s, t in live if s > after), None)

    x = first_seq_at_or_after(target, earliest, head, probe)
    assert earliest <= x <= head + 1
    assert all(t < target for s, t in live if earliest <= s < x)
    assert all(t >= target for s, t in live if x <= s <= head)


@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9._-]{0,8}", fullmatch=True),
        st.tuples(st.integers(0, 2**63), st.none() | st.integers(1, 2**40)),
    )
)
def test_offset_roundtrip(d: dict[str, tuple[int, int | None]]) -> None:
    offs = {t: TopicOffset(n, f) for t, (n, f) in d.items()}
    doc = orjson.loads(orjson.dumps(encode_offset(offs)))
    assert decode_offset(doc) == offs


def test_offset_rejects_foreign_checkpoints() -> None:
    bad: dict[str, Any]
    for bad in (
        {"topics": {}},
        {"v": 2, "topics": {}},
        {"v": 1, "topics": {"a": {"next": -1}}},
        {"v": 1, "topics": []},
    ):
        with pytest.raises(OffsetFormatError):
            decode_offset(bad)


def test_batch_ranges_and_restart_markers() -> None:
    start = {"a": TopicOffset(6), "gone": TopicOffset(3)}
    end = {"a": TopicOffset(11), "new": TopicOffset(9, first=4), "gone": TopicOffset(3)}
    assert batch_ranges(start, end) == [SeqRange("a", 5, 10), SeqRange("new", 3, 8)]


def test_plan_latest_budget_new_topics_and_recreated() -> None:
    from seglog.spark.online import TopicView

    start = {"a": TopicOffset(1), "b": TopicOffset(50), "gone": TopicOffset(7)}
    views = {"a": TopicView("a", 1, 100), "b": TopicView("b", 1, 5), "n": TopicView("n", 3, 12)}
    end = plan_latest(start, views, {"b": 1, "n": 3}, 20)
    assert end["gone"] == TopicOffset(7)
    assert end["b"].first == 1 and end["n"].first == 3 and end["a"].first is None
    taken = sum(r.size for r in batch_ranges(start, end))
    assert taken == 20
    assert plan_latest(start, {"a": TopicView("a", 1, 0)}, {}, None)["a"] == TopicOffset(1)


# ---- Arrow and the sink ------------------------------------------------------------------

SPARK_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("seq", LongType()),
        StructField("ts", TimestampType()),
        StructField("tag", StringType()),
        StructField("node", StringType()),
        StructField("data", StringType()),
        StructField("meta", StringType()),
    ]
)


def test_built_batches_equal_sparks_arrow_schema() -> None:
    schema = arrow_schema(SPARK_SCHEMA)
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    b = build_batch(
        schema,
        "t",
        [1, 2],
        [1700000000000, 1700000000001],
        ["x", None],
        [None, "n"],
        ['{"a":1}', "null"],
        [None, "{}"],
    )
    assert b.schema.equals(schema)
    assert b.column(2).cast(pa.int64()).to_pylist() == [1700000000000000, 1700000000001000]


def test_data_schema_struct_nulls_what_does_not_fit() -> None:
    from pyspark.sql.types import IntegerType

    fields = list(SPARK_SCHEMA.fields)
    fields[5] = StructField(
        "data", StructType([StructField("a", IntegerType()), StructField("b", StringType())])
    )
    schema = arrow_schema(StructType(fields))
    b = build_batch(
        schema,
        "t",
        [1, 2],
        [0, 0],
        [None] * 2,
        [None] * 2,
        [{"a": 1, "b": "x"}, {"a": "oops"}],
        [None] * 2,
    )
    assert b.column(5).to_pylist() == [{"a": 1, "b": "x"}, None]


def test_sink_columns_are_validated() -> None:
    validate_sink_columns(["data", "tag"], "t")
    validate_sink_columns(["data", "topic", "meta", "node"], None)
    with pytest.raises(SeglogSchemaError, match="unknown column"):
        validate_sink_columns(["data", "extra"], "t")
    with pytest.raises(SeglogSchemaError, match="'data' column is required"):
        validate_sink_columns(["tag"], "t")
    with pytest.raises(SeglogSchemaError, match="destination topic"):
        validate_sink_columns(["data"], None)


def test_batch_records_parses_json_and_maps() -> None:
    b = pa.RecordBatch.from_pydict(
        {
            "data": pa.array(['{"x": 1}', "[1,2]", None]),
            "tag": pa.array(["t1", None, "t3"]),
            "meta": pa.array([[("k", "v")], None, []], type=pa.map_(pa.string(), pa.string())),
        }
    )
    out = list(batch_records(b, parse_data=True, topic_option="dest"))
    assert out == [
        ("dest", {"data": {"x": 1}, "tag": "t1", "meta": {"k": "v"}}),
        ("dest", {"data": [1, 2]}),
        ("dest", {"data": None, "tag": "t3", "meta": {}}),
    ]
    with pytest.raises(SeglogSchemaError, match="not valid JSON"):
        list(
            batch_records(
                pa.RecordBatch.from_pydict({"data": ["nope"]}), parse_data=True, topic_option="d"
            )
        )
    text = list(
        batch_records(
            pa.RecordBatch.from_pydict({"data": ["nope"]}), parse_data=False, topic_option="d"
        )
    )
    assert text == [("d", {"data": "nope"})]


def test_pushdown_absorbs_seq_and_topic_filters() -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull, LessThanOrEqual

    from seglog.spark.pushdown import Pushed, absorb, narrow

    keep = IsNotNull(("tag",))
    pushed, rest = absorb(
        [
            GreaterThan(("seq",), 18),
            LessThanOrEqual(("seq",), 21),
            In(("topic",), ("a", "b")),
            EqualTo(("topic",), "a"),
            keep,
        ]
    )
    assert pushed == Pushed(19, 21, frozenset({"a"})) and rest == [keep]
    planned = [SeqRange("a", 0, 100), SeqRange("b", 0, 100), SeqRange("a", 200, 300)]
    assert narrow(planned, pushed) == [SeqRange("a", 18, 21)]
    assert absorb([GreaterThan(("seq",), "x")])[1] == [GreaterThan(("seq",), "x")]


TS_OPS = st.sampled_from(["gt", "ge", "lt", "le", "eq"])


@settings(max_examples=300, derandomize=True, database=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=40),
    st.sets(st.integers(1, 40), max_size=10),
    st.lists(st.tuples(TS_OPS, st.integers(990_000, 1_050_000)), min_size=1, max_size=3),
)
def test_ts_pushdown_keeps_exactly_the_rows_the_filters_select(
    steps: list[int], deleted: set[int], comparisons: list[tuple[str, int]]
) -> None:
    """For any non-decreasing ts (ms) over seqs 1..n with deleted seqs, and any timestamp
    comparisons (µs, not whole ms), the narrowed range's live rows are exactly the rows the
    filters select."""
    import datetime as dt

    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        LessThan,
        LessThanOrEqual,
    )

    from seglog.spark.pushdown import absorb, narrow_ts

    ts = list(itertools.accumulate(steps, initial=1000))[1:]  # ms, seq i+1 -> ts[i]
    live = [(i + 1, t) for i, t in enumerate(ts) if i + 1 not in deleted]
    kinds = {
        "gt": (GreaterThan, lambda a, b: a > b),
        "ge": (GreaterThanOrEqual, lambda a, b: a >= b),
        "lt": (LessThan, lambda a, b: a < b),
        "le": (LessThanOrEqual, lambda a, b: a <= b),
        "eq": (EqualTo, lambda a, b: a == b),
    }
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    filters = [kinds[k][0](("ts",), epoch + dt.timedelta(microseconds=us)) for k, us in comparisons]
    pushed, rest = absorb(filters)
    assert rest == filters  # Spark still evaluates them

    def probe(after: int) -> tuple[int, int] | None:
        return next(((s, t) for s, t in live if s > after), None)

    got = narrow_ts([SeqRange("t", 0, len(ts))], pushed, lambda _: probe)
    assert len(got) <= 1
    kept = {s for r in got for s in range(r.after + 1, r.upto + 1)}
    selected = {s for s, t in live if all(kinds[k][1](t * 1000, us) for k, us in comparisons)}
    # Exact, because ts never decreases with seq: the range holds every selected row and
    # no other live row (only deleted seqs may pad it).
    assert {s for s, _ in live if s in kept} == selected


def test_naive_timestamps_are_not_pushed() -> None:
    import datetime as dt

    from pyspark.sql.datasource import GreaterThan

    from seglog.spark.pushdown import Pushed, absorb

    f = GreaterThan(("ts",), dt.datetime(2024, 1, 1))
    assert absorb([f]) == (Pushed(), [f])


DATA_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["a", "s", "x"]), inner, max_size=3)
    ),
    max_leaves=4,
)


def fits(v: Any) -> dict[str, Any] | None:
    """What Spark's PERMISSIVE `from_json` gives for struct<a: bigint, s: string>: the
    object's fields when each present one has the field's type, else a null row."""
    if not isinstance(v, dict):
        return None
    a, s = v.get("a"), v.get("s")
    if a is not None and (isinstance(a, bool) or not isinstance(a, int)):
        return None
    if s is not None and not isinstance(s, str):
        return None
    return {"a": a, "s": s}


@settings(max_examples=300, derandomize=True, database=None)
@given(st.lists(DATA_VALUE, max_size=40))
def test_data_schema_parses_what_fits_and_nulls_the_rest(values: list[Any]) -> None:
    from seglog.spark.schema import _data_column

    typ = pa.struct([("a", pa.int64()), ("s", pa.string())])
    texts = pa.array([orjson.dumps(v).decode() for v in values], pa.string())
    assert _data_column(texts, typ).to_pylist() == [fits(v) for v in values]


def test_ts_narrowing_never_widens_a_range_past_its_consumed_seq_bound() -> None:
    """`where seq <= 5 and ts <= <far future>` with seq 5 deleted and seq 6 live: the seq
    bound was consumed (Spark does not check it again), so seq 6 must not be read."""
    import datetime as dt

    from pyspark.sql.datasource import LessThanOrEqual

    from seglog.spark.pushdown import absorb, narrow, narrow_ts

    live = [(1, 1000), (2, 1000), (3, 1000), (4, 1000), (6, 1000)]

    def probe(after: int) -> tuple[int, int] | None:
        return next(((s, t) for s, t in live if s > after), None)

    future = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
    pushed, _ = absorb([LessThanOrEqual(("seq",), 5), LessThanOrEqual(("ts",), future)])
    ranges = narrow([SeqRange("t", 0, 6)], pushed)
    assert ranges == [SeqRange("t", 0, 5)]
    assert narrow_ts(ranges, pushed, lambda _t: probe) == [SeqRange("t", 0, 5)]
