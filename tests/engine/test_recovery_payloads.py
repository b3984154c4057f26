"""Recovery restores the records of sealed segments without copying their payloads out of
the snapshot (`recovery.held_by_segments`; a format-2 snapshot references those sealed when
it was taken, and the rest may have been sealed since): step 8 would drop them anyway.
Held to the plain restore: the same crash image recovered both ways reads back the same
records, counts and bytes, and whatever is read back was written — through deletes,
null and absent metas, tags, nodes, both crash images and both persistent classes."""

from __future__ import annotations

import pytest

from seglog.clock import ManualClock
from seglog.engine.engine import Engine
from seglog.engine.maintenance import seal_topic
from seglog.engine.topic import TopicState
from seglog.model import Durability, RecordIn, TopicConfig
from tests.engine.oracle import IMAGES, ROOT, ImageKind, abandon, image, open_engine, read_all
from tests.support.faultfs import FaultFs

SEGMENT = 5
CACHE = 3  # the newest sealed payloads step 8 keeps in memory
NO_HOLD = 1 << 40  # a payload cache so large that nothing is held: the plain restore


def batch(k: int, n: int) -> list[RecordIn]:
    out = []
    for i in range(k, k + n):
        meta = None if i % 3 else ({"m": i} if i % 2 else None)
        out.append(
            RecordIn.of(
                {"i": i, "s": "x" * (i % 7)} if i % 4 else [i, None, "é"],
                meta=meta,
                tag=f"g{i % 2}" if i % 5 else None,
                node="n1" if i % 2 else None,
            )
        )
    return out


def reopen(fs: FaultFs, cache: int) -> Engine:
    return open_engine(fs, segment_max_events=SEGMENT, segment_payload_cache=cache)


@pytest.mark.parametrize("kind", IMAGES)
@pytest.mark.parametrize("durability", [Durability.DISK, Durability.FSYNC])
def test_held_payloads_recover_like_the_plain_restore(
    kind: ImageKind, durability: Durability
) -> None:
    fs = FaultFs()
    e = reopen(fs, CACHE)
    e.put_topic("t", TopicConfig(durability=durability))
    written: dict[int, RecordIn] = {}
    for k in range(0, 60, 12):
        for seq, rec in zip(e.write("t", batch(k, 12)).seqs, batch(k, 12), strict=True):
            written[seq] = rec
        seal_topic(e, e.topics["t"])
    for seq, rec in zip(e.write("t", batch(60, 5)).seqs, batch(60, 5), strict=True):
        written[seq] = rec  # in the snapshot's records, in no sealed segment yet
    e.delete_records("t", seqs=[2, 7, 8, 31])
    e.snapshot()  # references the sealed segments: restored without payloads either way
    seal_topic(e, e.topics["t"])  # 61..65: held back from the snapshot's records
    for seq, rec in zip(e.write("t", batch(65, 4)).seqs, batch(65, 4), strict=True):
        written[seq] = rec  # after the snapshot: replayed from the WAL
    held_fs, plain_fs = image(fs, kind), image(fs, kind)
    abandon(e, fs)

    held, plain = reopen(held_fs, CACHE), reopen(plain_fs, NO_HOLD)
    try:
        th, tp = held.topics["t"], plain.topics["t"]
        # payloads were held back
        assert _in_memory(th) < _in_memory(tp) < tp.slot_count
        assert (th.head, th.count, th.bytes) == (tp.head, tp.count, tp.bytes)
        (ts_h, *_, size_h), (ts_p, *_, size_p) = (
            th.columns(0, th.slot_count),
            tp.columns(0, tp.slot_count),
        )
        assert size_h == size_p and th.dead == tp.dead and ts_h == ts_p
        got_held, got_plain = read_all(held, "t"), read_all(plain, "t")
        assert got_held == got_plain
        assert 2 not in got_held and 31 not in got_held
        assert {1, 55, 61, 63, 66} <= got_held.keys()
        for seq, r in got_held.items():
            w = written[seq]
            assert (r.data_json, r.meta_json, r.tag, r.node) == (
                w.data_json,
                w.meta_json,
                w.tag,
                w.node,
            ), seq
    finally:
        held.close(snapshot=False)
        plain.close(snapshot=False)


def test_a_held_null_meta_counts_as_no_meta() -> None:
    """A snapshot written elsewhere may spell an absent meta as JSON null: held or not, it
    is no meta and adds nothing to the record's size."""
    from seglog.engine.snapshots import restore_topic
    from seglog.storage.snapshot import _decode_records

    body = (
        b'[{"seq":1,"ts":5,"data":{"a":1},"meta":null},{"seq":2,"ts":6,"data":[2],"meta":{"k":1}}]'
    )

    def entry() -> dict[str, object]:
        return {
            "name": "t",
            "topic_id": 1,
            "config": TopicConfig().to_dict(),
            "base_seq": 1,
            "head_seq": 2,
            "records": _decode_records(body),
        }

    plain, held = restore_topic(entry()), restore_topic(entry(), [(1, 2)])
    assert not held.has_payload(1) and not held.has_payload(2)
    assert [plain.slot(s)[1:3] for s in (1, 2)] == [(b'{"a":1}', None), (b"[2]", b'{"k":1}')]
    sizes = [t.columns(0, t.slot_count)[5] for t in (held, plain)]
    assert sizes == [[7, 3 + 7]] * 2 and held.bytes == plain.bytes == 17


@pytest.mark.parametrize("enabled", [True, False])
def test_replay_pauses_the_garbage_collector_and_restores_it(enabled: bool) -> None:
    import gc

    from seglog.engine import recovery

    seen: list[bool] = []

    def attach(_t: object) -> None:
        seen.append(gc.isenabled())
        raise RuntimeError("stop here")

    fs = FaultFs()
    e = reopen(fs, CACHE)
    e.put_topic("t", TopicConfig())
    e.write("t", batch(0, 3))
    e.snapshot()
    e.close(snapshot=False)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(RuntimeError, match="stop here"):
            recovery.replay(
                fs,
                ROOT / "meta",
                ROOT / "wal",
                wal_shards=1,
                clock=ManualClock(),
                attach_segments=attach,
            )
        assert seen == [False]  # off while replaying
        assert gc.isenabled() is enabled  # as it was, even when the replay fails
    finally:
        (gc.enable if was else gc.disable)()


def _in_memory(t: TopicState) -> int:
    """How many slots hold their payload in memory."""
    return sum(t.has_payload(s) for s in range(t.origin, t.end_seq))
