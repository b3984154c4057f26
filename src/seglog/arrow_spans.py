"""Arrow arrays gathered from spans of one buffer (pyarrow; shared by the server's Arrow
diff and the Spark offline reader): the spans of sealed segment bytes that hold records'
texts become one compact column with a single C++ gather, no Python object per span."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

Ints = npt.NDArray[np.int64]
_INT32_MAX = 2**31 - 1


def spans_array(buf: pa.Buffer, starts: Ints, ends: Ints, rows: Ints) -> pa.Array:
    """Binary array whose element `k` is `buf[starts[rows[k]] : ends[rows[k]]]`; the spans
    must be ascending and disjoint (`starts[i] <= ends[i] <= starts[i + 1]`)."""
    n = len(starts)
    if n == 0 or len(rows) == 0:
        return pa.array([], pa.binary())
    wide = int(ends[-1]) > _INT32_MAX
    offsets = np.empty(2 * n, np.int64 if wide else np.int32)
    offsets[0::2] = starts
    offsets[1::2] = ends
    kind = pa.large_binary() if wide else pa.binary()
    whole = pa.Array.from_buffers(kind, 2 * n - 1, [None, pa.py_buffer(offsets), buf])
    picked = whole.take(pa.array(rows.astype(np.int64) * 2))
    return picked.cast(pa.binary()) if wide else picked
