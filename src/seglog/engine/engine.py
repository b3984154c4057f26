"""The engine facade: open/close, the control plane, and the wiring of its owners.

Owners (each states its own lock rules): `Registry` — topics by name and id, one lock that
control-plane changes and snapshots share; `TopicState` — one topic's records, under its
own lock; `Publisher` — applies a topic's completed ops in order and wakes listeners;
`RouterTable` — the routers and their runtime state, one lock that forwarding steps and
snapshots share (forwarding itself: `Forwarder`); the WAL writer threads — only complete
`Commit`s and never take an engine lock, so waiting for a commit while holding a topic
lock cannot deadlock. The paths are small modules of their own: `writes`, `deletes`,
`retention`, `recovery`, `snapshots`, `forwarding`, `router_control`. Lock order: snapshot,
registry, router table, topic. Nothing here knows about HTTP or asyncio: async callers use `write_begin`, await the
commit (`seglog.engine.aio`) and call `write_publish`; `prepare_read` + `read(wait=False)`.
"""

from __future__ import annotations

import itertools
import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from seglog.clock import Clock, SystemClock
from seglog.core.frame_bodies import (
    HeadWatermarkBody,
    RouterDeleteBody,
    TopicCreateBody,
    TopicDeleteBody,
)
from seglog.core.frames import FrameType, encode_control
from seglog.core.names import valid_topic_name
from seglog.core.priority import effective_priority
from seglog.engine import column_read, deletes, payloads, queues, retention, snapshots, writes
from seglog.engine.forwarding import Forwarder
from seglog.engine.frozen_slots import HEAP, ColumnMemory, FrozenSlots
from seglog.engine.interrupts import ShieldedLock
from seglog.engine.ops import PendingOp, PendingWrite
from seglog.engine.publisher import AppendListener, Publisher
from seglog.engine.recovery import (
    pad_to_floors,
    recover,
)
from seglog.engine.registry import Registry
from seglog.engine.router_control import RouterControl
from seglog.engine.routers import Router, RouterTable
from seglog.engine.segments import SealPolicy, TopicSegments
from seglog.engine.snapshot_pins import SnapshotPins
from seglog.engine.stats import EngineStats, TopicStats
from seglog.engine.topic import DedupeEntry, Missing, TopicState
from seglog.errors import ErrorCode, SeglogError, internal, invalid, throttled, topic_not_found
from seglog.model import (
    DeleteResult,
    Discard,
    DropTopicResult,
    Durability,
    PutTopicResult,
    QueueCounts,
    ReadResult,
    Record,
    RecordBatch,
    RecordIn,
    Selector,
    TopicConfig,
    TopicInfo,
    TopicType,
    WriteResult,
)
from seglog.router_model import DropRouterResult, PutRouterResult, RouterInfo, RouterSpec
from seglog.storage.datadir import DataDir, DirLocks
from seglog.storage.fs import Fs, RealFs
from seglog.storage.scratch import ScratchSpace
from seglog.storage.segment import PinnedSegment, SegmentStore
from seglog.storage.snapshot import SnapshotMark
from seglog.storage.wal import Wal
from seglog.storage.wal_commit import Commit, WalError, WalQueueFull
from seglog.storage.wal_metrics import WalMetrics

# `Engine.read_version`: topic id, head, live count, earliest seq, dedupe_node.
ReadVersion = tuple[int, int, int, int, bool]

log = logging.getLogger("seglog.engine")


@dataclass(frozen=True, slots=True)
class EngineOptions:
    data_dir: Path = Path("./seglog-data")
    cold_dir: Path | None = None
    wal_shards: int = 1
    wal_file_size: int = 64 << 20
    segment_max_events: int = 10_000
    segment_max_bytes: int = 64 << 20
    segment_max_age_ms: int = 3_600_000
    hot_retain_segments: int = 4
    hot_retain_bytes: int = 0
    segment_payload_cache: int = 4096
    max_topics: int = 100_000
    max_routers: int = 10_000
    max_total_bytes: int = 0
    snapshot_interval_ms: int = 60_000
    snapshot_wal_bytes: int = 64 << 20
    # Buffered WAL writes (memory/disk) written by the writing thread when the shard's
    # writer is idle; tests that hold the writer at a gate turn it off.
    wal_inline_writes: bool = True
    # The sealed records' index columns in scratch files the kernel pages (`storage.
    # scratch`) instead of heap memory.
    index_scratch: bool = True


