"""Where recovery's replay can take WAL frames a run at a time. Pure.

A run is a maximal span of consecutive Append frames of one topic whose seqs go up by one.
Recovery decides what the first frame of a run does (skip, holes, cap, start a column
run) frame by frame; every later frame of the run can then only extend what the first
started, so it is taken as a column slice.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seglog.core.frames import FrameType

_APPEND = int(FrameType.APPEND)
_U64_MAX = np.uint64(2**64 - 1)


def append_runs(
    ftypes: Sequence[int], topic_ids: Sequence[int], seqs: Sequence[int]
) -> list[tuple[int, int]]:
    """The index spans `[a, b)` cutting frames `0 … n-1` (given as columns) into runs: a
    span longer than one holds only Append frames of one topic with seqs `s, s+1, …`;
    every other frame is a span of its own."""
    n = len(ftypes)
    if n < 2:
        return [(0, n)] if n else []
    ft = np.fromiter(ftypes, np.int64, n)
    tid = np.fromiter(topic_ids, np.uint64, n)
    seq = np.fromiter(seqs, np.uint64, n)
    is_append = ft == _APPEND
    # u64 steps wrap: the one wrapped step of 1 (from the largest u64 to 0) is not a join.
    steps_up = (seq[1:] - seq[:-1] == 1) & (seq[:-1] != _U64_MAX)
    joins = is_append[1:] & is_append[:-1] & (tid[1:] == tid[:-1]) & steps_up
    cuts = (np.flatnonzero(~joins) + 1).tolist()
    bounds = [0, *cuts, n]
    return [(bounds[k], bounds[k + 1]) for k in range(len(bounds) - 1)]
