"""A write is atomic across crashes (SEMANTICS §3.1, STORAGE §3.5): a crash that cuts a
batch's write short (SIGKILL mid-`pwrite`, or a power cut that kept a prefix of the batch's
pages) must not leave the first records of a write visible after recovery. Found by
`scripts/crash_oracle.py`: an outcome-unknown write of 5 records came back as its first 4.

Every frame of a submission but the last carries the `more` flag; replay applies frames
only once their submission is complete, and recovery cuts the WAL at the start of an
unfinished one, so that the writer's next batch is not read as its end."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglog.clock import ManualClock
from seglog.core.frame_bodies import TopicCreateBody
from seglog.core.frames import FrameType, encode_append, encode_control
from seglog.core.payload_blob import encode_blob
from seglog.engine.engine import Engine, EngineOptions
from seglog.errors import SeglogError
from seglog.model import Durability, RecordIn, TopicConfig
from tests.support.faultfs import Crash, FaultFs


def _open(fs: FaultFs) -> Engine:
    e = Engine(EngineOptions(data_dir=Path("/data"), wal_shards=1), fs=fs, clock=ManualClock())
    e.open()
    return e


def _live(e: Engine) -> dict[int, bytes]:
    return {r.seq: r.data_json for r in e.read("t", 0, limit=100).records}


@pytest.mark.parametrize("cls", [Durability.DISK, Durability.FSYNC])
@pytest.mark.parametrize("image", ["process", "power-kept-prefix"])
def test_a_write_cut_short_by_a_crash_is_never_partly_applied(cls: Durability, image: str) -> None:
    fs = FaultFs()
    e = _open(fs)
    e.put_topic("t", TopicConfig(durability=cls))
    first = RecordIn.of({"w": 1})
    assert e.write("t", [first]).seqs == [1]

    batch = [RecordIn.of({"w": 2, "k": k}) for k in range(5)]
    frame = len(encode_append(1, 2, 0, None, None, encode_blob(batch[0].data_json, None), False))
    # The batch's write keeps its first two frames and half the third; the world stops there.
    fs.tear_writes = {fs.writes + 1}
    fs.tear_keep = 2 * frame + frame // 2
    fs.crash_after(fs.mutations + 1)
    # The world stops in the writer thread (the caller sees its write fail) or, for a
    # buffered write the caller wrote inline, in the caller itself.
    with pytest.raises((SeglogError, Crash)):
        e.write("t", batch)

    img = fs.process_crash_image() if image == "process" else fs.crash_image("all")
    e2 = _open(img)
    assert _live(e2) == {1: first.data_json}, "the first records of a cut write came back"
    assert e2.stats().wal_torn_tails_total == 1
    after = RecordIn.of({"w": 3})
    seq = e2.write("t", [after]).first_seq
    e2.close(snapshot=False)

    # The cut frames were removed from the WAL: replay does not take the next batch for
    # their end (which would put the cut write's data at the new write's seq).
    e3 = _open(img.process_crash_image())
    assert _live(e3) == {1: first.data_json, seq: after.data_json}
    e3.close(snapshot=False)


def test_multi_frame_control_submissions_are_atomic_too() -> None:
    """A class change to fsync logs TopicCreate + HeadWatermark as one submission."""
    fs = FaultFs()
    e = _open(fs)
    e.put_topic("t", TopicConfig(durability=Durability.EPHEMERAL))
    for i in range(3):
        e.write("t", [RecordIn.of({"i": i})])
    fsync = TopicConfig(durability=Durability.FSYNC)
    create = encode_control(
        FrameType.TOPIC_CREATE, 1, TopicCreateBody("t", fsync.to_json()).encode(), 0, True
    )
    fs.tear_writes = {fs.writes + 1}
    fs.tear_keep = len(create) + 10  # the TopicCreate frame whole, the HeadWatermark cut
    fs.crash_after(fs.mutations + 1)
    # The machine stops in the write: on the WAL writer's thread (the put fails) or on the
    # caller's own, which writes its submission itself when the writer is idle.
    with pytest.raises((SeglogError, Crash)):
        e.put_topic("t", fsync)
    e2 = _open(fs.process_crash_image())
    # Neither half of the change applies: the topic's creation frame is the only config.
    assert e2.get_topic("t").config.durability is Durability.EPHEMERAL
    e2.close(snapshot=False)
