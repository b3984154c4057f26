"""A read that found its topic just before a delete removed it answers `topic_not_found`,
as it would a moment later — not a raw `FileNotFoundError` from the sealed segments the
delete is removing."""

from __future__ import annotations

import pytest

from seglog.clock import ManualClock
from seglog.engine.maintenance import seal_topic
from seglog.errors import ErrorCode, SeglogError
from seglog.model import RecordIn, TopicConfig
from tests.engine.oracle import open_engine
from tests.support.faultfs import FaultFs


def test_a_read_racing_a_topic_delete_says_the_topic_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    e = open_engine(FaultFs(), clock=ManualClock(), segment_max_events=8, segment_payload_cache=0)
    e.put_topic("t", TopicConfig())
    e.write("t", [RecordIn.of({"i": i}) for i in range(20)])
    seal_topic(e, e.topics["t"])
    assert e.topics["t"].segments is not None and e.topics["t"].segments.sealed

    def drop_instead(name: str, *_a: object) -> None:  # runs between the lookup and the lock
        e.drop_topic(name)

    monkeypatch.setattr(e, "warm_cold", drop_instead)
    with pytest.raises(SeglogError) as info:
        e.read("t", 0, limit=100, max_bytes=1 << 20)
    assert info.value.code is ErrorCode.TOPIC_NOT_FOUND
    e.close()
