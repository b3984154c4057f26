"""Engine behaviour through its public facade: writes, reads, tombstones, deletes, caps,
idempotency, config and restarts. Time comes from the ManualClock fixture."""

from __future__ import annotations

import random
import threading

import pytest

from seglog.clock import ManualClock
from seglog.core.names import valid_topic_name
from seglog.engine.engine import Engine
from seglog.engine.maintenance import seal_topic
from seglog.errors import ErrorCode, SeglogError
from seglog.model import (
    Discard,
    Durability,
    RecordBatch,
    RecordIn,
    Selector,
    TombstoneReason,
    TopicConfig,
    TopicType,
)
from seglog.storage import wal_shard
from tests.conftest import EngineFactory


def recs(n: int, start: int = 0, **kw: object) -> list[RecordIn]:
    return [RecordIn.of({"i": start + i}, **kw) for i in range(n)]  # type: ignore[arg-type]


def read_all(e: Engine, topic: str, cursor: int = 0) -> list[int]:
    seqs: list[int] = []
    while True:
        r = e.read(topic, cursor, limit=1000)
        seqs.extend(x.seq for x in r.records)
        cursor = r.next_from_seq
        if r.caught_up:
            return seqs


def test_write_then_read_round_trip(make_engine: EngineFactory) -> None:
    e = make_engine()
    w = e.write(
        "jobs", [RecordIn.of({"x": 1}, meta={"t": "a"}, node="n1", tag="t1"), RecordIn.of(None)]
    )
    assert (w.first_seq, w.last_seq, w.seqs, w.head_seq, w.count, w.created) == (
        1,
        2,
        [1, 2],
        2,
        2,
        True,
    )
    r = e.read("jobs", 0)
    assert [x.seq for x in r.records] == [1, 2]
    first = r.records[0]
    assert (first.data, first.meta, first.node, first.tag) == ({"x": 1}, {"t": "a"}, "n1", "t1")
    assert r.records[1].data is None and r.records[1].meta is None
    assert r.caught_up and r.lag == 0 and r.tombstone is None and r.next_from_seq == 2
    assert e.write("jobs", recs(1)).created is False


def test_a_batch_of_columns_is_written_as_its_records_and_owned_by_the_engine(
    make_engine: EngineFactory,
) -> None:
    e = make_engine()
    e.put_topic("c", TopicConfig(durability=Durability.FSYNC))
    batch = RecordBatch(
        [b'{"x":1}', b"2", b'"three"'],
        [None, b'{"m":1}', None],
        ["n1", None, None],
        [None, "t", None],
    )
    pending = e.write_begin("c", batch, node="batch-node")
    assert pending is not None
    # The caller's lists change while the write is in flight (its frames are in the WAL,
    # it is not published yet): what is published must be what was logged.
    batch.data[0], batch.meta[0], batch.node[1], batch.tag[2] = b"0", b"{}", "x", "y"
    w = e.write_finish(pending)
    got = [(r.data, r.meta, r.node, r.tag) for r in e.read("c", 0).records]
    assert got == [
        ({"x": 1}, None, "n1", None),
        (2, {"m": 1}, "batch-node", "t"),
        ("three", None, "batch-node", None),
    ]
    assert w.seqs == [1, 2, 3]
    with pytest.raises(SeglogError) as err:  # the count is checked before the records
        e.write("c", RecordBatch([], [], [], []))
    assert err.value.code is ErrorCode.INVALID_REQUEST


def test_a_sync_writes_reservation_ahead_does_not_wait_for_the_writers_timeout(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync write's own frames are queued without waking the WAL writer (its wait writes
    them); the disk-class reservation it logs ahead has nobody waiting, so it must wake
    the writer, or it sits queued for the writer's whole idle timeout."""
    monkeypatch.setattr(wal_shard, "TAKE_TIMEOUT_S", 60.0)
    e = make_engine()
    e.put_topic("d", TopicConfig(durability=Durability.DISK))

    def writes() -> None:  # on a worker thread: the main thread always wakes the writer
        e.write("d", recs(1))  # carries its own reservation, and waits for it
        e.write("d", recs(1))  # within a step of it: logs the next one ahead

    th = threading.Thread(target=writes)
    th.start()
    th.join(30)
    t = e.registry.get("d")
    assert t is not None and t.pre_reservation is not None
    done = threading.Event()
    t.pre_reservation[1].add_done_callback(lambda _c: done.set())
    assert done.wait(10), "the reservation ahead waited for the writer's idle timeout"