class Engine:
    def __init__(
        self, options: EngineOptions, fs: Fs | None = None, clock: Clock | None = None
    ) -> None:
        self.options = options
        self.fs: Fs = fs if fs is not None else RealFs()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.registry = Registry()
        self.routers = RouterTable()
        self.publisher = Publisher(self.clock, self.retain)
        self.forwarder = self._new_forwarder()
        self.queues = queues.Queues(self)
        self.seal_policy = SealPolicy(
            options.segment_max_events,
            options.segment_max_bytes,
            options.segment_max_age_ms,
            options.segment_payload_cache,
        )
        self.datadir: DataDir | None = None
        self.scratch: ScratchSpace | None = None
        self.wal: Wal | None = None
        self.ready = False
        self.replay_progress = 0.0
        self.last_snapshot_ms = 0
        self.wal_bytes_at_snapshot = 0
        self.snapshot_lock = ShieldedLock()
        self.last_snapshot: SnapshotMark | None = None  # the newest snapshot on disk
        # sealed segments the kept snapshots reference (never unlinked while they do)
        self.snapshot_pins = SnapshotPins()
        self.torn_tails_total = 0

    # ---- lifecycle ------------------------------------------------------------------
    def open(
        self, on_progress: Callable[[float], None] | None = None, locks: DirLocks | None = None
    ) -> None:
        """Lock the data dir (or adopt `locks`, taken by the caller for the same roots),
        recover (STORAGE §6) and open the WAL writers."""
        opts = self.options
        self.datadir = DataDir.open(self.fs, opts.data_dir, opts.cold_dir, locks)
        if opts.index_scratch:
            try:
                self.scratch = ScratchSpace.create(self.datadir.root)
            except OSError as e:
                log.warning("index columns stay in heap memory: %s", e)

        def progress(fraction: float) -> None:
            self.replay_progress = fraction
            if on_progress is not None:
                on_progress(fraction)

        try:
            rec = recover(
                self.fs,
                self.datadir,
                wal_shards=self.options.wal_shards,
                clock=self.clock,
                attach_segments=self.attach_segments,
                on_progress=progress,
                payload_cache=self.options.segment_payload_cache,
                pins=self.snapshot_pins,
                memory=self.column_memory,
            )
        except BaseException:
            self.datadir.close()
            self.datadir = None
            raise
        self.registry = rec.registry
        self.routers = rec.routers
        self.forwarder = self._new_forwarder()
        self.last_snapshot = rec.last_snapshot
        self.torn_tails_total = rec.torn_tails
        tails, layout_changed = rec.tails, rec.layout_changed
        wal = Wal(
            self.fs,
            self.datadir.wal_dir,
            self.options.wal_shards,
            file_size=self.options.wal_file_size,
            inline_buffered=self.options.wal_inline_writes,
        )
        wal.open(tails)
        self.wal = wal
        # STORAGE §6 step 9: re-derive what the routers forwarded since the snapshot, with
        # the live forwarding step (hence after the WAL opened: a due eviction watermark on
        # a source is logged first, like any live retention pass).
        for r in self.routers.all():
            self.forwarder.rebuild_copies(r)
        self.forwarder.forward_all()
        pad_to_floors(self.registry.all(), self.clock.now_ms())
        if layout_changed or rec.stale_references:
            # Frames of two shard layouts must never coexist past a checkpoint (§6 step 5):
            # absorb the old layout's groups before any write lands in the new one. Twice,
            # so that both kept snapshots follow the change: falling back to a damaged
            # newest one must never replay the new layout from an old layout's positions.
            # (Also when a topic restored with segment references became ephemeral:
            # its files are gone, so no kept snapshot may reference them any more.)
            self.snapshot()
            self.snapshot()
        self.last_snapshot_ms = self.clock.now_ms()
        if self.scratch is not None:
            self.scratch.release_resident()  # recovery wrote the whole index
        self.replay_progress = 1.0
        self.ready = True

    def close(self, snapshot: bool = True) -> None:
        """Graceful shutdown: final snapshot, flush and stop the WAL, release the lock."""
        if self.wal is None:
            return
        try:
            for t in list(self.by_id.values()):
                if t.segments is not None:
                    t.segments.flush_flags(t)  # an offline reader of the stopped dir sees them
            if snapshot and len(self.registry):
                self.forwarder.forward_all()  # the final drain comes before the final snapshot
                self.snapshot()
        finally:
            self.wal.close()
            self.wal = None
            for t in self.by_id.values():
                if t.segments is not None:
                    t.segments.store.close()
            if self.datadir is not None:
                self.datadir.close()
                self.datadir = None
            self.ready = False

    def snapshot(self) -> int:
        """Take a snapshot now (STORAGE §5.3); returns its id, raises on failure."""
        wal, dd = self.wal, self.datadir
        if wal is None or dd is None:
            raise RuntimeError("engine is not open")
        with self.snapshot_lock:
            return self._snapshot_held()

    def _snapshot_held(self) -> int:
        """`snapshot`, the snapshot lock held by the caller."""
        wal, dd = self.wal, self.datadir
        assert wal is not None and dd is not None
        now = self.clock.now_ms()
        mark, released = snapshots.take(
            self.registry,
            wal,
            self.publisher,
            self.fs,
            dd.meta_dir,
            now,
            self.last_snapshot,
            self.routers,
            self.snapshot_pins,
            self.retain,
        )
        self.last_snapshot = mark
        self.last_snapshot_ms = now
        self.wal_bytes_at_snapshot = wal.bytes_written_total
        self._drop_released(released)
        # in the same section: a Ctrl-C held back until its end never falls between a
        # snapshot that dropped the leases' WAL and their relog (`interrupts`)
        self.queues.relog_leases()
        return mark.id

    def settle_copies(self, routers: Sequence[Router], strict: bool = False) -> None:
        """Before a frame that ends re-derivation through `routers` — a RouterDelete, a
        changed spec, a source's TopicDelete — forward what they owe, then snapshot. Router
        copies are never logged: after a crash, replay re-derives them from the source
        through the router, so once it is gone (or filters differently) the copies made
        since the last snapshot would be lost or made again differently, and API §6.4 says
        already-forwarded records stay in the dest. The caller holds the snapshot lock,
        then the registry and router-table locks, until that frame is logged: nothing is
        forwarded in between."""
        owed = []
        for r in routers:
            if self._persistent_dest(r):
                self.forwarder.advance(r)
                if not r.at_snapshot():
                    owed.append(r)
        if not owed:
            return
        try:
            self._snapshot_held()
        except Exception as e:
            if strict:
                raise internal(f"snapshot before settling router copies failed: {e}") from e
            # Refusing would keep an operator from deleting a topic or a router on a full
            # disk, the very time they must; the loss needs a crash before the next
            # snapshot, and is said here.
            log.error(
                "snapshot before ending router(s) %s failed (%s): copies forwarded since the "
                "last snapshot are lost if the server crashes before the next one",
                ", ".join(r.spec.name for r in owed),
                e,
            )

    def _persistent_dest(self, r: Router) -> bool:
        d = self.registry.get(r.spec.dest)
        return d is not None and d.persistent

    def _drop_released(self, released: frozenset[tuple[int, int]]) -> None:
        """Drop the segments no kept snapshot references any more that are dead by now."""
        firsts: dict[int, list[int]] = {}
        for topic_id, first in released:
            firsts.setdefault(topic_id, []).append(first)
        for topic_id, touched in firsts.items():
            t = self.registry.by_id.get(topic_id)
            if t is None or t.segments is None:
                continue
            with t.lock:
                if not t.deleted:
                    t.segments.drop_dead(t, touched)

    # ---- owners' public faces ----------------------------------------------------------
    @property
    def column_memory(self) -> ColumnMemory:
        """Where topics keep their large index columns (`FrozenSlots`)."""
        return HEAP if self.scratch is None else self.scratch

    @property
    def topics(self) -> Mapping[str, TopicState]:
        return self.registry.by_name

    @property
    def by_id(self) -> Mapping[int, TopicState]:
        return self.registry.by_id

    def add_listener(self, fn: AppendListener) -> None:
        """`fn(topic, head_seq)` runs after records are published, and with head 0 after
        the topic was dropped; it must not block."""
        self.publisher.add_listener(fn)

    def remove_listener(self, fn: AppendListener) -> None:
        self.publisher.remove_listener(fn)

    def drain(self, op: PendingOp) -> None:
        """Wait for `op` and everything ahead of it, applying them in order."""
        self.publisher.drain(op)

    # ---- helpers --------------------------------------------------------------------
    def _new_forwarder(self) -> Forwarder:
        return Forwarder(
            self.registry,
            self.routers,
            self.publisher,
            self.clock,
            self._retained,
            self.options.max_total_bytes,
            self.delivery_priority,
        )

    def _require_wal(self) -> Wal:
        if self.wal is None:
            raise SeglogError(ErrorCode.NOT_READY, "engine is not open", retry_after=1)
        return self.wal

    def _topic(self, name: str) -> TopicState:
        t = self.registry.get(name)
        if t is None:
            raise topic_not_found(name)
        return t

    def new_segments(self, topic_id: int, active_first: int = 1) -> TopicSegments:
        assert self.datadir is not None
        store = SegmentStore(
            self.fs, self.datadir.topics_dir, self.datadir.cold_topics_dir, topic_id
        )
        return TopicSegments(store, self.seal_policy, active_first, self.snapshot_pins)

    def log_durable(self, topic_id: int, ftype: FrameType, body: bytes) -> None:
        """Submit one fsync-gated control frame and wait for it (control-plane ops)."""
        self.log_durable_frames(topic_id, [(ftype, body)])

    def log_durable_frames(self, topic_id: int, frames: list[tuple[FrameType, bytes]]) -> None:
        """Submit control frames as one atomic fsync-gated submission and wait for it."""
        self._log_frames(topic_id, [(topic_id, ft, body) for ft, body in frames])

    def _log_frames(self, shard_topic_id: int, frames: list[tuple[int, FrameType, bytes]]) -> None:
        """One atomic fsync-gated submission to `shard_topic_id`'s shard; each frame keeps
        its own header topic id (0 for topic-agnostic frames)."""
        now = self.clock.now_ms()
        last = len(frames) - 1
        encoded = [
            encode_control(ft, tid, body, now, True, more=i < last)
            for i, (tid, ft, body) in enumerate(frames)
        ]
        commit = self._submit(shard_topic_id, encoded, True)
        try:
            commit.wait()
        except WalError as e:
            raise internal(f"WAL commit failed: {e}") from None

    def retain(self, t: TopicState, now: int) -> PendingOp | None:
        """Under `t.lock`: the retention pass, never waiting (see `retention`). Runs twice
        per write, so a topic without TTL or caps returns at once."""
        if not t.config.has_retention:
            # A cut of an earlier config may still be in flight: logged, so it applies
            # (replay raises the floor too); callers that wait, wait for it as well.
            return t.pending_cut  # type: ignore[no-any-return]
        return retention.retain(t, now, self._submit)

    def _retained(self, t: TopicState, strict: bool = False) -> None:
        """Run a retention pass on `t` and wait for its watermark (callers off the loop).
        `strict` (a read): a watermark that could not be logged fails the caller instead
        of letting it pass the records without their tombstone (SEMANTICS §4.2 step 4)."""
        now = self.clock.now_ms()
        with t.lock:
            op = self.retain(t, now)
            refused = strict and op is None and retention.unlogged(t, now)
        if refused:
            raise internal(f"topic {t.name!r}: the eviction watermark could not be logged")
        if op is not None:
            self.drain(op)
            if strict and op.error is not None:
                raise op.error

    def prepare_read(self, name: str) -> PendingOp | None:
        """Start the retention pass a read of `name` needs, without waiting: an async
        caller awaits the returned op's commit, then reads with `wait=False`."""
        t = self._topic(name)
        if not t.config.has_retention and t.pending_cut is None:
            return None
        with t.lock:
            return self.retain(t, self.clock.now_ms())

    # ---- control plane --------------------------------------------------------------
    def put_topic(self, name: str, config: TopicConfig, if_absent: bool = False) -> PutTopicResult:
        """Create or replace a topic's config (API §2.1); durable before it takes effect.
        `if_absent` (a write's auto-create): an existing topic is left as it is."""
        if not valid_topic_name(name):
            raise invalid(f"invalid topic name {name!r}", {"topic": name})
        dl = config.dead_letter
        if dl is not None:
            if not valid_topic_name(dl):
                raise invalid(f"invalid dead_letter topic name {dl!r}", {"dead_letter": dl})
            if config.type is TopicType.QUEUE and dl == name:
                raise invalid("dead_letter must differ from the queue itself", {"dead_letter": dl})
        existing = self.topics.get(name)
        if not if_absent and existing is not None and self.routers.feeding(name):
            _refuse_type_change(existing, config)  # before a snapshot it would not need
            # A router dest: its copies are re-derived after a crash under the config the
            # log ends with (they have no frames to order them with the change): the
            # copies so far go into a snapshot first, and none lands until the change did.
            with self.snapshot_lock, self.registry.lock, self.routers.lock:
                self.settle_copies(self.routers.feeding(name), strict=True)
                return self._put_topic(name, config, if_absent)
        return self._put_topic(name, config, if_absent)

    def _put_topic(self, name: str, config: TopicConfig, if_absent: bool) -> PutTopicResult:
        body = TopicCreateBody(name, config.to_json()).encode()
        with self.registry.lock:
            t = self.topics.get(name)
            if t is not None and if_absent:
                return PutTopicResult(name, False, t.config)
            if t is not None:
                _refuse_type_change(t, config)
                frames = [(FrameType.TOPIC_CREATE, body)]
                with t.lock:
                    if _logs_head(config.durability) and not _logs_head(t.config.durability):
                        # Seqs handed out before the change were never logged: log the head
                        # with the change, or a crash would reissue them (SEMANTICS §3.2).
                        mark = HeadWatermarkBody(t.reserved).encode()
                        frames.append((FrameType.HEAD_WATERMARK, mark))
                    had_segments = t.segments is not None
                    self.log_durable_frames(t.topic_id, frames)
                    self.apply_config(t, config)
                    if len(frames) > 1:
                        # Only the logged head is known durable, not an earlier in-memory
                        # reservation whose frame may have failed.
                        t.reservation = max(t.reservation, t.reserved)
                        t.reservation_durable = max(t.reservation_durable, t.reserved)
                        t.pre_reservation = None
                    if not had_segments and t.segments is not None:
                        # Files left by a persistent period before a crash describe seqs
                        # the ephemeral topic has reissued since: recovery must not reuse them.
                        t.segments.store.drop_all()
                    cut = self.retain(t, self.clock.now_ms())
                if cut is not None:
                    # A tightened cap or TTL applies at once (SEMANTICS §2.1): its floor
                    # is raised before the answer, not by whatever drains the topic next.
                    self.drain(cut)
                return PutTopicResult(name, False, config)
            cap = self.options.max_topics
            if cap and len(self.topics) >= cap:
                raise throttled(
                    f"topic limit of {cap} reached", {"limit": "max_topics", "max": cap}
                )
            tid = self.registry.allocate_id()
            self.log_durable(tid, FrameType.TOPIC_CREATE, body)
            self.register_topic(
                TopicState(name, tid, config, frozen=FrozenSlots(mem=self.column_memory))
            )
            return PutTopicResult(name, True, config)

    def register_topic(self, t: TopicState) -> None:
        self.attach_segments(t)
        self.registry.add(t)

    def unregister_topic(self, t: TopicState) -> None:
        self.registry.remove(t)

    def apply_config(self, t: TopicState, config: TopicConfig) -> None:
        t.config = config
        self.attach_segments(t)

    def attach_segments(self, t: TopicState) -> None:
        """A persistent topic materializes into segments from its next seq on."""
        if t.persistent and t.segments is None:
            t.segments = self.new_segments(t.topic_id, t.head + 1)

    def drop_topic(self, name: str, if_empty: bool = False) -> DropTopicResult:
        """API §2.4: the topic and every router touching it. Logged as TopicDelete, then one
        RouterDelete per cascaded router (topic-agnostic frames, shard 0), durably before
        anything is removed. When the topic's shard is not shard 0 these are two
        submissions: if the second fails, the topic is already deleted on disk, so it and
        its routers are removed in memory too (a router never outlives its endpoints,
        recovery drops it as well) and the call fails with `internal`."""
        with self.snapshot_lock, self.registry.lock, self.routers.lock:
            t = self.topics.get(name)
            if t is None:
                return DropTopicResult(name, False, [])
            self._retained(t)
            touching = self.routers.touching(name)
            gone = sorted(r.spec.name for r in touching)
            if if_empty:
                _refuse_unless_empty(t)  # before a snapshot it would not need (again below)
            # A source's copies stay in its dests (API §6.4), with nothing left to derive
            # them from after a crash: in a snapshot first.
            self.settle_copies([r for r in touching if r.spec.source == name])
            frames = [(t.topic_id, FrameType.TOPIC_DELETE, TopicDeleteBody(name).encode())]
            frames += [(0, FrameType.ROUTER_DELETE, RouterDeleteBody(r).encode()) for r in gone]
            # The topic lock is held across the durable TopicDelete, so no write can be
            # acked between the emptiness check and the removal.
            failure: SeglogError | None = None
            with t.lock:
                if if_empty:
                    _refuse_unless_empty(t)
                failure = self._log_durable_by_shard(frames)
                self.unregister_topic(t)
                segs = t.segments
            for r in gone:
                self.routers.remove(r)
            self.routers.forget_topic(t.topic_id)
        if segs is not None:
            segs.store.drop_all()
        self.publisher.notify(name, 0)  # live readers learn of the deletion at once
        if failure is not None:
            raise failure
        return DropTopicResult(name, True, gone)

    def _log_durable_by_shard(
        self, frames: list[tuple[int, FrameType, bytes]]
    ) -> SeglogError | None:
        """Log `(topic_id, type, body)` frames durably, in order: consecutive frames bound
        for one WAL shard go as one atomic submission. The first submission failing raises
        (nothing is logged); a later one failing is returned, since earlier ones stand."""
        wal = self._require_wal()
        groups: list[tuple[int, list[tuple[FrameType, bytes]]]] = []
        for tid, ft, body in frames:
            shard = wal.shard_of(tid)
            if groups and wal.shard_of(groups[-1][0]) == shard:
                groups[-1][1].append((ft, body))
            else:
                groups.append((tid, [(ft, body)]))
        for i, (tid, group) in enumerate(groups):
            try:
                self._log_frames(
                    tid, [(0 if ft is FrameType.ROUTER_DELETE else tid, ft, b) for ft, b in group]
                )
            except SeglogError as e:
                if i == 0:
                    raise
                return e
        return None

    # ---- state ----------------------------------------------------------------------
    def _info(self, t: TopicState, now: int) -> TopicInfo:
        cfg = t.config
        return TopicInfo(
            topic=t.name,
            config=cfg,
            head_seq=t.head,
            earliest_seq=t.earliest(),
            count=t.count,
            bytes=t.bytes,
            effective_priority=effective_priority(
                cfg.priority, cfg.auto_priority, t.last_consumed_ms, now
            ),
            last_write_ts=t.last_write_ts,
            last_read_ts=t.last_read_ts,
            queue=self._queue_counts(t, now),
        )

    @staticmethod
    def _queue_counts(t: TopicState, now: int) -> QueueCounts | None:
        """Under `t.lock`: a queue topic's counters (SEMANTICS §10.5)."""
        return queues.counts_of(t, now) if t.config.type is TopicType.QUEUE else None

    def get_topic(self, name: str, touch: bool = True) -> TopicInfo:
        t = self._topic(name)
        self.forwarder.drain_into(name)
        self._retained(t)
        return self.topic_info(name, touch)

    def topic_info(self, name: str, touch: bool = True) -> TopicInfo:
        """`get_topic` without its router drain and retention pass, never waiting: for an
        async caller that ran those itself first (`drain_routers_into` off the loop, the
        op of `prepare_read` awaited), as a read does."""
        t = self._topic(name)
        now = self.clock.now_ms()
        with t.lock:
            if touch:
                t.last_read_ts = now
                t.last_consumed_ms = now
            return self._info(t, now)

    def list_topics(
        self,
        prefix: str = "",
        after: str | None = None,
        limit: int = 100,
        touch: bool = False,
        within: Sequence[str] | None = None,
    ) -> tuple[list[TopicInfo], bool]:
        """A page of topics sorted by name (byte order), strictly after `after`; with
        `within`, only names starting with one of those prefixes (the others are neither
        listed nor touched)."""
        while True:
            page, more = self.topic_page(prefix, after, limit, within)
            for name in page:
                t = self.topics.get(name)
                if t is None:
                    continue
                self.forwarder.drain_into(name)
                self._retained(t)
            infos = self.topic_infos(page, touch)
            if infos or not more:
                return infos, more
            after = page[-1]  # the page's topics were all dropped meanwhile: the next page

    def topic_page(
        self, prefix: str, after: str | None, limit: int, within: Sequence[str] | None = None
    ) -> tuple[list[str], bool]:
        """The names of `list_topics`' page, and whether another name it would list
        follows (so never an empty page with more to come); takes no lock. Only the
        ranges of names the prefixes allow are walked (bisected to), not every name."""
        names = self.registry.sorted_names()
        lo = bisect_right(names, after) if after is not None else 0
        out: list[str] = []
        for start in [prefix] if within is None else narrowed_prefixes(prefix, within):
            first = max(lo, bisect_left(names, start)) if start else lo
            for name in itertools.islice(names, first, None):
                if start and not name.startswith(start):
                    break
                if name in self.topics:
                    if len(out) == limit:
                        return out, True
                    out.append(name)
        return out, False

    def topic_infos(self, names: Sequence[str], touch: bool) -> list[TopicInfo]:
        """`list_topics`' entries for `names` without router drains or retention passes,
        never waiting (the caller ran those first, as `topic_info`'s do); a topic dropped
        meanwhile is left out."""
        now = self.clock.now_ms()
        out: list[TopicInfo] = []
        for name in names:
            t = self.topics.get(name)
            if t is None:
                continue
            with t.lock:
                if touch:
                    t.last_consumed_ms = now
                out.append(self._info(t, now))
        return out

    # ---- writes ---------------------------------------------------------------------
    def write(
        self,
        name: str,
        records: RecordBatch | Sequence[RecordIn],
        *,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: TopicConfig | None = None,
    ) -> WriteResult:
        """Append atomically and wait for the topic's durability class (sync callers)."""
        pw = self.write_begin(
            name,
            records,
            node=node,
            idempotency_key=idempotency_key,
            create=create,
            config=config,
            caller_waits=True,
        )
        assert pw is not None  # may_wait: a missing topic was created
        return self.write_finish(pw)

    def write_begin(
        self,
        name: str,
        records: RecordBatch | Sequence[RecordIn],
        *,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: TopicConfig | None = None,
        may_wait: bool = True,
        caller_waits: bool = False,
    ) -> PendingWrite | None:
        """Validate, resolve/create the topic, dedupe, run retention and admission, reserve
        seqs and submit the frames. Never waits for the data commit; creating the topic
        waits for its durable TopicCreate, so with `may_wait=False` (an event loop) a
        missing topic returns None instead, for the caller to retry in a thread.
        `caller_waits`: this thread blocks on the commit next (`write_finish`), so the
        frames are queued without waking the WAL writer; the wait writes them here when
        the writer is idle (`Commit.wait`), saving two thread hand-offs."""
        recs, size = writes.checked_batch(records, node)
        cfg = config if config is not None else TopicConfig()
        creatable = create if create is not None else cfg.auto_create
        created = False
        t = self.registry.get(name)
        if t is not None and t.config.discard is Discard.REJECT and t.config.has_retention:
            # Admission counts live records: a due eviction must land first, or a full
            # topic keeps refusing writes that its own retention pass would make room for.
            if not may_wait:
                return None
            self._retained(t)
        while t is None or t.deleted:  # absent, or deleted since it was looked up
            if not creatable:
                raise topic_not_found(name)
            if not may_wait:
                return None
            # Only if still absent: a concurrent PUT's config stands (API §3: `config`
            # is used only if this write creates the topic).
            created = self.put_topic(name, cfg, if_absent=True).created
            t = self._topic(name)
        pw = self._submit_write(t, recs, size, idempotency_key, caller_waits, created)
        if pw is not None:
            return pw
        if not creatable:  # deleted since it was looked up
            raise topic_not_found(name)
        return self.write_begin(  # created again: the delete came first
            name,
            records,
            node=node,
            idempotency_key=idempotency_key,
            create=create,
            config=config,
            may_wait=may_wait,
            caller_waits=caller_waits,
        )

    def _submit_write(
        self,
        t: TopicState,
        recs: RecordBatch,
        size: int,
        idempotency_key: str | None,
        caller_waits: bool,
        created: bool,
    ) -> PendingWrite | None:
        """`write_begin`'s part under the topic lock; None if the topic was deleted."""
        now = self.clock.now_ms()
        with t.lock:
            if t.deleted:
                return None
            if idempotency_key is not None:
                entry = writes.dedupe_lookup(t, idempotency_key, now)
                if entry is not None:
                    return PendingWrite(t.name, entry.op, False, True)
            self.retain(t, now)
            writes.admit(t, len(recs), size)
            quota = self.options.max_total_bytes
            if quota:
                writes.check_quota(size, quota, list(self.registry.by_id.values()))
            submit = self._submit_for_waiter if caller_waits else self._submit
            op = writes.submit_append(t, recs, size, now, submit, self._submit)
            if idempotency_key is not None:
                op.idempotency_key = idempotency_key
                t.dedupe[idempotency_key] = DedupeEntry(now, op)
            if op.commit.done() and t.pending and t.pending[0] is op:
                head = self.publisher.apply_ready(t, now)
            else:
                head = None
        if head is not None:
            self.publisher.notify(t.name, head)
        return PendingWrite(t.name, op, created, False)

    def submit_frames(self, topic_id: int, frames: list[bytes]) -> Commit:
        """Queue encoded fsync-flagged frames for `topic_id`'s shard without waiting (best-
        effort records such as Lease events; raises `throttled` when the WAL queue is full)."""
        return self._submit(topic_id, frames, True)

    def _submit_for_waiter(self, topic_id: int, frames: list[bytes], durable: bool) -> Commit:
        """`_submit` for a thread that blocks on the commit next (`write_begin`)."""
        return self._submit(topic_id, frames, durable, wake=False)

    def _submit(
        self, topic_id: int, frames: list[bytes], durable: bool, wake: bool = True
    ) -> Commit:
        """Queue one atomic WAL submission; the one place WAL errors become API errors."""
        wal = self._require_wal()
        try:
            return wal.submit(wal.shard_of(topic_id), frames, durable, wake)
        except WalQueueFull:
            raise throttled("WAL ingest queue is full") from None
        except WalError as e:
            raise internal(f"WAL is not writable: {e}") from None

    def write_finish(self, pw: PendingWrite) -> WriteResult:
        """Wait for the write's commit, publish it in seq order, return the ack."""
        self.drain(pw.op)
        return self.write_publish(pw)

    def write_publish(self, pw: PendingWrite) -> WriteResult:
        """After the commit completed: publish (in order) and build the result."""
        op = pw.op
        if not op.applied:
            self.drain(op)
        if op.error is not None:
            raise op.error
        assert op.write_result is not None
        res = op.write_result
        if pw.deduped:
            return replace(res, created=False, deduped=True)
        if pw.created:
            return replace(res, created=True)
        return res

    # ---- deletes --------------------------------------------------------------------
    def delete_records(
        self,
        name: str,
        before_seq: int | None = None,
        match: Selector | None = None,
        seqs: Sequence[int] = (),
        ack: bool = False,
    ) -> DeleteResult:
        """SEMANTICS §7: permanent, point-in-time delete, ordered with appends, applied in
        memory only after its WAL frame committed per the topic class. `ack`: a queue's
        removal of acked or dead-lettered jobs (`delete_waits`)."""
        if before_seq is None and match is None and not seqs:
            raise invalid("delete needs before_seq and/or match")
        op = None
        if not self.delete_waits(name, ack):
            op = self._delete_begin(name, before_seq, match, seqs, recheck=ack)
            if op is not None:
                self.drain(op)
        if op is None:  # it settles (maybe a router appeared since the check)
            op = self._delete_settled(name, before_seq, match, seqs)
        if op.error is not None:
            raise op.error
        assert op.delete_result is not None
        return op.delete_result

    def delete_begin(
        self, name: str, seqs: Sequence[int], ack: bool = False, may_wait: bool = True
    ) -> PendingOp | None:
        """Submit an explicit-seq delete without waiting (an event loop awaits the op with
        `aio.finish_op`; the result is `op.delete_result`, or `op.error`). Where it must
        settle routers first (`delete_waits`) it is done here, waiting — or, with
        `may_wait=False` (the event loop), not at all: None, for the caller to call again
        off the loop. `ack`: a queue ack (or dead-letter removal)."""
        if not self.delete_waits(name, ack):
            op = self._delete_begin(name, None, None, seqs, recheck=ack)
            if op is not None:
                return op
        if not may_wait:
            return None
        return self._delete_settled(name, None, None, seqs)

    def delete_waits(self, name: str, ack: bool = False) -> bool:
        """Whether a delete on `name` settles routers first (and so may wait for a
        snapshot): when a router reads the topic, or feeds it and the delete promises to
        survive a crash — any delete on an `fsync` topic, and a `disk` topic's deletes
        except queue acks (best-effort there: STORAGE §3.3)."""
        if self.routers.is_source(name):
            return True
        if not self.routers.feeding(name):
            return False
        t = self.registry.get(name)
        durability = t.config.durability if t is not None else Durability.EPHEMERAL
        return durability is Durability.FSYNC or (durability is Durability.DISK and not ack)

    def _delete_settled(
        self, name: str, before_seq: int | None, match: Selector | None, seqs: Sequence[int]
    ) -> PendingOp:
        """A delete on a topic a router reads or feeds (`delete_waits`). Router copies are
        never logged: after a crash they are re-derived from the source (SEMANTICS §8.4),
        walking it as replay left it. A source record forwarded, then deleted, would be
        skipped there — its copy lost and every later copy one seq lower; and a copy deleted
        in its dest would be made again (at other seqs, if anything moved). So the routers'
        copies so far go into a snapshot first when they moved since the last one
        (`settle_copies`), and none forwards until the delete is applied: from that
        snapshot on, re-derivation meets the source as the routers did, and the delete
        replays against the copies it named."""
        with self.snapshot_lock, self.registry.lock, self.routers.lock:
            readers = [r for r in self.routers.all() if r.spec.source == name]
            feeders = [r for r in self.routers.feeding(name) if not r.at_snapshot()]
            owed = feeders if _covered_by_snapshot(readers, seqs) else readers + feeders
            if owed:
                # Strict: a delete refused (nothing changes) beats copies a crash moves.
                self.settle_copies(owed, strict=True)
            op = self._delete_begin(name, before_seq, match, seqs)
            assert op is not None
            self.drain(op)
        return op

    def _delete_begin(
        self,
        name: str,
        before_seq: int | None,
        match: Selector | None,
        seqs: Sequence[int],
        recheck: bool | None = None,
    ) -> PendingOp | None:
        """Submit a delete under the topic lock. `recheck` (an unsettled delete; True for
        a queue ack): None instead if it must settle after all — a router created since
        `delete_waits` said no. Copies only land under this lock, so one created after
        the check here lands above the delete's bound, which never covers it."""
        t = self._topic(name)
        now = self.clock.now_ms()
        with t.lock:
            if recheck is not None and self.delete_waits(name, recheck):
                return None
            self.retain(t, now)
            return deletes.submit_delete(t, before_seq, match, seqs, now, self._submit)

    # ---- reads ----------------------------------------------------------------------
    def read(
        self,
        name: str,
        from_seq: int = 0,
        limit: int = 256,
        nodes: frozenset[str] = frozenset(),
        max_bytes: int = 1_048_576,
        wait: bool = True,
        columnar: bool = False,
        packed: bool = False,
    ) -> ReadResult:
        """SEMANTICS §4.4–§4.5: records after the cursor, at most one tombstone. With
        `wait=False` (the event loop, after awaiting `prepare_read`) a retention watermark
        that became due meanwhile is submitted but not waited for. `columnar` answers the
        same read in `ReadResult.columns` (API §13.1) instead of `records`; with `packed`
        too, a page of sealed records without meta comes as `PackedColumns` (arrays and
        segment spans, for the Arrow form)."""
        t = self._topic(name)
        if wait:
            self.forwarder.drain_into(name)
            self._retained(t, strict=True)
        self.warm_cold(name, from_seq, limit, max_bytes)
        now = self.clock.now_ms()
        pins: list[PinnedSegment] = []
        filtered = bool(nodes) and t.config.dedupe_node
        with t.lock:
            if t.deleted:  # its segment files go once the delete's locks are released
                raise topic_not_found(name)
            if self.retain(t, now) is None and retention.unlogged(t, now):
                raise internal(f"topic {name!r}: the eviction watermark could not be logged")
            picked = (
                column_read.select_columns(t, from_seq, limit, max_bytes, now, filtered, packed)
                if columnar
                else None
            )
            sealed = picked if isinstance(picked, column_read.SealedSelection) else None
            sel = picked if isinstance(picked, column_read.SlotSelection) else None
            recs: list[Record]
            missing: list[Missing]
            if sealed is not None:
                recs, missing = [], []
                nxt, tomb, scanned = sealed.next_from_seq, sealed.tombstone, sealed.scanned
                first_missing, last_missing = int(sealed.seq[0]), int(sealed.seq[-1])
            elif sel is None:
                recs, missing, nxt, tomb, scanned = t.read(from_seq, limit, nodes, max_bytes, now)
                first_missing = missing[0][1] if missing else 0
                last_missing = missing[-1][1] if missing else 0
            else:
                recs, missing = [], []
                nxt, tomb, scanned = sel.next_from_seq, sel.tombstone, sel.scanned
                first_missing, last_missing = sel.missing_span()
            segs = t.segments
            if first_missing and segs is not None:
                pins = segs.pin_range(first_missing, last_missing)
            t.last_read_ts = now
            t.last_consumed_ms = now
            head, earliest = t.head, t.earliest()
        cold = 0
        if sealed is not None:
            assert segs is not None  # `select_sealed` takes none without segments
            filled = column_read.fill_sealed(sealed, segs, pins)
            if filled is None:  # a blob with meta: the page as lists
                return self.read(name, from_seq, limit, nodes, max_bytes, False, True)
            packed_cols, cold = filled
            return ReadResult(name, [], nxt, head, earliest, tomb, scanned, cold, packed_cols)
        if first_missing:
            # Sealed payloads are read with the lock released (the segments are pinned).
            if segs is None:
                raise LookupError(f"seq {first_missing}: payload missing on {name!r}")
            if sel is None:
                cold = payloads.fill(recs, missing, segs.store, pins)
            else:
                cold = column_read.fill_columns(sel.columns, sel.missing, segs.store, pins)
        if sel is not None:
            cols = sel.columns
        elif columnar:
            cols = column_read.columns_of_records(recs)
            recs = []
        else:
            return ReadResult(name, recs, nxt, head, earliest, tomb, scanned, cold)
        return ReadResult(name, [], nxt, head, earliest, tomb, scanned, cold, cols)

    def reads_cold(self, name: str, from_seq: int, limit: int) -> bool:
        """Whether a read of `limit` records after `from_seq` may touch the cold tier (an
        event loop should then run the read in a thread)."""
        segs = self._topic(name).segments
        return segs is not None and segs.has_cold(from_seq + 1, from_seq + max(limit, 1))

    def warm_cold(self, name: str, from_seq: int, limit: int, max_bytes: int) -> int:
        """Page in the cold-tier bytes a read would need, without holding the topic lock
        (STORAGE §4.5: a slow cold disk must not stall writers or live readers)."""
        segs = self._topic(name).segments
        if segs is None:
            return 0
        return int(segs.warm_cold(from_seq + 1, from_seq + max(limit, 1), max_bytes))

    def stats(self) -> EngineStats:
        rows: list[TopicStats] = []
        now = self.clock.now_ms()
        for name in self.registry.sorted_names():
            t = self.registry.get(name)
            if t is None:
                continue
            with t.lock:
                rows.append(
                    TopicStats(
                        name,
                        t.config.durability,
                        t.config.type is TopicType.QUEUE,
                        t.head,
                        t.earliest(),
                        t.count,
                        t.bytes,
                        self._queue_counts(t, now),
                    )
                )
        wal = self.wal.metrics() if self.wal is not None else WalMetrics()
        return EngineStats(
            tuple(rows),
            self.ready,
            self.replay_progress,
            wal,
            self.torn_tails_total,
            routers=len(self.routers),
        )

    # ---- routers (API §6) ---------------------------------------------------------------
    def _router_control(self) -> RouterControl:
        return RouterControl(
            self.registry,
            self.routers,
            self.forwarder,
            self.log_durable,
            self._create_default_topic,
            self.snapshot_lock,
            self.settle_copies,
            self.options.max_routers,
            self.options.max_topics,
        )

    def _create_default_topic(self, name: str) -> None:
        # Under the snapshot lock (a router's missing endpoint): must never settle.
        self.put_topic(name, TopicConfig(), if_absent=True)

    def put_router(self, spec: RouterSpec) -> PutRouterResult:
        return self._router_control().put(spec)

    def delete_router(self, name: str) -> DropRouterResult:
        return self._router_control().delete(name)

    def router_spec(self, name: str) -> RouterSpec:
        """The definition alone (no forwarding): for checks before `get_router`."""
        return self._router_control().spec(name)

    def find_router(self, name: str) -> RouterSpec | None:
        r = self.routers.get(name)
        return None if r is None else r.spec

    def get_router(self, name: str) -> RouterInfo:
        return self._router_control().state(name)

    def list_routers(
        self,
        prefix: str = "",
        source: str | None = None,
        dest: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> tuple[list[RouterInfo], bool]:
        return self._router_control().list(prefix, source, dest, after, limit)

    def routers_pending_into(self, name: str) -> bool:
        """Lock-free: whether a read of `name` has forwarding to do first."""
        return self.forwarder.pending_into(name)

    def drain_routers_into(self, name: str) -> None:
        """Read-your-writes (SEMANTICS §8.5) for a reader that reads without waiting."""
        self.forwarder.drain_into(name)

    def exists(self, name: str) -> bool:
        return name in self.registry.by_name

    def head_of(self, name: str) -> int:
        return self._topic(name).head

    def delivery_priority(self, name: str, now_ms: int) -> int:
        """The effective priority that orders `name`'s delivery work (SEMANTICS §11),
        without aging (the scheduler adds it) and without the topic lock (plain reads of
        config and recency; a stale value only reorders work)."""
        t = self.registry.get(name)
        if t is None:
            return 0
        cfg = t.config
        return effective_priority(cfg.priority, cfg.auto_priority, t.last_consumed_ms, now_ms)

    def read_version(self, name: str) -> ReadVersion | None:
        """What a read of `name` sees, as a key for sharing one read among many readers at
        the same cursor (live delivery): topic id, head, live count, earliest seq and
        whether the node filter applies (`dedupe_node`). A publish moves the head, a delete
        the count, an eviction the earliest seq, so equal keys mean equal reads — except
        under a TTL, where time alone hides records: None. A read made after taking the
        key is at least as new as the key."""
        t = self.registry.get(name)
        if t is None or t.config.ttl_ms:
            return None
        with t.lock:
            return (t.topic_id, t.head, t.count, t.earliest(), t.config.dedupe_node)

    def mark_read(self, name: str) -> None:
        """A read answered without the engine (a shared live-delivery batch) still marks
        the topic consumed and read (SEMANTICS §4.5, §11)."""
        t = self.registry.get(name)
        if t is not None:
            now = self.clock.now_ms()
            if t.last_read_ts == now:  # a fan-out round marks it once, not per reader
                return
            with t.lock:
                t.last_read_ts = now
                t.last_consumed_ms = now

    def total_bytes(self) -> int:
        return sum(t.bytes for t in list(self.topics.values()))


def _logs_head(d: Durability) -> bool:
    """Classes whose replay must never reissue an acked seq after a crash."""
    return d in (Durability.DISK, Durability.FSYNC)


def narrowed_prefixes(prefix: str, within: Sequence[str]) -> list[str]:
    """The names starting with `prefix` and with one of `within`, as prefixes whose ranges
    of names are disjoint, ascending (none extends another kept one)."""
    both = sorted(
        {p for p in within if p.startswith(prefix)}
        | {prefix for p in within if prefix.startswith(p)}
    )
    kept: list[str] = []
    for p in both:
        if not (kept and p.startswith(kept[-1])):  # within the last kept range already
            kept.append(p)
    return kept


def _refuse_unless_empty(t: TopicState) -> None:
    held = t.count + t.pending_count
    if held > 0:
        raise SeglogError(
            ErrorCode.TOPIC_NOT_EMPTY,
            f"topic {t.name!r} holds {held} records",
            {"topic": t.name, "count": held},
        )


def _covered_by_snapshot(readers: Sequence[Router], seqs: Sequence[int]) -> bool:
    """Whether every router reading a topic had already walked the explicit `seqs` by the
    newest snapshot: re-derivation starts past them, so deleting them moves no copy (a
    queue draining a backlog acks such jobs; a selector delete is never covered)."""
    if not seqs:
        return False
    top = max(seqs)
    return all(r.snapshotted is not None and top <= r.snapshotted[1] for r in readers)


def _refuse_type_change(t: TopicState, config: TopicConfig) -> None:
    if t.config.type is not config.type:
        raise SeglogError(
            ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
            f"topic {t.name!r} is a {t.config.type.value}; its type cannot change",
            {
                "topic": t.name,
                "existing_type": t.config.type.value,
                "requested_type": config.type.value,
            },
        )
