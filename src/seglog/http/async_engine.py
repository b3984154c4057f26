"""`AsyncEngine`: the one place that decides where an engine call runs for the event loop.

Rule: nothing on the loop waits for the disk. Calls that may wait for a durable WAL commit
(control plane, deletes, forwarding into a topic about to be read) or page in cold-tier
bytes run in a worker thread; a write to an existing topic is submitted inline and its
commit awaited; a read, a topic's state and a page of topics first await any retention
watermark that became due, then read inline. Handlers await these methods and never touch
engine state themselves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from seglog.core.leases import Claimer
from seglog.engine.aio import finish_op, finish_write
from seglog.engine.engine import Engine, ReadVersion
from seglog.engine.queues import ClaimResult, Job, PendingAck, SettleResult
from seglog.engine.stats import EngineStats
from seglog.errors import ErrorCode, SeglogError
from seglog.http.claim_cohorts import ClaimCohorts
from seglog.model import (
    MAX_DIFF_LIMIT,
    DeleteResult,
    DropTopicResult,
    PutTopicResult,
    ReadResult,
    RecordBatch,
    RecordIn,
    Selector,
    TopicConfig,
    TopicInfo,
    WriteResult,
)
from seglog.router_model import DropRouterResult, PutRouterResult, RouterInfo, RouterSpec

T = TypeVar("T")
# Tasks that settle an ack whose request was cancelled (held so they are not collected).
_background: set[asyncio.Future[None]] = set()

# Reads of more records than this (the JSON diff's largest page) run in a worker thread.
BIG_READ = MAX_DIFF_LIMIT
# How long after a write ended writers still count as active for the fan-out's pacing:
# longer than the gap between a steady writer's requests, short enough that watchers
# behind a burst catch up at full speed right after it.
RECENT_WRITE_S = 0.01


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run `fn` in a worker thread (it may wait for the disk)."""
    return await run_in_threadpool(fn, *args, **kwargs)


