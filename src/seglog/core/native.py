"""The optional C speedups (`native/speedups.c`, built by `pip install`) and their
pure-Python twins. Pure.

Each C function has a twin here or beside its caller that defines what it computes; the
callers use `speedups` when it is loaded and the twin otherwise, and
`tests/core/test_native.py` holds the two equal. `SEGLOG_PURE_PYTHON=1` in the environment
turns the C module off (it is read once, at import).
"""

from __future__ import annotations

import os
from types import ModuleType

import numpy as np
import numpy.typing as npt
import orjson
import xxhash

PURE_ENV = "SEGLOG_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None
    try:
        from seglog import _speedups  # type: ignore[attr-defined]
    except ImportError:  # no C compiler at install time: the twins serve
        return None
    return _speedups  # type: ignore[no-any-return]


speedups: ModuleType | None = _load()

Ints = npt.NDArray[np.int64]
Sums = npt.NDArray[np.uint64]


def xxh3_slices_py(buf: bytes, starts: Ints, stops: Ints) -> Sums:
    """XXH3-64 (seed 0) of each `buf[starts[i]:stops[i]]`; the C version's twin."""
    n = len(starts)
    if n and ((starts < 0).any() or (starts > stops).any() or (stops > len(buf)).any()):
        raise ValueError("a slice is outside the buffer")
    xxh3 = xxhash.xxh3_64_intdigest
    if n and int((stops - starts).max()) > 4096:  # a view beats a copy of a large frame
        with memoryview(buf) as mv:
            sums = [xxh3(mv[a:b]) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
    else:
        sums = [xxh3(buf[a:b]) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
    return np.fromiter(sums, np.uint64, n)


def xxh3_slices(buf: bytes, starts: Ints, stops: Ints) -> Sums:
    """XXH3-64 (seed 0) of each `buf[starts[i]:stops[i]]`, in one C call when the speedups
    are built. Raises ValueError if a slice is out of bounds or reversed."""
    if speedups is None:
        return xxh3_slices_py(buf, starts, stops)
    a = np.ascontiguousarray(starts, np.int64)
    b = np.ascontiguousarray(stops, np.int64)
    out = np.empty(len(a), np.uint64)
    speedups.xxh3_slices(buf, a, b, out)
    return out


def byte_slices_py(buf: bytes, starts: Ints, stops: Ints) -> list[bytes]:
    """Each `bytes(buf[starts[i]:stops[i]])`; the C version's twin."""
    if len(starts) and ((starts < 0).any() or (starts > stops).any() or (stops > len(buf)).any()):
        raise ValueError("a slice is outside the buffer")
    return [bytes(buf[a:b]) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]


def byte_slices(buf: bytes, starts: Ints, stops: Ints) -> list[bytes]:
    """Each `bytes(buf[starts[i]:stops[i]])`, in one C call when the speedups are built.
    Raises ValueError if a slice is out of bounds or reversed."""
    if speedups is None:
        return byte_slices_py(buf, starts, stops)
    pieces: list[bytes] = speedups.byte_slices(
        buf, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(stops, np.int64)
    )
    return pieces


def spans_into_py(
    buf: bytes, starts: Ints, stops: Ints, out: npt.NDArray[np.uint8], at: int
) -> int:
    """Copy each `buf[starts[i]:stops[i]]`, one after another, into `out` from `at`;
    returns the offset past the last byte. The C version's twin."""
    if any(np.may_share_memory(out, x) for x in (np.frombuffer(buf, np.uint8), starts, stops)):
        raise ValueError("out must not overlap buf, starts or stops")
    pieces = byte_slices_py(buf, starts, stops)
    total = sum(map(len, pieces))
    if at < 0 or at > len(out) or total > len(out) - at:
        raise ValueError(f"{total} bytes do not fit in {len(out)} bytes from {at}")
    joined = b"".join(pieces)
    out[at : at + total] = np.frombuffer(joined, np.uint8)
    return at + total


def spans_into(buf: bytes, starts: Ints, stops: Ints, out: npt.NDArray[np.uint8], at: int) -> int:
    """Copy each `buf[starts[i]:stops[i]]`, one after another, into `out` from byte `at`
    and return the offset past the last byte written: one gather of many spans into one
    buffer, in one C call when the speedups are built. Raises ValueError if a slice is out
    of bounds or reversed, the spans do not fit, or `out` overlaps `buf`, `starts` or
    `stops` (nothing is written then)."""
    if speedups is None:
        return spans_into_py(buf, starts, stops, out, at)
    end: int = speedups.spans_into(
        buf, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(stops, np.int64), out, at
    )
    return end


def gather_rows_py(buf: bytes, offsets: Ints, width: int) -> bytes:
    """The `width` bytes at each of `offsets`, one after another; the C version's twin."""
    if width < 0 or (len(offsets) and ((offsets < 0).any() or (offsets > len(buf) - width).any())):
        raise ValueError("a row is outside the buffer")
    whole = np.frombuffer(buf, np.uint8)
    return whole[offsets[:, None] + np.arange(width)].tobytes()  # type: ignore[no-any-return]


def gather_rows(buf: bytes, offsets: Ints, width: int) -> bytes:
    """The `width` bytes at each of `offsets`, one after another (numpy's
    `buf[offsets[:, None] + arange(width)]` without its index array), in one C call when
    the speedups are built. Raises ValueError if a row is outside `buf`."""
    if speedups is None:
        return gather_rows_py(buf, offsets, width)
    rows: bytes = speedups.gather_rows(buf, np.ascontiguousarray(offsets, np.int64), width)
    return rows


def json_unproven_py(texts: list[bytes]) -> list[int]:
    """Indexes of the `texts` that are not canonical JSON: exactly the text
    `orjson.dumps(orjson.loads(t))` gives back. (Whether an integer is within 64 bits is
    the caller's check.) The exact definition the C scan approximates from the safe side."""
    out = []
    for i, t in enumerate(texts):
        try:
            if orjson.dumps(orjson.loads(t)) == t:
                continue
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            pass
        out.append(i)
    return out


def json_unproven(texts: list[bytes]) -> list[int]:
    """Indexes of the `texts` a check must still prove canonical (`json_unproven_py`'s
    sense). With the speedups, one C scan proves the common subset (no floats, no `\\u`
    escapes, integers of at most 18 digits, ...) and lists only the rest, so its list
    holds `json_unproven_py`'s; without them every index is listed, for the caller's own
    exact check. With the speedups, raises TypeError for a text that is not bytes."""
    if speedups is None:
        return list(range(len(texts)))
    unproven: list[int] = speedups.json_unproven(texts)
    return unproven


def json_unproven_spans_py(buf: bytes, starts: Ints, stops: Ints) -> list[int]:
    """`json_unproven_py` of each `buf[starts[i]:stops[i]]`; the C version's twin (exact,
    so it lists a subset of what the C scan lists)."""
    return json_unproven_py(byte_slices_py(buf, starts, stops))


def json_unproven_spans(buf: bytes, starts: Ints, stops: Ints) -> list[int]:
    """`json_unproven` of each `buf[starts[i]:stops[i]]` (an Arrow string column's values
    and offsets), without copying the texts when the speedups are built. Raises ValueError
    if a span is out of bounds or reversed."""
    if speedups is None:
        if len(stops) != len(starts):
            raise ValueError("starts and stops must be of one length")
        if len(starts) and (
            (starts < 0).any() or (starts > stops).any() or (stops > len(buf)).any()
        ):
            raise ValueError("a span is outside the buffer")
        return list(range(len(starts)))
    unproven: list[int] = speedups.json_unproven_spans(
        buf, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(stops, np.int64)
    )
    return unproven


def table_codes_py(
    labels: list[str | None], table: dict[str | None, int], out: npt.NDArray[np.uint32]
) -> int:
    """`out[i] = table[labels[i]]` until a label the table lacks: its index, or -1 when
    there is none; the C version's twin. `out` is a uint32 column of `len(labels)`."""
    if len(out) != len(labels):
        raise ValueError("out must be a uint32 column of len(labels)")
    for i, x in enumerate(labels):
        code = table.get(x)
        if code is None:
            return i
        out[i] = code
    return -1


def table_codes(
    labels: list[str | None], table: dict[str | None, int], out: npt.NDArray[np.uint32]
) -> int:
    """`table_codes_py`, in one C call when the speedups are built (a label that repeats
    the previous one costs no lookup)."""
    if speedups is None:
        return table_codes_py(labels, table, out)
    miss: int = speedups.table_codes(labels, table, out)
    return miss


def int64_column_py(values: list[int], out: Ints) -> None:
    """`out[:] = values` for a list of ints; the C version's twin. `out` is an int64 column
    of `len(values)`; an item outside int64 raises OverflowError, one that is not an int
    TypeError."""
    if len(out) != len(values):
        raise ValueError("out must be an int64 column of len(values)")
    for i, x in enumerate(values):
        if not isinstance(x, int):
            raise TypeError(f"item {i} is not an int")
    out[:] = np.asarray(values, np.int64)


def int64_column(values: list[int]) -> Ints:
    """`values` as a new int64 array, in one C call when the speedups are built (numpy's
    own conversion of a list discovers each item's type: ~30 ns per item here)."""
    out = np.empty(len(values), np.int64)
    if speedups is None:
        int64_column_py(values, out)
    else:
        speedups.int64_column(values, out)
    return out
