"""The sharded write-ahead log (STORAGE §3.4, §5.3): the facade the engine writes through.

`Wal` owns one `WalShard` (writer thread) per shard directory, maps topics to shards and
forwards each submission to its shard; group commit and failure handling are the shard's
(`seglog.storage.wal_shard`). For snapshots it spans all shards: `checkpoint` writes a
durable mark on every one, `delete_absorbed` removes the files a snapshot has absorbed.
Recovery reads WAL files through `seglog.storage.wal_files`, never through a `Wal`.

Threads: `Wal`'s methods may be called from any thread. All file access goes through the
`Fs` seam.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import xxhash

from seglog.core.frame_bodies import CheckpointMarkBody
from seglog.core.frames import FrameType, encode_control
from seglog.storage.fs import Fs
from seglog.storage.wal_commit import Commit, WalError, WalQueueFull
from seglog.storage.wal_files import (
    FILE_SIZE,
    Position,
    discover_groups,
    file_valid_end,
    group_key,
    shard_dir,
)
from seglog.storage.wal_metrics import WalMetrics
from seglog.storage.wal_shard import QUEUE_SIZE, WalShard

log = logging.getLogger("seglog.wal")


class Wal:
    """The sharded WAL. `open` starts one writer per shard; `submit` never blocks."""

    def __init__(
        self,
        fs: Fs,
        wal_dir: Path,
        shards: int,
        *,
        file_size: int = FILE_SIZE,
        queue_size: int = QUEUE_SIZE,
        idle_sync: bool = True,
        inline_buffered: bool = True,
    ) -> None:
        self.fs = fs
        self.wal_dir = wal_dir
        self.shards = max(1, shards)
        self.file_size = file_size
        self.queue_size = queue_size
        self.idle_sync = idle_sync  # tests turn the timing-dependent idle fsync off
        # Buffered submissions may be written by their caller when the writer is idle
        # (`WalShard.submit`); off, every submission goes through the writer thread.
        self.inline_buffered = inline_buffered
        self._shards: list[WalShard] = []
        self._open = False

    def group_dir(self, shard: int) -> Path:
        return shard_dir(self.wal_dir, shard, self.shards)

    def open(self, tails: dict[str, Position] | None = None) -> None:
        """Start the writers, each appending after its group's valid tail (recovery has
        sealed torn tails — `walscan.seal_torn_tails` — so nothing past it parses as a frame). A group without files gets a fresh,
        durable `wal-0000000000000001.log`; with files but no tail, its tail is found here."""
        tails = tails or {}
        fs = self.fs
        fs.mkdir(self.wal_dir)
        fs.fsync_dir(self.wal_dir.parent)
        shards: list[WalShard] = []
        try:
            for i in range(self.shards):
                d = self.group_dir(i)
                if d != self.wal_dir:
                    fs.mkdir(d)
                    fs.fsync_dir(self.wal_dir)
                tail = tails.get(group_key(i, self.shards))
                shards.append(
                    WalShard(
                        fs,
                        d,
                        self.file_size,
                        self.queue_size,
                        tail,
                        self.idle_sync,
                        self.inline_buffered,
                    )
                )
        except BaseException:
            for s in shards:
                with contextlib.suppress(Exception):
                    s.file.close()
            raise
        for s in shards:
            s.thread.start()
        self._shards = shards
        self._open = True

    def shard_of(self, topic_id: int) -> int:
        if self.shards == 1 or topic_id == 0:
            return 0
        return int(xxhash.xxh3_64_intdigest(topic_id.to_bytes(8, "little")) % self.shards)

    def submit(self, shard: int, frames: list[bytes], durable: bool, wake: bool = True) -> Commit:
        """Queue one atomic submission, or write it here when it is buffered and the shard
        is idle (`WalShard.submit`; the handle is then done on return). Raises
        `WalQueueFull` (nothing written), `WalReadOnly`, or `WalError` once closed; an
        inline write that dies re-raises what killed it. `wake=False`: the caller will
        block on the commit, and writes it itself if the writer is idle then."""
        if not self._open:
            raise WalError("WAL is not open")
        return self._shards[shard].submit(frames, durable, wake)

    def checkpoint(self, ts_ms: int) -> dict[str, Position]:
        """§5.3 steps 1–2: a durable CheckpointMark on every shard; returns each group's
        position right after its mark. Groups on disk that the current layout does not use
        (an earlier shard count) get the end of their valid log: everything in them was
        replayed before the writers opened, so the snapshot absorbs all of it."""
        frame = encode_control(
            FrameType.CHECKPOINT_MARK, 0, CheckpointMarkBody(0).encode(), ts_ms, True
        )
        commits: list[tuple[str, Commit]] = []
        for i in range(self.shards):
            try:
                commits.append((group_key(i, self.shards), self.submit(i, [frame], True)))
            except WalQueueFull as e:
                raise WalError(f"checkpoint not queued: {e}") from e
        out: dict[str, Position] = {}
        for key, c in commits:
            c.wait()
            assert c.position is not None
            out[key] = c.position
        for g in discover_groups(self.fs, self.wal_dir):
            if g.key not in out and g.files:
                idx, path = g.files[-1]
                out[g.key] = (idx, file_valid_end(self.fs, path))
        return out

    def delete_absorbed(self, needed: dict[str, Position] | None) -> None:
        """§5.3 step 7, given `needed`: the positions the older kept snapshot replays from
        (None: there is no older snapshot, so a fallback replays everything and every file
        stays). Per group, files numbered below its position go; a group the current layout
        does not use goes whole once that position is at its end; a group the older
        snapshot does not know is kept whole (it replays it from the start), and so is a
        group it knows from an earlier period of the same key only (its position is past
        every file). Best effort: a failure is logged and retried by the next snapshot."""
        if needed is None:
            return
        current = {group_key(i, self.shards) for i in range(self.shards)}
        fs = self.fs
        for g in discover_groups(fs, self.wal_dir):
            pos = needed.get(g.key)
            if pos is None or not g.files:
                continue
            try:
                last_idx, last_path = g.files[-1]
                if g.key not in current and pos >= (last_idx, file_valid_end(fs, last_path)):
                    for _idx, path in g.files:
                        fs.unlink(path)
                    if g.key:
                        fs.rmtree(g.dir)
                    fs.fsync_dir(self.wal_dir)
                    continue
                if pos[0] > last_idx:
                    # A position past every file of a group this layout writes names an
                    # earlier period's files under the same key (a shard count changed
                    # and back): its numbering restarted, so nothing here is absorbed by
                    # it — deleting by it took the live writer's file.
                    continue
                doomed = [p for idx, p in g.files if idx < pos[0]]
                for path in doomed:
                    fs.unlink(path)
                if doomed:
                    fs.fsync_dir(g.dir)
            except OSError as e:
                log.warning("could not delete absorbed WAL files in %s: %s", g.dir, e)

    @property
    def bytes_written_total(self) -> int:
        return sum(s.m.bytes_written for s in self._shards)

    def set_gather_window(self, seconds: float) -> None:
        """Widen (or, with 0, close) every shard's group-commit gathering window."""
        for s in self._shards:
            s.gather_s = max(0.0, seconds)

    def metrics(self) -> WalMetrics:
        out = WalMetrics()
        for s in self._shards:
            s.add_metrics_to(out)
        return out

    def close(self) -> None:
        """Stop accepting, commit everything accepted, fsync, join the writers."""
        self._open = False
        for s in self._shards:
            s.stop()
        for s in self._shards:
            s.thread.join()
