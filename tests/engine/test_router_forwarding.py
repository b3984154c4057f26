"""The forwarding step (SEMANTICS §8.3–§8.6), driven with `forward_all`/reads and an injected
clock; no background thread and no sleeps."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine
from seglog.engine.forwarding import HOP_CAP
from seglog.model import Discard, Durability, RecordIn, Selector, TombstoneReason, TopicConfig
from seglog.router_model import Guarantee, RouterSpec
from tests.conftest import EngineFactory


def _all(e: Engine, name: str, nodes: frozenset[str] = frozenset()) -> list[Any]:
    out = []
    cursor = 0
    while True:
        r = e.read(name, cursor, limit=1000, nodes=nodes)
        out += r.records
        cursor = r.next_from_seq
        if r.caught_up:
            return out


def _write(e: Engine, name: str, *values: Any, **kw: Any) -> list[int]:
    return e.write(name, [RecordIn.of(v, **kw) for v in values]).seqs


def test_copies_keep_data_meta_node_tag_and_get_fresh_seqs_and_ts(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine()
    _write(e, "dst", "direct")  # the dest has records of its own: dest_base = 1
    assert e.put_router(RouterSpec("s->d", "src", "dst")).created
    _write(e, "src", "before")  # src was auto-created by the router; this is after it
    clock.advance(5)
    e.write("src", [RecordIn.of({"x": 1}, meta={"m": 1}, node="n1", tag="t1")])
    got = _all(e, "dst")
    assert [(r.seq, r.data) for r in got] == [(1, "direct"), (2, "before"), (3, {"x": 1})]
    assert (got[2].meta, got[2].node, got[2].tag) == ({"m": 1}, "n1", "t1")
    assert got[2].ts == clock.now_ms()
    assert e.get_router("s->d").forwarded_total == 2


def test_no_backfill(make_engine: EngineFactory) -> None:
    e = make_engine()
    _write(e, "src", 1, 2, 3)
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "src", 4)
    assert [r.data for r in _all(e, "dst")] == [4]


def test_preserve_flags_off_clear_node_and_tag(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "src", "dst", preserve_node=False, preserve_tag=False))
    e.write("src", [RecordIn.of(1, node="n", tag="t")])
    (rec,) = _all(e, "dst")
    assert (rec.node, rec.tag) == (None, None)


def test_filter_forwards_matching_tags_only(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "src", "dst", filter=Selector("Glob", "pub:")))
    e.write(
        "src",
        [
            RecordIn.of(1, tag="pub:a"),
            RecordIn.of(2),  # untagged never matches
            RecordIn.of(3, tag="priv:b"),
            RecordIn.of(4, tag="pub:c"),
        ],
    )
    assert [r.data for r in _all(e, "dst")] == [1, 4]
    r = e.routers.get("r")
    assert r is not None and r.cursor == 4 and r.forwarded_total == 2


def test_hop_cap_stops_a_cycle(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("a->b", "a", "b"))
    e.put_router(RouterSpec("b->a", "b", "a", allow_cycle=True))
    _write(e, "a", "x")
    e.forwarder.forward_all()
    # hops: a holds 0, 2, 4, 6, 8; b holds 1, 3, 5, 7 — neither edge of the cycle forwards
    # a copy at the cap (SEMANTICS §8.2: the original and 8 copies)
    assert len(_all(e, "a")) == 1 + HOP_CAP // 2
    assert len(_all(e, "b")) == HOP_CAP // 2
    assert e.forwarder.forward_all() == 0  # nothing left: the cycle ended


@pytest.mark.parametrize("written", ["a", "b", "c"])
def test_a_cycle_gives_the_original_and_eight_copies_wherever_written(
    make_engine: EngineFactory, written: str
) -> None:
    """Only c->a may close the cycle, yet the cap holds on a->b and b->c as well."""
    e = make_engine()
    e.put_router(RouterSpec("a->b", "a", "b"))
    e.put_router(RouterSpec("b->c", "b", "c"))
    e.put_router(RouterSpec("c->a", "c", "a", allow_cycle=True))
    e.put_router(RouterSpec("c->out", "c", "out"))  # off the cycle: never capped
    _write(e, written, "x")
    e.forwarder.forward_all()
    assert sum(len(_all(e, t)) for t in "abc") == 1 + HOP_CAP
    assert len(_all(e, "out")) == len(_all(e, "c"))  # every copy in c went on


def test_reject_dest_backpressure_keeps_the_cursor(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("dst", TopicConfig(cap_records=3, discard=Discard.REJECT))
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "src", *range(5))
    assert [r.data for r in _all(e, "dst")] == [0, 1, 2]
    r = e.routers.get("r")
    assert r is not None and (r.cursor, r.forwarded_total) == (3, 3)
    e.delete_records("dst", before_seq=3)  # room for two more
    assert [r.data for r in _all(e, "dst")] == [2, 3, 4]
    assert (r.cursor, r.forwarded_total) == (5, 5)


def test_source_trim_surfaces_as_a_tombstone(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("src", TopicConfig(cap_records=2))
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "src", *range(5))  # the source keeps 4 and 5 before anything is forwarded
    res = e.read("dst", 0, limit=100)
    assert res.tombstone is not None
    t = res.tombstone
    assert (t.gap_from, t.gap_to, t.reason) == (1, 3, TombstoneReason.SOURCE_TRIM)
    assert [(x.seq, x.data) for x in res.records] == [(4, 3), (5, 4)]
    assert e.get_router("r").forwarded_total == 5
    assert e.topics["dst"].source_trim_floor == 3


def test_source_ttl_expiry_before_forwarding_is_a_trim(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    e = make_engine()
    e.put_topic("src", TopicConfig(ttl_ms=1000))
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "src", "old")
    clock.advance(2000)
    _write(e, "src", "new")
    res = e.read("dst", 0)
    assert res.tombstone is not None and res.tombstone.reason is TombstoneReason.SOURCE_TRIM
    assert [x.data for x in res.records] == ["new"]


def test_exactly_once_meta_and_duplicate_suppression(make_engine: EngineFactory) -> None:
    e = make_engine()
    spec = RouterSpec("r", "src", "dst", guarantee=Guarantee.EXACTLY_ONCE)
    e.put_router(spec)
    e.write("src", [RecordIn.of(1, meta={"k": "v"}), RecordIn.of(2)])
    got = _all(e, "dst")
    src_id = e.topics["src"].topic_id
    key = {
        "idempotency_key": f"router:r:{src_id}:1:1",
        "router": "r",
        "source_topic": "src",
        "source_topic_id": src_id,
        "source_epoch": 1,
        "source_seq": 1,
    }
    assert got[0].meta == {"k": "v", "_topics_router": key}
    assert got[1].meta["_topics_router"]["source_seq"] == 2
    # Re-deriving from an older cursor: copies still live in the dest are not duplicated.
    r = e.routers.get("r")
    assert r is not None
    r.cursor = 0
    e.forwarder.forward_all()
    assert [x.data for x in _all(e, "dst")] == [1, 2]
    assert r.forwarded_total == 4  # suppressed copies count as forwarded
    # A deleted copy is no longer evidence.
    e.delete_records("dst", seqs=[got[0].seq])
    r.cursor = 0
    e.forwarder.forward_all()
    assert [x.data for x in _all(e, "dst")] == [2, 1]


def test_at_least_once_rederives_from_an_older_cursor(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "src", 1)
    _all(e, "dst")
    r = e.routers.get("r")
    assert r is not None
    r.cursor = 0
    e.forwarder.forward_all()
    assert [x.data for x in _all(e, "dst")] == [1, 1]


def test_fan_out_one_source_many_dests(make_engine: EngineFactory) -> None:
    e = make_engine()
    for d in ("d1", "d2", "d3"):
        e.put_router(RouterSpec(f"src->{d}", "src", d))
    _write(e, "src", "a", "b")
    e.forwarder.forward_all()
    for d in ("d1", "d2", "d3"):
        assert [(x.seq, x.data) for x in _all(e, d)] == [(1, "a"), (2, "b")]


def test_mirror_nodes_never_see_their_own_records(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("A->B", "A", "B"))
    e.put_router(RouterSpec("B->A", "B", "A", allow_cycle=True))
    for i in range(3):
        _write(e, "A", f"a{i}", node="nA")
        _write(e, "B", f"b{i}", node="nB")
        e.forwarder.forward_all()
    seen_a = _all(e, "A", frozenset({"nA"}))
    seen_b = _all(e, "B", frozenset({"nB"}))
    assert seen_a and all(r.node == "nB" for r in seen_a)
    assert seen_b and all(r.node == "nA" for r in seen_b)
    assert {r.data for r in seen_a} == {"b0", "b1", "b2"}
    assert {r.data for r in seen_b} == {"a0", "a1", "a2"}


def test_chain_read_your_writes(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("a->b", "a", "b"))
    e.put_router(RouterSpec("b->c", "b", "c"))
    _write(e, "a", "x")
    assert e.routers_pending_into("c")
    assert [r.data for r in _all(e, "c")] == ["x"]
    assert not e.routers_pending_into("c")
    assert e.get_topic("b").count == 1


def test_state_and_list_reads_drain_feeding_routers(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "src", 1, 2)
    assert e.get_topic("dst").head_seq == 2
    _write(e, "src", 3)
    (info,) = [i for i in e.list_topics()[0] if i.topic == "dst"]
    assert info.count == 3


def test_dest_listeners_are_woken(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_router(RouterSpec("r", "src", "dst"))
    heads: list[tuple[str, int]] = []
    e.add_listener(lambda t, h: heads.append((t, h)))
    _write(e, "src", 1, 2)
    e.forwarder.forward_all()
    assert ("dst", 2) in heads


def test_global_byte_quota_refuses_copies_and_keeps_the_cursor(
    make_engine: EngineFactory,
) -> None:
    e = make_engine(max_total_bytes=10)
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "src", "12345")  # 7 bytes: the copy would make 14
    assert e.forwarder.forward_all() == 0
    r = e.routers.get("r")
    assert r is not None and (r.cursor, r.forwarded_total) == (0, 0)
    assert _all(e, "dst") == []
    # Deleted (not evicted) from the source meanwhile: consumed silently, never a trim.
    e.delete_records("src", before_seq=2)
    e.forwarder.forward_all()
    assert r.cursor == 1 and r.forwarded_total == 0


def test_copies_queue_behind_in_flight_dest_writes(make_engine: EngineFactory) -> None:
    """A copy never publishes ahead of a direct dest write that reserved an earlier seq."""
    e = make_engine()
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "dst", "first")
    pw = e.write_begin("dst", [RecordIn.of("direct")])
    assert pw is not None
    _write(e, "src", "copy")
    e.forwarder.forward_all()
    e.write_finish(pw)
    assert [(x.seq, x.data) for x in _all(e, "dst")] == [(1, "first"), (2, "direct"), (3, "copy")]


def test_ephemeral_and_fsync_dests(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("eph", TopicConfig(durability=Durability.EPHEMERAL))
    e.put_topic("fs", TopicConfig(durability=Durability.FSYNC))
    e.put_router(RouterSpec("1", "src", "eph"))
    e.put_router(RouterSpec("2", "src", "fs"))
    _write(e, "src", {"v": 1})
    assert [x.data for x in _all(e, "eph")] == [{"v": 1}]
    assert [x.data for x in _all(e, "fs")] == [{"v": 1}]


def test_copies_from_sealed_source_payloads(make_engine: EngineFactory) -> None:
    """Payloads that left memory are read back from the source's sealed segments."""
    from seglog.engine.maintenance import seal_topic

    e = make_engine(segment_max_events=2, segment_payload_cache=0)
    e.put_router(RouterSpec("r", "src", "dst"))
    values = [orjson.dumps({"i": i}).decode() for i in range(7)]
    for v in values:
        _write(e, "src", v)
    src = e.topics["src"]
    seal_topic(e, src)
    assert not all(src.has_payload(s) for s in range(src.base_seq, src.head + 1)), (
        "no payload left memory"
    )
    assert e.topics["dst"].head == 0
    assert [x.data for x in _all(e, "dst")] == values


