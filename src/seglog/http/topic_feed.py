"""One batch of live delivery for one topic, read once and shared by every watcher at the
same cursor (SSE watch and WebSocket subscriptions, SEMANTICS §9).

Readers that tail a topic sit at the same cursor, so after a publish they all ask for the
same read. The first one reads (the engine's normal read: retention pass, tombstone rule,
walk) and encodes the `records` array once; the others reuse both (still marking the
topic read), keyed by the topic's `read_version` (id, head, live count, earliest seq,
`dedupe_node` — equal keys mean equal reads) plus the cursor and the delivery options. Topics with a TTL are never shared (time alone changes
what a read sees). A slow reader is not a special case: it simply asks for an older cursor
later and gets an uncached read from the log.

Owner: the event loop; no locks.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import orjson

from seglog.engine.engine import ReadVersion
from seglog.http.async_engine import AsyncEngine
from seglog.http.responses import records_array
from seglog.http.watch_request import DeliveryOptions
from seglog.model import Tombstone, TombstoneReason

CACHE_ENTRIES = 1024


@dataclass(frozen=True, slots=True)
class FeedBatch:
    """What one read of a topic delivers. `start` is the cursor the records follow (the
    cursor after any tombstone); `next_cursor` is the cursor after the read (past records
    delivered or skipped)."""

    topic: str
    topic_json: bytes
    tombstone: Tombstone | None
    start: int
    next_cursor: int
    head_seq: int
    earliest_seq: int
    count: int
    records_json: bytes  # the encoded `records` array (b"[]" when empty)
    # Live frames built from this batch, by composite-cursor id: every watcher at the same
    # cursor map sends the same bytes (filled by `watch_stream`, shared through the cache).
    frames: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    # WebSocket messages built from this batch, by kind (filled by `ws_session`).
    ws_text: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def caught_up(self) -> bool:
        return self.next_cursor == self.head_seq


_Key = tuple[str, ReadVersion, int, DeliveryOptions]


class TopicFeed:
    def __init__(self, db: AsyncEngine, capacity: int = CACHE_ENTRIES) -> None:
        self._db = db
        self._capacity = capacity
        self._cache: OrderedDict[_Key, FeedBatch] = OrderedDict()
        self.reads = 0  # reads that went to the engine
        self.shared = 0  # reads answered from a batch another reader fetched

    async def read(self, topic: str, cursor: int, opts: DeliveryOptions) -> FeedBatch:
        """The next batch after `cursor`; raises `topic_not_found` if the topic is gone."""
        version = self._db.read_version(topic)
        key: _Key | None = None
        if version is not None:
            key = (topic, version, cursor, opts)
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.shared += 1
                self._db.mark_read(topic)
                return hit
        batch = await self._read(topic, cursor, opts)
        if key is not None:
            self._cache[key] = batch
            if len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        return batch

    async def _read(self, topic: str, cursor: int, opts: DeliveryOptions) -> FeedBatch:
        self.reads += 1
        res = await self._db.read(topic, cursor, opts.limit, opts.nodes, opts.max_batch_bytes)
        tomb = res.tombstone
        start = cursor
        if tomb is not None:
            # The walk went on after the gap (SEMANTICS §4.4); for a recreated topic it
            # restarted from its earliest record.
            recreated = tomb.reason is TombstoneReason.RECREATED
            start = res.earliest_seq - 1 if recreated else max(tomb.gap_to, cursor)
        records = (
            records_array(res.records, opts.include_tags, opts.include_meta, opts.include_data)
            if res.records
            else b"[]"
        )
        return FeedBatch(
            topic=topic,
            topic_json=orjson.dumps(topic),
            tombstone=tomb,
            start=min(start, res.next_from_seq),
            next_cursor=res.next_from_seq,
            head_seq=res.head_seq,
            earliest_seq=res.earliest_seq,
            count=len(res.records),
            records_json=records,
        )