class AsyncEngine:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # Record writes being served right now, and when the last one ended (the live
        # fan-out paces itself while writers are active): kept here, where every write
        # path (HTTP, WebSocket publish) passes.
        self.writes_in_flight = 0
        self.last_write_end = -1e9  # time.monotonic()
        self.claims = ClaimCohorts(self._claim_pass)

    def writers_active(self, now: float | None = None) -> bool:
        """A write is being served, or one ended within the last RECENT_WRITE_S: a buffered
        write that finds the WAL writer idle completes without ever waiting on the loop,
        so "in flight" alone misses a steady stream of them. `now`: `time.monotonic()`."""
        if self.writes_in_flight > 0:
            return True
        return (time.monotonic() if now is None else now) - self.last_write_end < RECENT_WRITE_S

    # ---- cheap, lock-free facts ----------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.engine.ready

    @property
    def replay_progress(self) -> float:
        return self.engine.replay_progress

    def topic_count(self) -> int:
        return len(self.engine.registry)

    def exists(self, name: str) -> bool:
        return self.engine.exists(name)

    def head_of(self, name: str) -> int:
        return self.engine.head_of(name)

    def read_version(self, name: str) -> ReadVersion | None:
        return self.engine.read_version(name)

    def mark_read(self, name: str) -> None:
        self.engine.mark_read(name)

    async def get_topic(self, name: str, touch: bool) -> TopicInfo:
        """A topic's state, as a read sees it: forwarding into it and a retention
        watermark that became due are awaited first (off the loop only when there is
        forwarding to do), then the state is taken inline."""
        e = self.engine
        if e.routers_pending_into(name):
            await blocking(e.drain_routers_into, name)
        evict = e.prepare_read(name)
        if evict is not None:
            await finish_op(e, evict)
        return e.topic_info(name, touch)

    async def list_topics(
        self,
        prefix: str,
        after: str | None,
        limit: int,
        touch: bool,
        within: Sequence[str] | None = None,
    ) -> tuple[list[TopicInfo], bool]:
        """A page of topics, each as `get_topic` gives it (only names starting with one of
        `within`); in a worker thread only when there is forwarding into one to do."""
        e = self.engine
        while True:
            page, more = e.topic_page(prefix, after, limit, within)
            if any(e.routers_pending_into(name) for name in page):
                return await blocking(e.list_topics, prefix, after, limit, touch, within)
            for name in page:
                try:
                    evict = e.prepare_read(name)
                except SeglogError as err:
                    if err.code is not ErrorCode.TOPIC_NOT_FOUND:
                        raise
                    continue  # dropped since the page was taken: `topic_infos` leaves it out
                if evict is not None:
                    await finish_op(e, evict)
            infos = e.topic_infos(page, touch)
            if infos or not more:
                return infos, more
            after = page[-1]  # the page's topics were all dropped meanwhile: the next page

    # ---- control plane: threads (durable frames) ------------------------------------------
    async def put_topic(self, name: str, config: TopicConfig) -> PutTopicResult:
        return await blocking(self.engine.put_topic, name, config)

    async def drop_topic(self, name: str, if_empty: bool) -> DropTopicResult:
        return await blocking(self.engine.drop_topic, name, if_empty)

    async def delete_records(
        self, name: str, before_seq: int | None, match: Selector | None
    ) -> DeleteResult:
        return await blocking(self.engine.delete_records, name, before_seq, match)

    # ---- routers: control plane in threads (durable frames; forwarding) ----------------
    async def put_router(self, spec: RouterSpec) -> PutRouterResult:
        return await blocking(self.engine.put_router, spec)

    async def delete_router(self, name: str) -> DropRouterResult:
        return await blocking(self.engine.delete_router, name)

    async def get_router(self, name: str) -> RouterInfo:
        """Drives the router to its source head first (API §6.2)."""
        return await blocking(self.engine.get_router, name)

    def router_spec(self, name: str) -> RouterSpec:
        """A router's definition (lock-free); `router_not_found` when absent."""
        return self.engine.router_spec(name)

    def find_router(self, name: str) -> RouterSpec | None:
        return self.engine.find_router(name)

    def list_routers(
        self, prefix: str, source: str | None, dest: str | None, after: str | None, limit: int
    ) -> tuple[list[RouterInfo], bool]:
        """Lock-free: a page of definitions and totals, no forwarding."""
        return self.engine.list_routers(prefix, source, dest, after, limit)

    async def stats(self) -> EngineStats:
        return await blocking(self.engine.stats)

    # ---- queues (API §9): every call may wait for a delete's commit or a retention pass --
    def queue_topic(self, name: str) -> TopicConfig:
        """Lock-free: the queue's config; `topic_not_found` / `not_a_queue` otherwise."""
        return self.engine.queues.topic(name).config

    async def claim(
        self, name: str, claimer: Claimer, lease_ms: int | None
    ) -> tuple[list[Job], int]:
        """Through the topic's coalescing window when it has one (SEMANTICS §10.3)."""
        window = self.queue_topic(name).claim_jitter_ms
        return await self.claims.claim(name, claimer, lease_ms, window)

    async def _claim_pass(
        self, name: str, cohort: list[Claimer], lease_ms: int | None
    ) -> ClaimResult:
        """On the loop, like a read: forwarding that may read sealed payloads and a dead-
        letter write go to a thread; a due retention watermark is awaited here."""
        e, q = self.engine, self.engine.queues
        q.topic(name)
        if e.routers_pending_into(name):
            await blocking(e.drain_routers_into, name)
        evict = e.prepare_read(name)
        if evict is not None:
            await finish_op(e, evict)
        p = q.claim_pass(name, cohort, lease_ms)
        if q.needs_thread(p):
            return await blocking(q.claim_finish, p)
        return q.claim_finish(p)

    async def _retained(self, name: str) -> None:
        """The retention pass a queue counter needs first (SEMANTICS §4.2), its watermark
        awaited: an ack or nack answers `ready`/`in_flight` without the expired jobs."""
        evict = self.engine.prepare_read(name)
        if evict is not None:
            await finish_op(self.engine, evict)

    async def ack(self, name: str, node: str, seqs: list[int], fences: list[int]) -> SettleResult:
        """The delete's commit is awaited on the loop, as a write's is."""
        q = self.engine.queues
        if self.engine.delete_waits(name, ack=True):
            return await blocking(q.ack, name, node, seqs, fences)
        await self._retained(name)
        a = q.ack_begin(name, node, seqs, fences, may_wait=False)
        if a.deferred:  # a router appeared since the check: it settles off the loop
            a = await blocking(q.settle_ack, a)
        if a.delete is not None:
            try:
                await finish_op(self.engine, a.delete)
            except asyncio.CancelledError:
                # The delete lands (or fails) without us: settle the jobs then, or a failed
                # delete would leave them unclaimable until a restart.
                _background.add(task := asyncio.ensure_future(self._ack_later(a)))
                task.add_done_callback(_background.discard)
                raise
        return q.ack_finish(a)

    async def _ack_later(self, a: PendingAck) -> None:
        assert a.delete is not None
        await finish_op(self.engine, a.delete)
        try:
            self.engine.queues.ack_finish(a)
        except SeglogError:
            pass  # the jobs are claimable again; nobody is left to tell

    async def nack(
        self, name: str, node: str, seqs: list[int], fences: list[int], delay_ms: int
    ) -> SettleResult:
        """In memory (a Lease frame, if any, is only queued): runs on the loop."""
        await self._retained(name)
        return self.engine.queues.nack(name, node, seqs, fences, delay_ms)

    def extend(
        self, name: str, node: str, seqs: list[int], fences: list[int], lease_ms: int
    ) -> SettleResult:
        return self.engine.queues.extend(name, node, seqs, fences, lease_ms)

    def held_by_conn(self, name: str, conn: int) -> int:
        """Un-expired leases of a `/work` connection (in memory; cheap)."""
        return self.engine.queues.held_by_conn(name, conn)

    def release_conn(self, name: str, conn: int) -> int:
        """A `/work` stream ended: its leases are due again (in memory; a Lease frame is only
        queued, never waited for)."""
        return self.engine.queues.release_conn(name, conn)

    # ---- data plane ------------------------------------------------------------------------
    async def write(
        self,
        name: str,
        records: RecordBatch | Sequence[RecordIn],
        *,
        node: str | None,
        idempotency_key: str | None,
        create: bool | None,
        config: TopicConfig | None,
    ) -> WriteResult:
        e = self.engine
        kwargs = {"node": node, "idempotency_key": idempotency_key, "create": create}
        self.writes_in_flight += 1
        try:
            pw = e.write_begin(name, records, config=config, may_wait=False, **kwargs)  # type: ignore[arg-type]
            if pw is None:  # auto-create logs a durable TopicCreate: keep that fsync off the loop
                pw = await blocking(e.write_begin, name, records, config=config, **kwargs)
            assert pw is not None
            return await finish_write(e, pw)
        finally:
            self.writes_in_flight -= 1
            self.last_write_end = time.monotonic()

    async def read(
        self,
        name: str,
        from_seq: int,
        limit: int,
        nodes: frozenset[str],
        max_bytes: int,
        columnar: bool = False,
        packed: bool = False,
    ) -> ReadResult:
        e = self.engine
        if e.routers_pending_into(name):
            # Read-your-writes (SEMANTICS §8.5): forwarding may read sealed source payloads
            # and waits for the router lock, so it runs off the loop.
            await blocking(e.drain_routers_into, name)
        evict = e.prepare_read(name)
        if evict is not None:
            await finish_op(e, evict)  # a retention watermark became due: await it here
            if evict.error is not None:
                # Not logged: the read fails rather than pass the expired records without
                # their tombstone (SEMANTICS §4.2 step 4).
                raise evict.error
        if e.reads_cold(name, from_seq, limit) or limit > BIG_READ:
            # Cold-tier bytes may come from a slow disk, and a big columnar page takes a
            # while to gather: read off the event loop.
            return await blocking(
                e.read, name, from_seq, limit, nodes, max_bytes, columnar=columnar, packed=packed
            )
        return e.read(
            name, from_seq, limit, nodes, max_bytes, wait=False, columnar=columnar, packed=packed
        )
