"""Arrow string columns gathered from spans of buffers (pyarrow; shared by the server's
Arrow diff and the Spark offline reader): the spans of sealed segment bytes that hold
records' texts become one compact column, each text copied once straight into the
column's buffer (`spans_into`, C), no Python object per span."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from seglog.core.native import spans_into

Ints = npt.NDArray[np.int64]
_INT32_MAX = 2**31 - 1


def texts_array(runs: Sequence[tuple[Any, Ints, Ints]]) -> pa.Array:
    """The string column of the spans `buf[starts[k]:ends[k]]` of each run
    `(buf, starts, ends)`, run after run (the texts are valid UTF-8 by the caller's
    checks; at most 2 GiB in all: callers cut their pages and batches far below)."""
    lengths = [ends - starts for _, starts, ends in runs]
    n = sum(len(x) for x in lengths)
    total = int(sum(int(x.sum()) for x in lengths))
    if total > _INT32_MAX:
        raise ValueError(f"{total} bytes of text do not fit one Arrow string column")
    offsets = np.zeros(n + 1, np.int32)
    if n:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    values = np.empty(total, np.uint8)
    at = 0
    for buf, starts, ends in runs:
        at = spans_into(buf, starts, ends, values, at)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(values)]
    )
