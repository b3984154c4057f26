"""Cold-tier relocation of sealed segments (STORAGE §4.5).

A move is copy → make durable → re-apply late delete flags → unlink the hot copy. Every
intermediate state is valid: until the hot unlink is durable, `SegmentStore.list()` prefers
the hot copy (interrupted move), and the cold pair is installed atomically like a seal.

Delete flags race the copy: a flag set on the hot file after it was read is re-applied to the
cold copy while holding `SegmentStore.flag_lock`, which also guards `mark_deleted`; a flag set
after the hot unlink finds the hot file gone and lands in the cold copy (`resolve`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from seglog.core.segment_format import DEL_FLAG, idx_view
from seglog.storage.fs import Fs, write_all_at
from seglog.storage.segment import SegmentInfo, SegmentStore, flag_positions

_DELETED = bytes([DEL_FLAG])


def plan_relocation(
    sealed: list[SegmentInfo], retain_segments: int, retain_bytes: int
) -> list[SegmentInfo]:
    """Hot sealed segments beyond the hot-retention bound, oldest first.

    Keeps the newest `retain_segments` and, if `retain_bytes > 0`, only as many of the newest
    as fit in `retain_bytes`; the stricter bound wins. `retain_segments <= 0` moves all."""
    hot = sorted((s for s in sealed if s.tier == "hot"), key=lambda s: s.first_seq)
    keep = max(retain_segments, 0)
    if retain_bytes > 0:
        fit, total = 0, 0
        for s in reversed(hot):
            total += s.data_bytes
            if total > retain_bytes:
                break
            fit += 1
        keep = min(keep, fit)
    return hot[: len(hot) - keep] if keep < len(hot) else []


def _flag_bytes(
    fs: Fs, info: SegmentInfo, positions: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint8]:
    """The current del_flag bytes of a (live, mutable) `.data` file at `positions`."""
    buf = fs.map_file(info.data_path)
    try:
        return np.fromiter((buf[p] for p in positions.tolist()), np.uint8, len(positions))
    finally:
        if not isinstance(buf, bytes):
            buf.close()


def relocate(store: SegmentStore, info: SegmentInfo) -> SegmentInfo:
    """Move a hot sealed segment to the cold tier; returns its cold `SegmentInfo`.

    Reads the whole segment into memory (bounded by the 64 MiB seal trigger). A cold segment
    is returned unchanged."""
    if info.tier == "cold":
        return info
    fs = store.fs
    data = fs.read_file(info.data_path)
    idx = fs.read_file(info.idx_path)
    cold = store.install("cold", info.first_seq, data, idx)
    positions = flag_positions(idx_view(idx))
    copied = np.frombuffer(data, np.uint8)[positions]
    with store.flag_lock:
        late = positions[(_flag_bytes(fs, info, positions) == DEL_FLAG) & (copied != DEL_FLAG)]
        if late.size:
            f = fs.open(cold.data_path)
            try:
                for pos in late.tolist():
                    write_all_at(f, _DELETED, pos)
                f.sync()
            finally:
                f.close()
        store.unlink_relocated(info)
    return cold