def test_long_chain_reads_its_writes_upstream_first(make_engine: EngineFactory) -> None:
    """Upstream routers are drained first, and a DAG deeper than the hop cap loses nothing."""
    e = make_engine()
    n = 30
    for i in range(n):
        e.put_router(RouterSpec(f"z{n - i:03d}", f"t{i}", f"t{i + 1}"))  # names against order
    _write(e, "t0", "x")
    assert [r.data for r in _all(e, f"t{n}")] == ["x"]


def test_step_window_with_deleted_slots_and_sealed_payloads(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step walks at most BATCH source seqs even when dead slots make the read examine
    more, also when payloads come from sealed segments."""
    from seglog.engine import forwarding
    from seglog.engine.maintenance import seal_topic

    monkeypatch.setattr(forwarding, "BATCH", 4)
    e = make_engine(segment_max_events=2, segment_payload_cache=0)
    e.put_router(RouterSpec("r", "src", "dst"))
    _write(e, "src", *range(12))
    # Below `delete_records`, which would let the router forward first (it reads src).
    e.drain(e._delete_begin("src", None, None, [2, 3, 6]))
    seal_topic(e, e.topics["src"])
    r = e.routers.get("r")
    assert r is not None
    with e.routers.lock:
        assert e.forwarder.step(r)
    assert r.cursor == 4  # one window: seqs 1..4 (2 and 3 deleted)
    assert [x.data for x in _all(e, "dst")] == [v for v in range(12) if v + 1 not in (2, 3, 6)]


def test_forward_all_serves_high_priority_sources_first(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler's order (SEMANTICS §11) applies to forwarding work too: routers whose
    source has a higher effective priority advance first in a pass."""
    e = make_engine()
    for name, prio in (("low", -100), ("mid", 300), ("high", 900), ("auto", None)):
        e.put_topic(name, TopicConfig(priority=prio, auto_priority=False))
        e.put_router(RouterSpec(f"{name}->{name}.out", name, f"{name}.out"))
        _write(e, name, 1)
    order: list[str] = []
    advance = e.forwarder.advance

    def recording(r: Any) -> bool:
        order.append(r.spec.source)
        return advance(r)

    monkeypatch.setattr(e.forwarder, "advance", recording)
    assert e.forwarder.forward_all() == 4
    assert order == ["high", "mid", "auto", "low"]