def test_auto_create_respects_create_flag_and_config(make_engine: EngineFactory) -> None:
    e = make_engine()
    with pytest.raises(SeglogError) as ei:
        e.write("nope", recs(1), create=False)
    assert ei.value.code is ErrorCode.TOPIC_NOT_FOUND
    with pytest.raises(SeglogError) as ei:
        e.write("nope", recs(1), config=TopicConfig(auto_create=False))
    assert ei.value.code is ErrorCode.TOPIC_NOT_FOUND
    with pytest.raises(SeglogError) as ei:
        e.write("bad name!", recs(1))
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    assert "nope" not in e.topics


def test_node_filter_skips_but_advances_cursor(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.write("t", recs(2, node="me"))
    e.write("t", recs(1, node="other"))
    r = e.read("t", 0, nodes=frozenset({"me"}))
    assert [x.seq for x in r.records] == [3]
    r = e.read("t", 0, nodes=frozenset({"me"}), limit=1)
    assert [x.seq for x in r.records] == [3] and r.next_from_seq == 3
    e.put_topic("t", TopicConfig(dedupe_node=False))
    assert [x.seq for x in e.read("t", 0, nodes=frozenset({"me"})).records] == [1, 2, 3]


def test_byte_budget_delivers_at_least_one_and_stops_without_consuming(
    make_engine: EngineFactory,
) -> None:
    e = make_engine()
    e.write("t", [RecordIn.of("x" * 100) for _ in range(5)])
    r = e.read("t", 0, max_bytes=250)
    assert [x.seq for x in r.records] == [1, 2] and r.next_from_seq == 2 and not r.caught_up
    r = e.read("t", 0, max_bytes=1)
    assert [x.seq for x in r.records] == [1]


def test_cap_records_evicts_with_one_tombstone_and_exact_count(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("c", TopicConfig(cap_records=3))
    e.write("c", recs(6))
    info = e.get_topic("c")
    assert (info.count, info.head_seq, info.earliest_seq) == (3, 6, 4)
    r = e.read("c", 0)
    assert r.tombstone is not None
    assert (r.tombstone.gap_from, r.tombstone.gap_to, r.tombstone.reason) == (
        1,
        3,
        TombstoneReason.CAP,
    )
    assert [x.seq for x in r.records] == [4, 5, 6]
    assert e.read("c", 3).tombstone is None


def test_ttl_expiry_tombstone_and_invisibility(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfig(ttl_ms=1000))
    e.write("t", recs(2))
    clock.advance(600)
    e.write("t", recs(1))
    clock.advance(500)
    r = e.read("t", 0)
    assert r.tombstone is not None and r.tombstone.reason is TombstoneReason.TTL
    assert (r.tombstone.gap_from, r.tombstone.gap_to) == (1, 2)
    assert [x.seq for x in r.records] == [3]
    clock.advance(1000)
    r = e.read("t", 2)
    assert r.records == [] and r.tombstone is not None and r.caught_up
    assert e.get_topic("t").count == 0


def test_deletes_are_silent_and_update_counts(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.write("d", [RecordIn.of(i, tag=f"chat-{i % 3}:{i}") for i in range(1, 10)])
    res = e.delete_records("d", before_seq=4)
    assert (res.deleted, res.earliest_seq, res.count) == (3, 4, 6)
    res = e.delete_records("d", match=Selector("Glob", "chat-1:"))
    assert res.deleted == 2  # 4 and 7
    res = e.delete_records("d", match=Selector("Eq", "chat-2:8"), before_seq=8)
    assert res.deleted == 0
    res = e.delete_records("d", match=Selector("Eq", "chat-2:8"))
    assert res.deleted == 1
    r = e.read("d", 0)
    assert r.tombstone is None
    assert [x.seq for x in r.records] == [5, 6, 9]
    assert e.get_topic("d").bytes == sum(len(str(i)) for i in (5, 6, 9))
    # point in time: a later record with a matching tag survives
    e.write("d", [RecordIn.of(10, tag="chat-1:10")])
    assert 10 in read_all(e, "d")


def test_discard_reject_never_appends(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("r", TopicConfig(cap_records=3, discard=Discard.REJECT))
    e.write("r", recs(2))
    with pytest.raises(SeglogError) as ei:
        e.write("r", recs(2))
    assert ei.value.code is ErrorCode.TOPIC_FULL
    assert ei.value.detail == {
        "topic": "r",
        "cap_records": 3,
        "cap_bytes": 0,
        "head_seq": 2,
        "earliest_seq": 1,
    }
    with pytest.raises(SeglogError) as ei:
        e.write("r", recs(4))
    assert ei.value.code is ErrorCode.RECORD_TOO_LARGE
    assert e.write("r", recs(1)).seqs == [3]
    assert e.get_topic("r").head_seq == 3


def test_idempotency_window(make_engine: EngineFactory, clock: ManualClock) -> None:
    e = make_engine()
    a = e.write("i", recs(2), idempotency_key="k1")
    b = e.write("i", recs(5), idempotency_key="k1")
    assert b.deduped and b.seqs == a.seqs and b.head_seq == a.head_seq and not b.created
    assert e.get_topic("i").head_seq == 2
    clock.advance(120_001)
    c = e.write("i", recs(1), idempotency_key="k1")
    assert not c.deduped and c.seqs == [3]


def test_put_topic_rules(make_engine: EngineFactory) -> None:
    e = make_engine()
    assert e.put_topic("q", TopicConfig(type=TopicType.QUEUE)).created
    assert not e.put_topic("q", TopicConfig(type=TopicType.QUEUE, ttl_ms=5)).created
    with pytest.raises(SeglogError) as ei:
        e.put_topic("q", TopicConfig())
    assert ei.value.code is ErrorCode.TOPIC_EXISTS_INCOMPATIBLE
    with pytest.raises(SeglogError) as ei:
        e.put_topic("q", TopicConfig(type=TopicType.QUEUE, dead_letter="q"))
    assert ei.value.code is ErrorCode.INVALID_REQUEST
    with pytest.raises(SeglogError):
        e.put_topic("x", TopicConfig(dead_letter="bad name"))


def test_max_topics_cap(make_engine: EngineFactory) -> None:
    e = make_engine(max_topics=2)
    e.put_topic("a", TopicConfig())
    e.put_topic("b", TopicConfig())
    e.put_topic("a", TopicConfig(ttl_ms=1))  # re-PUT of an existing topic always succeeds
    with pytest.raises(SeglogError) as ei:
        e.put_topic("c", TopicConfig())
    assert ei.value.code is ErrorCode.THROTTLED and ei.value.detail == {
        "limit": "max_topics",
        "max": 2,
    }


def test_list_topics_pages_by_name(make_engine: EngineFactory) -> None:
    e = make_engine()
    for n in ["b", "a", "c.1", "c.2", "d"]:
        e.put_topic(n, TopicConfig())
    page, more = e.list_topics(limit=2)
    assert [p.topic for p in page] == ["a", "b"] and more
    page, more = e.list_topics(after="b", limit=2)
    assert [p.topic for p in page] == ["c.1", "c.2"] and more
    page, more = e.list_topics(prefix="c.", limit=10)
    assert [p.topic for p in page] == ["c.1", "c.2"] and not more


def test_list_topics_within_prefixes_is_the_filtered_listing(make_engine: EngineFactory) -> None:
    """A page of the names a prefix-limited key may see is the page of the full listing
    filtered by those prefixes (the walk only visits their ranges); `more` says whether
    such a name follows."""
    rng = random.Random(7)
    e = make_engine()
    alphabet = "ab.:"
    names = sorted(
        {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(80)}
    )
    names = [n for n in names if valid_topic_name(n)]
    for n in names:
        e.put_topic(n, TopicConfig())
    short = ["", "a", "b", "a.", "ab", "b:", "a.b", "ba", "zz"]
    for _ in range(400):
        prefix = rng.choice(short)
        within = rng.sample(short, rng.randint(1, 3))
        after = rng.choice([None, *rng.sample(names, 3)])
        limit = rng.choice([1, 2, 3, 5, 8, 100])
        visible = [
            n
            for n in names
            if n.startswith(prefix)
            and any(n.startswith(w) for w in within)
            and (after is None or n > after)
        ]
        page, more = e.list_topics(prefix, after, limit, within=within)
        assert [p.topic for p in page] == visible[:limit], (prefix, within, after, limit)
        assert more == (len(visible) > limit), (prefix, within, after, limit)


def test_drop_topic_and_recreate_is_new_instance(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.write("t", recs(5))
    with pytest.raises(SeglogError) as ei:
        e.drop_topic("t", if_empty=True)
    assert ei.value.code is ErrorCode.TOPIC_NOT_EMPTY
    assert e.drop_topic("t").deleted
    assert not e.drop_topic("t").deleted
    e.write("t", recs(1))
    r = e.read("t", 5)
    assert r.tombstone is not None and r.tombstone.reason is TombstoneReason.RECREATED
    assert [x.seq for x in r.records] == [1]


def _state(e: Engine, name: str) -> tuple[object, ...]:
    t = e.topics[name]
    return (
        t.head,
        t.earliest(),
        t.count,
        t.bytes,
        t.evict_floor,
        t.expiry_floor,
        t.delete_floor,
        t.config,
        [
            (r.seq, r.data_json, r.meta_json, r.node, r.tag)
            for r in e.read(name, 0, limit=1000).records
        ],
    )


@pytest.mark.parametrize("snapshot", [True, False])
def test_restart_restores_everything(make_engine: EngineFactory, snapshot: bool) -> None:
    e = make_engine()
    e.put_topic("f", TopicConfig(durability=Durability.FSYNC, cap_records=50))
    e.put_topic("d", TopicConfig(ttl_ms=10_000_000))
    e.put_topic("m", TopicConfig(durability=Durability.MEMORY))
    e.put_topic("eph", TopicConfig(durability=Durability.EPHEMERAL))
    for name in ("f", "d", "m", "eph"):
        e.write(
            name,
            [
                RecordIn.of({"n": name, "i": i}, meta={"m": i}, tag=f"t{i % 4}", node="w")
                for i in range(60)
            ],
        )
        e.delete_records(name, match=Selector("Eq", "t1"))
    e.delete_records("d", before_seq=10)
    before = {n: _state(e, n) for n in ("f", "d", "m")}
    eph_head = e.get_topic("eph").head_seq
    e.close(snapshot=snapshot)
    e2 = make_engine()
    after = {n: _state(e2, n) for n in ("f", "f", "m")}
    assert after["f"] == before["f"]
    assert after["m"] == before["m"]
    d2 = _state(e2, "d")
    if snapshot:
        assert d2 == before["d"]
        assert e2.get_topic("eph").head_seq == eph_head
    else:
        # disk class after a crash-like restart: the durable head reservation becomes a hole
        assert d2[8] == before["d"][8]
        assert e2.topics["d"].head == 60 + 256
    assert e2.get_topic("eph").count == 0
    w = e2.write("f", recs(1))
    assert w.seqs == [61]


def test_disk_reservation_never_reuses_acked_seqs(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.write("d", recs(3))
    e.close(snapshot=False)
    e2 = make_engine()
    assert e2.write("d", recs(1)).seqs[0] > 3


def test_sealed_segments_serve_reads_and_keep_deletes(make_engine: EngineFactory) -> None:
    e = make_engine(segment_max_events=10, segment_payload_cache=5)
    e.write("s", [RecordIn.of({"i": i}, tag=f"k{i}") for i in range(1, 36)])
    assert seal_topic(e, e.topics["s"]) == 3
    segs = e.topics["s"].segments
    assert segs is not None and [s.first_seq for s in segs.sealed] == [1, 11, 21]
    assert not e.topics["s"].has_payload(1)  # payload left memory, read from the segment
    assert [x.data for x in e.read("s", 0, limit=3).records] == [{"i": 1}, {"i": 2}, {"i": 3}]
    assert e.delete_records("s", match=Selector("Eq", "k2")).deleted == 1
    e.close(snapshot=False)
    e2 = make_engine(segment_max_events=10, segment_payload_cache=5)
    seqs = read_all(e2, "s")
    assert 2 not in seqs and len(seqs) == 34
    assert e2.read("s", 0, limit=1).records[0].data == {"i": 1}
    e2.delete_records("s", before_seq=12)
    segs2 = e2.topics["s"].segments
    assert segs2 is not None and [s.first_seq for s in segs2.sealed] == [11, 21]


def test_oversized_record_is_refused_naming_the_first_one(make_engine: EngineFactory) -> None:
    """API §3 in the engine itself (callers other than HTTP): the first record whose
    data+meta exceeds the limit is named; nothing is written."""
    from seglog.model import MAX_RECORD_BYTES

    e = make_engine()
    big = b'"' + b"x" * MAX_RECORD_BYTES + b'"'
    bigger = big + b" " * 100  # the largest, but not the first over the limit
    batch = [RecordIn(b"1"), RecordIn(b"2", b'{"m":' + big + b"}"), RecordIn(bigger)]
    with pytest.raises(SeglogError) as ei:
        e.write("t", batch)
    assert ei.value.code is ErrorCode.RECORD_TOO_LARGE
    assert ei.value.detail == {"index": 1, "bytes": 1 + 6 + len(big), "max": MAX_RECORD_BYTES}
    assert e.write("t", [RecordIn(b"1")]).seqs == [1]
