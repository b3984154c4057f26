"""The C speedups (`native/speedups.c`) against their pure-Python twins, which define them:
equal results on random and corrupted input, the same errors, and the switch that turns
them off. Without a C compiler the module is not built; CI sets SEGLOG_REQUIRE_NATIVE=1,
so there a missing build fails instead of skipping."""

from __future__ import annotations

import contextlib
import mmap
import os
import subprocess
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import msgspec
import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.core import append_frames, frame_scanner, native, segment_format, segment_run
from seglog.core.frame_scanner import _scan_chunk_c, _scan_chunk_py, scan_frames
from seglog.core.frames import FLAG_MORE, FLAG_NODE, FLAG_TAG, encode_frame
from seglog.core.payload_blob import decode_blob
from tests.core.test_framing import _frame_bytes, frames

if native.speedups is None and os.environ.get("SEGLOG_REQUIRE_NATIVE") == "1":
    pytest.fail("seglog._speedups is not built (SEGLOG_REQUIRE_NATIVE=1)", pytrace=False)


def _c() -> ModuleType:
    """The C module, in tests marked `needs_native`."""
    assert native.speedups is not None
    return native.speedups


def _append_outcomes(case: tuple) -> list[tuple[str, list[bytes]]]:
    """`(outcome, out)` of the C `encode_appends` and of its twin on `case`."""
    outcomes = []
    for fn in (_c().encode_appends, append_frames.encode_appends_py):
        out: list[bytes] = [b"keep"]
        try:
            fn(*case[:3], *_columns(case[3]), True, out)
            outcomes.append(("ok", out))
        except (ValueError, TypeError) as e:
            outcomes.append((type(e).__name__, out))
    return outcomes


def _columns(records: list[_Rec]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """The four columns of a `RecordBatch` holding `records`."""
    return (
        [r.data_json for r in records],
        [r.meta_json for r in records],
        [r.node for r in records],
        [r.tag for r in records],
    )


needs_native = pytest.mark.skipif(
    native.speedups is None,
    reason="seglog._speedups not loaded (not built, or SEGLOG_PURE_PYTHON set)",
)


# ---- xxh3_slices -------------------------------------------------------------------------


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    buf=st.binary(max_size=6000),
    cuts=st.lists(st.tuples(st.integers(0, 6000), st.integers(0, 6000)), max_size=40),
)
def test_xxh3_slices_equals_the_twin_and_xxhash(buf: bytes, cuts: list[tuple[int, int]]) -> None:
    n = len(buf)
    pairs = [(min(a, b) % (n + 1), max(a, b) % (n + 1)) for a, b in cuts]
    pairs = [(min(a, b), max(a, b)) for a, b in pairs]
    starts = np.array([a for a, _ in pairs], np.int64)
    stops = np.array([b for _, b in pairs], np.int64)
    got = native.xxh3_slices(buf, starts, stops)
    assert got.dtype == np.uint64
    assert got.tolist() == [xxhash.xxh3_64_intdigest(buf[a:b]) for a, b in pairs]
    assert got.tolist() == native.xxh3_slices_py(buf, starts, stops).tolist()


@needs_native
@settings(max_examples=200, deadline=None)
@given(
    buf=st.binary(max_size=600),
    cuts=st.lists(st.tuples(st.integers(0, 600), st.integers(0, 600)), max_size=40),
)
def test_byte_slices_equals_the_twin(buf: bytes, cuts: list[tuple[int, int]]) -> None:
    n = len(buf)
    pairs = sorted((min(a, b) % (n + 1), max(a, b) % (n + 1)) for a, b in cuts)
    pairs = [(min(a, b), max(a, b)) for a, b in pairs]
    starts = np.array([a for a, _ in pairs], np.int64)
    stops = np.array([b for _, b in pairs], np.int64)
    got = native.byte_slices(buf, starts, stops)
    assert got == [buf[a:b] for a, b in pairs] == native.byte_slices_py(buf, starts, stops)
    assert all(type(x) is bytes for x in got)


@pytest.mark.parametrize("impl", ["c", "py", "slices-c", "slices-py"])
@pytest.mark.parametrize("bad", [(-1, 3), (4, 3), (0, 11), (11, 11)])
def test_slices_outside_the_buffer_are_rejected(impl: str, bad: tuple[int, int]) -> None:
    if impl.endswith("c") and native.speedups is None:
        pytest.skip("seglog._speedups not built")
    fn = {
        "c": native.xxh3_slices,
        "py": native.xxh3_slices_py,
        "slices-c": native.byte_slices,
        "slices-py": native.byte_slices_py,
    }[impl]
    starts = np.array([0, bad[0]], np.int64)
    stops = np.array([2, bad[1]], np.int64)
    with pytest.raises(ValueError):
        fn(b"0123456789", starts, stops)


@needs_native
def test_xxh3_slices_checks_its_column_lengths() -> None:
    assert native.speedups is not None
    out = np.empty(2, np.uint64)
    with pytest.raises(ValueError):
        native.speedups.xxh3_slices(b"abc", np.zeros(2, np.int64), np.zeros(3, np.int64), out)


# ---- the WAL frame scanner -----------------------------------------------------------------


@st.composite
def damaged_logs(draw: st.DrawFn) -> bytes:
    """Valid frames, then perhaps damage: a flipped byte, a cut, zeros, or a frame that
    checksums but breaks another rule (bad UTF-8 node or tag, an unknown type, inconsistent
    lengths, a control body that does not parse)."""
    log = b"".join(encode_frame(f) for f in draw(st.lists(frames(), max_size=8)))
    odd = draw(
        st.sampled_from(
            [
                None,
                _frame_bytes(1, FLAG_NODE, (b"\xff\xfe", b"", b'{"d":1}')),
                _frame_bytes(1, FLAG_TAG, (b"", b"\xc3", b'{"d":1}')),
                _frame_bytes(1, FLAG_NODE | FLAG_TAG, (b"n", b"t\xed\xa0\x80", b'{"d":1}')),
                _frame_bytes(1, 0, (b"ab", b"cd", b'{"d":1}')),  # sections ignored, valid
                _frame_bytes(99, 0, (b"", b"", b"x")),  # unknown type
                _frame_bytes(0, 0, (b"", b"", b"x")),
                _frame_bytes(1, 0, (b"", b"", b'{"d":1}'), lens=(0, 0, 3)),
                _frame_bytes(8, 0, (b"", b"", b"short")),  # a checkpoint body that fails
                _frame_bytes(1, 0xF8 | FLAG_TAG, (b"", b"t", b'{"d":2}')),  # more + reserved bits
            ]
        )
    )
    if odd is not None:
        log += odd
    log += b"".join(encode_frame(f) for f in draw(st.lists(frames(), max_size=3)))
    how = draw(st.sampled_from(["none", "flip", "cut", "zeros"]))
    if how == "flip" and log:
        i = draw(st.integers(0, len(log) - 1))
        log = log[:i] + bytes([log[i] ^ draw(st.integers(1, 255))]) + log[i + 1 :]
    elif how == "cut":
        log = log[: draw(st.integers(0, len(log)))]
    elif how == "zeros":
        log += bytes(draw(st.integers(1, 100)))
    return log


def _scan_all(scan: object, src: bytes | mmap.mmap, start: int, limit: int, collect: bool) -> list:
    """Every chunk `scan` returns from `start` until it stops (as the iterators call it)."""
    got = []
    off = start
    with memoryview(src) as mv:
        for _ in range(1000):
            frames_, off, stopped = scan(src, mv, off, limit, collect)  # type: ignore[operator]
            got.append((frames_, off, stopped))
            if stopped:
                break
    return got


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    log=damaged_logs(),
    start=st.integers(0, 60),
    limit=st.integers(1, 5),
    collect=st.booleans(),
    as_mmap=st.booleans(),
)
def test_scan_wal_chunk_equals_the_python_scanner(
    log: bytes, start: int, limit: int, collect: bool, as_mmap: bool
) -> None:
    start = min(start, len(log))
    if as_mmap and log:
        src: bytes | mmap.mmap = mmap.mmap(-1, len(log))
        src.write(log)
    else:
        src = log
    try:
        want = _scan_all(_scan_chunk_py, src, start, limit, collect)
        got = _scan_all(_scan_chunk_c, src, start, limit, collect)
        assert got == want
        for frames_, _, _ in got:
            for f in frames_:
                assert type(f[8]) is bytes and type(f[3]) is int
    finally:
        if isinstance(src, mmap.mmap):
            src.close()


@needs_native
def test_scan_wal_chunk_propagates_an_unexpected_body_check_error() -> None:
    assert native.speedups is not None
    frame = _frame_bytes(8, 0, (b"", b"", bytes(8)))

    def boom(_t: int, _d: bytes) -> bool:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        native.speedups.scan_wal_chunk(frame, 0, 10, True, frame_scanner._KNOWN_TYPES, 1, boom)


@needs_native
def test_scan_wal_chunk_refuses_a_negative_offset_and_ends_past_the_buffer() -> None:
    assert native.speedups is not None
    known, ok = frame_scanner._KNOWN_TYPES, frame_scanner._body_ok
    with pytest.raises(ValueError):
        native.speedups.scan_wal_chunk(b"abcd", -1, 10, True, known, 1, ok)
    assert native.speedups.scan_wal_chunk(b"abcd", 5, 10, True, known, 1, ok) == ([], 5, True)
    with memoryview(b"abcd") as mv:
        assert _scan_chunk_py(b"abcd", mv, 5, 10) == ([], 5, True)


# ---- the switch -----------------------------------------------------------------------------


def test_seglog_pure_python_turns_the_speedups_off() -> None:
    code = (
        "from seglog.core import native, frame_scanner;"
        "print(native.speedups is None, frame_scanner._scan_chunk is frame_scanner._scan_chunk_py)"
    )
    env = {**os.environ, native.PURE_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True"]


# ---- the sealed-segment encoder -----------------------------------------------------------

LABELS = st.none() | st.text(max_size=6) | st.sampled_from(["a", "é", "\U0001f600", ""])


@st.composite
def segment_columns(draw: st.DrawFn) -> tuple[int, list, list, list, list, list]:
    n = draw(st.integers(1, 12))
    first = draw(st.integers(1, 2**40) | st.just(2**64 - n))
    ts = draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n))
    nodes = draw(st.lists(LABELS, min_size=n, max_size=n))
    tags = draw(st.lists(LABELS, min_size=n, max_size=n))
    blobs = draw(st.lists(st.binary(max_size=300), min_size=n, max_size=n))
    dead = draw(st.lists(st.booleans() | st.integers(0, 2), min_size=n, max_size=n))
    return first, ts, nodes, tags, blobs, dead


@needs_native
@settings(max_examples=300, deadline=None)
@given(cols=segment_columns())
def test_encode_segment_equals_the_python_encoder(cols: tuple) -> None:
    assert _c().encode_segment(*cols) == segment_format.encode_columns_py(*cols)


def _outcome(fn: object, cols: tuple) -> object:
    try:
        return fn(*cols)  # type: ignore[operator]
    except UnicodeEncodeError:  # a ValueError too: first
        return UnicodeEncodeError
    except ValueError as e:  # the same message but for the struct module's detail
        return ValueError, str(e).split(" near")[0].split(":")[0]


@needs_native
@pytest.mark.parametrize(
    "cols",
    [
        (1, [], [], [], [], []),  # empty
        (1, [1, 2], [None], [None, None], [b"", b""], [0, 0]),  # lengths differ
        (2**64, [1], [None], [None], [b"x"], [0]),  # seq beyond u64
        (2**64 - 1, [1, 2], [None, None], [None, None], [b"x", b"y"], [0, 0]),
        (-1, [1], [None], [None], [b"x"], [0]),
        (1, [-1], [None], [None], [b"x"], [0]),  # ts below zero
        (1, [2**64], [None], [None], [b"x"], [0]),
        (1, [1.5], [None], [None], [b"x"], [0]),  # ts not an integer
        (1, [1], ["n" * 65536], [None], [b"x"], [0]),  # node wider than u16
        (1, [1], [None], ["t" * 65535], [b"x"], [0]),  # the widest tag fits
        (1, [1, 2], ["\ud800", None], [None, "x" * 70000], [b"x", b"y"], [0, 0]),
        (1, [1, 2], [None, "\ud800"], ["x" * 70000, None], [b"x", b"y"], [0, 0]),
    ],
)
def test_encode_segment_fails_as_the_python_encoder_does(cols: tuple) -> None:
    c = _outcome(_c().encode_segment, cols)
    py = _outcome(segment_format.encode_columns_py, cols)
    assert c == py


# ---- a write's Append frames -------------------------------------------------------------


@dataclass(slots=True)
class _Rec:
    data_json: bytes
    meta_json: bytes | None = None
    node: str | None = None
    tag: str | None = None


RECORDS = st.lists(
    st.builds(_Rec, st.binary(max_size=200), st.none() | st.binary(max_size=50), LABELS, LABELS),
    max_size=12,
)


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    records=RECORDS,
    tid=st.integers(0, 2**64 - 1),
    first=st.integers(1, 2**64 - 13),
    ts=st.integers(0, 2**64 - 1),
    durable=st.booleans(),
)
def test_encode_appends_equals_the_python_encoder(
    records: list[_Rec], tid: int, first: int, ts: int, durable: bool
) -> None:
    want: list[bytes] = [b"head"]
    got: list[bytes] = [b"head"]
    append_frames.encode_appends_py(tid, first, ts, *_columns(records), durable, want)
    _c().encode_appends(tid, first, ts, *_columns(records), durable, got)
    assert got == want
    # and they read back as the records, each but the last flagged `more`
    frames_, _ = scan_frames(b"".join(got[1:]))
    assert [f.seq for _, _, f in frames_] == list(range(first, first + len(records)))
    assert [bool(f.flags & FLAG_MORE) for _, _, f in frames_] == [
        i + 1 < len(records) for i in range(len(records))
    ]


@needs_native
@pytest.mark.parametrize(
    "case",
    [
        (2**64, 1, 1, [_Rec(b"1")]),  # topic id beyond u64
        (1, 2**64 - 1, 1, [_Rec(b"1"), _Rec(b"2")]),  # the second seq beyond u64
        (1, 1, -1, [_Rec(b"1")]),
        (1, 1, 1, [_Rec(b"1"), _Rec(b"2", node="n" * 65536)]),
        (1, 1, 1, [_Rec(b"1", tag="\ud800")]),
        (1, 1, 1, [_Rec(None)]),  # type: ignore[arg-type]
    ],
)
def test_encode_appends_fails_as_the_python_encoder_does(case: tuple) -> None:
    outcomes = _append_outcomes(case)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] != "ok" and outcomes[0][1] == [b"keep"]


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    cols=segment_columns(),
    payloads=st.lists(
        st.tuples(st.none() | st.binary(max_size=80), st.none() | st.binary(max_size=30)),
        min_size=12,
        max_size=12,
    ),
)
def test_encode_segment_rows_equals_the_python_encoder(
    cols: tuple, payloads: list[tuple[bytes | None, bytes | None]]
) -> None:
    first, ts, nodes, tags, _blobs, dead = cols
    n = len(ts)
    datas = [d for d, _ in payloads[:n]]
    metas = [m for _, m in payloads[:n]]
    args = (first, ts, nodes, tags, datas, metas, bytearray(bool(x) for x in dead))
    assert _c().encode_segment_rows(*args) == segment_format.encode_payload_columns_py(*args)


@needs_native
@pytest.mark.parametrize(
    "cols",
    [
        (1, [], [], [], [], [], []),
        (1, [1, 2], [None, None], [None, None], [b"1"], [None, None], [0, 0]),
        (1, [1], ["n" * 65536], [None], [b"1"], [None], [0]),
        (1, [1], ["n" * 65536], [None], [b"1"], [None], [1]),  # dead: no node, fits
        (1, [1], ["\ud800"], [None], [b"1"], [None], [0]),
        (1, [-1], [None], [None], [b"1"], [None], [0]),
    ],
)
def test_encode_segment_rows_fails_as_the_python_encoder_does(cols: tuple) -> None:
    c = _outcome(_c().encode_segment_rows, cols)
    py = _outcome(segment_format.encode_payload_columns_py, cols)
    assert type(c) is type(py) and (c == py or (isinstance(c, tuple) and c[0] is ValueError))


# ---- gathered header rows and label codes ---------------------------------------------------


@needs_native
@settings(max_examples=200, deadline=None)
@given(buf=st.binary(max_size=400), data=st.data())
def test_gather_rows_equals_the_twin(buf: bytes, data: st.DataObject) -> None:
    width = data.draw(st.integers(0, len(buf)))
    at = data.draw(st.lists(st.integers(0, len(buf) - width), max_size=30))
    offsets = np.array(at, np.int64)
    got = native.gather_rows(buf, offsets, width)
    assert got == b"".join(buf[a : a + width] for a in at)
    assert got == native.gather_rows_py(buf, offsets, width)


@pytest.mark.parametrize("impl", ["c", "py"])
@pytest.mark.parametrize("at", [-1, 8])
def test_gather_rows_rejects_a_row_outside_the_buffer(impl: str, at: int) -> None:
    if impl == "c" and native.speedups is None:
        pytest.skip("seglog._speedups not built")
    fn = native.gather_rows if impl == "c" else native.gather_rows_py
    with pytest.raises(ValueError):
        fn(b"0123456789", np.array([0, at], np.int64), 3)


@needs_native
@settings(max_examples=200, deadline=None)
@given(buf=st.binary(max_size=300), data=st.data())
def test_spans_into_equals_the_twin(buf: bytes, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(buf)), max_size=20)))
    starts = np.array(cuts[0::2][: len(cuts) // 2], np.int64)
    ends = np.array(cuts[1::2], np.int64)
    want = b"".join(buf[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True))
    at = data.draw(st.integers(0, 5))
    room = at + len(want) + data.draw(st.integers(0, 3))
    outs = []
    for fn in (native.spans_into, native.spans_into_py):
        out = np.full(room, 0xEE, np.uint8)
        assert fn(buf, starts, ends, out, at) == at + len(want)
        assert bytes(out[at : at + len(want)]) == want
        assert (out[:at] == 0xEE).all() and (out[at + len(want) :] == 0xEE).all()
        outs.append(bytes(out))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("impl", ["c", "py"])
@pytest.mark.parametrize(
    "case",
    [
        ([0], [11], 20, 0),  # a span past the buffer
        ([5], [3], 20, 0),  # reversed
        ([-1], [3], 20, 0),  # before it
        ([0, 4], [4, 10], 9, 0),  # 10 bytes into 9
        ([0], [4], 9, 6),  # from 6, 4 bytes into 9
        ([0], [0], 9, 10),  # `at` past the end
        ([0], [0], 9, -1),
    ],
)
def test_spans_into_refuses_what_does_not_fit_and_writes_nothing(impl: str, case: tuple) -> None:
    if impl == "c" and native.speedups is None:
        pytest.skip("seglog._speedups not built")
    starts, ends, room, at = case
    fn = native.spans_into if impl == "c" else native.spans_into_py
    out = np.zeros(room, np.uint8)
    with pytest.raises(ValueError):
        fn(b"0123456789", np.array(starts, np.int64), np.array(ends, np.int64), out, at)
    assert not out.any()


@pytest.mark.parametrize("impl", ["c", "py"])
@pytest.mark.parametrize("target", ["buf", "starts", "stops"])
def test_spans_into_refuses_an_out_that_overlaps_its_inputs(impl: str, target: str) -> None:
    if impl == "c" and native.speedups is None:
        pytest.skip("seglog._speedups not built")
    fn = native.spans_into if impl == "c" else native.spans_into_py
    idx = np.array([0, 4, 4, 8], np.int64)  # starts [0, 4], stops [4, 8]
    buf = np.frombuffer(b"abcdefgh" * 4, np.uint8).copy()
    starts, stops = idx[0:2], idx[2:4]
    out = {"buf": buf[8:], "starts": idx.view(np.uint8)[0:16], "stops": idx.view(np.uint8)[16:]}
    before = (bytes(buf), idx.tolist())
    with pytest.raises(ValueError, match="overlap"):
        fn(buf, starts, stops, out[target], 0)
    assert (bytes(buf), idx.tolist()) == before


SPAN_TEXT = st.sampled_from(["", "a", "ab", "é", "g1", "g2", "\U0001f600", "x" * 70, "y" * 65])


@needs_native
@settings(max_examples=300, deadline=None)
@given(labels=st.lists(SPAN_TEXT | st.text(max_size=9), max_size=40), junk=st.binary(max_size=5))
def test_label_codes_decode_the_same_labels_as_the_twin(labels: list[str], junk: bytes) -> None:
    buf, starts, widths = bytearray(junk), [], []
    for x in labels:
        b = x.encode()
        starts.append(len(buf))
        widths.append(len(b))
        buf += b + b"\x00"
    a, w = np.array(starts, np.int64), np.array(widths, np.int64)
    for fn in (segment_run._label_codes_c, segment_run.label_codes_py):
        table, codes = fn(bytes(buf), a, w)
        assert codes.dtype == np.uint32
        assert sorted(table) == sorted(set(labels))  # each distinct label once
        assert [table[c - 1] for c in codes.tolist()] == labels


@pytest.mark.parametrize("impl", ["c", "py"])
@pytest.mark.parametrize("width", [2, 80])  # the numpy path and the one-by-one path
def test_label_codes_refuse_a_label_that_is_not_utf8(impl: str, width: int) -> None:
    if impl == "c" and native.speedups is None:
        pytest.skip("seglog._speedups not built")
    fn = segment_run._label_codes_c if impl == "c" else segment_run.label_codes_py
    buf = b"ok" + b"\xff" * width
    with pytest.raises(UnicodeDecodeError):
        fn(buf, np.array([0, 2], np.int64), np.array([2, width], np.int64))


@needs_native
def test_label_codes_hold_thousands_of_distinct_labels() -> None:
    labels = [f"tag-{i % 3000}" for i in range(9000)]
    buf = "".join(labels).encode()
    widths = np.array([len(x) for x in labels], np.int64)
    starts = np.concatenate(([0], np.cumsum(widths)[:-1])).astype(np.int64)
    table, codes = segment_run._label_codes_c(buf, starts, widths)
    assert len(table) == 3000 and table[:2] == ["tag-0", "tag-1"]  # first appearances
    assert [table[c - 1] for c in codes.tolist()] == labels


# ---- inputs only a direct caller could build (the review's cases) -------------------------


@needs_native
def test_an_output_column_aliasing_the_bounds_is_safe() -> None:
    """Each bound is read once, checked, then used: an `out` that overlaps the bounds
    cannot make a later, already-checked bound point outside the buffer."""
    assert native.speedups is not None
    x = np.zeros(3, np.int64)
    x[0:2] = [8, 8]
    with contextlib.suppress(ValueError):  # a hash written over a bound is out of range
        native.speedups.xxh3_slices(
            b"x" * 64, np.zeros(2, np.int64), x[0:2], x[1:3].view(np.uint64)
        )
    y = np.zeros(4, np.int64)
    with contextlib.suppress(ValueError):
        native.speedups.label_codes(
            b"x" * 64, y[0:2], np.array([1, 1], np.int64), y.view(np.uint32)[3:5]
        )


@pytest.mark.parametrize("impl", ["c", "py"])
@pytest.mark.parametrize("spans", [(b"abc", [2], [4]), (b"abc", [-1], [1]), (b"abc", [0], [-1])])
def test_label_codes_refuse_a_span_outside_the_buffer(impl: str, spans: tuple) -> None:
    if impl == "c" and native.speedups is None:
        pytest.skip("seglog._speedups not built")
    fn = segment_run._label_codes_c if impl == "c" else segment_run.label_codes_py
    data, starts, widths = spans
    with pytest.raises(ValueError):
        fn(data, np.array(starts, np.int64), np.array(widths, np.int64))


@needs_native
def test_label_codes_of_empty_labels_in_an_empty_buffer() -> None:
    for fn in (segment_run._label_codes_c, segment_run.label_codes_py):
        table, codes = fn(b"", np.zeros(3, np.int64), np.zeros(3, np.int64))
        assert table == [""] and codes.tolist() == [1, 1, 1]


@pytest.mark.parametrize("impl", ["c", "py"])
def test_gather_rows_refuses_a_negative_width(impl: str) -> None:
    if impl == "c" and native.speedups is None:
        pytest.skip("seglog._speedups not built")
    fn = native.gather_rows if impl == "c" else native.gather_rows_py
    with pytest.raises(ValueError):
        fn(b"abc", np.zeros(1, np.int64), -1)


@needs_native
@pytest.mark.parametrize(
    "case",
    [
        (2**64, 1, 1, []),  # nothing to pack: no error, as the twin
        (1, 1, -1, []),
        (1, 1, -1, [_Rec(None)]),  # type: ignore[arg-type]  # the blob fails first
        (1, 2**64 - 1, 1, [_Rec(b"1"), _Rec(b"2", node="\ud800")]),  # the label first
        (1, 1, 1, [_Rec(None, node="\ud800")]),  # type: ignore[arg-type]
    ],
)
def test_encode_appends_raise_where_the_twin_does(case: tuple) -> None:
    outcomes = _append_outcomes(case)
    assert outcomes[0] == outcomes[1]


@needs_native
@pytest.mark.parametrize("short", ["data", "meta", "node", "tag"])
def test_encode_appends_refuse_columns_of_different_lengths(short: str) -> None:
    cols = dict(
        zip(("data", "meta", "node", "tag"), _columns([_Rec(b"1"), _Rec(b"2")]), strict=True)
    )
    cols[short] = cols[short][:1]
    for fn in (_c().encode_appends, append_frames.encode_appends_py):
        out: list[bytes] = [b"keep"]
        with pytest.raises(ValueError, match="differ in length"):
            fn(1, 1, 1, cols["data"], cols["meta"], cols["node"], cols["tag"], True, out)
        assert out == [b"keep"]


# ---- json_rows (the diff page's common record array) -------------------------------------

U64S = st.integers(0, 2**64 - 1)
JSON_TEXT = st.sampled_from([b"null", b"1", b'"x"', b'{"a":[1,2]}', b'"\xc3\xa9"', b"[]"])


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(U64S, U64S, JSON_TEXT), max_size=40))
def test_json_rows_is_its_twin(rows: list[tuple[int, int, bytes]]) -> None:
    from seglog.http.responses import json_rows_py

    seqs, ts, data = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    got = _c().json_rows(seqs, ts, data)
    assert got == json_rows_py(seqs, ts, data)
    parsed = msgspec.json.decode(got)  # valid JSON, u64 values exact
    assert [(r["$seq"], r["$ts"]) for r in parsed] == [(s, t) for s, t, _ in rows]


@needs_native
@pytest.mark.parametrize(
    ("args", "error"),
    [
        (([1], [1, 2], [b"1"]), ValueError),  # columns of different lengths
        (([1], [1], ["1"]), TypeError),  # a str datum
        (([1.0], [1], [b"1"]), TypeError),  # a float seq
        (([-1], [1], [b"1"]), OverflowError),
        (([2**64], [1], [b"1"]), OverflowError),
        (((1,), [1], [b"1"]), TypeError),  # not a list
    ],
)
def test_json_rows_refuses_what_is_not_a_page(args: tuple, error: type[Exception]) -> None:
    with pytest.raises(error):
        _c().json_rows(*args)


BLOB_PART = st.sampled_from(
    [b'{"d":', b"}", b'"m"', b'"m":1', b",", b'"', b"m", b"1", b'"x"', b"{", b'{"d":"m"}']
)


def _sliceable_both(buf: bytes, starts: list[int], ends: list[int]) -> list[list[bool]]:
    a, e = np.array(starts, np.int64), np.array(ends, np.int64)
    got = []
    for fn in (segment_run.blobs_sliceable, segment_run.blobs_sliceable_py):
        flags = fn(buf, a, e)
        assert flags.dtype == np.bool_
        got.append(flags.tolist())
    return got


@needs_native
@settings(max_examples=400, deadline=None)
@given(
    blobs=st.lists(st.lists(BLOB_PART, max_size=8).map(b"".join), max_size=12),
    gaps=st.lists(st.binary(max_size=4) | BLOB_PART, min_size=13, max_size=13),
)
def test_blobs_sliceable_agrees_with_its_twin(blobs: list[bytes], gaps: list[bytes]) -> None:
    buf, starts, ends = bytearray(), [], []
    for blob, gap in zip(blobs, gaps, strict=False):
        buf += gap
        starts.append(len(buf))
        buf += blob
        ends.append(len(buf))
    buf += gaps[-1]
    c, py = _sliceable_both(bytes(buf), starts, ends)
    assert c == py
    # and what the flag promises: `decode_blob` slices the blob (its middle bytes, no meta)
    for i, ok in enumerate(c):
        blob = bytes(buf[starts[i] : ends[i]])
        if ok:
            assert decode_blob(blob) == (blob[5:-1], None)


@needs_native
def test_blobs_sliceable_cases() -> None:
    buf = b'{"d":1}{"d":"m"}{"d":1,"m":2}{"d":{"a":"xm"}}{"d":"'
    starts, ends = [0, 7, 16, 29, 45], [7, 16, 29, 45, len(buf)]
    assert _sliceable_both(buf, starts, ends) == [[True, False, False, True, False]] * 2


@pytest.mark.parametrize("impl", ["c", "py"])
@pytest.mark.parametrize("span", [(-1, 3), (4, 2), (0, 99)])
def test_blobs_sliceable_refuses_a_blob_outside_the_buffer(impl: str, span: tuple) -> None:
    if impl == "c" and native.speedups is None:
        pytest.skip("seglog._speedups is not built")
    fn = segment_run.blobs_sliceable if impl == "c" else segment_run.blobs_sliceable_py
    with pytest.raises(ValueError):
        fn(b'{"d":1}' * 3, np.array([span[0]], np.int64), np.array([span[1]], np.int64))


def _layout_outcome(fn: Any, data: bytes, first: int, idx: Any, checksums: bool) -> object:
    try:
        lay = fn(data, first, idx["offset"], idx["len"], checksums)
    except (segment_format.SegmentCorruption, ValueError, OverflowError) as e:
        return (type(e).__name__, str(e))
    return {f: np.asarray(getattr(lay, f)).tolist() for f in lay.__dataclass_fields__} | {
        "dtypes": [str(np.asarray(getattr(lay, f)).dtype) for f in lay.__dataclass_fields__]
    }


@needs_native
@settings(max_examples=300, deadline=None)
@given(cols=segment_columns(), damage=st.none() | st.tuples(st.integers(0), st.integers(1, 255)))
def test_segment_layout_in_c_equals_the_numpy_path(
    cols: tuple, damage: tuple[int, int] | None
) -> None:
    data, idx_bytes = segment_format.encode_columns_py(*cols)
    if damage is not None:  # one byte of the data or of the index changed
        at, xor = damage
        target = bytearray(data + idx_bytes)
        target[at % len(target)] ^= xor
        data, idx_bytes = bytes(target[: len(data)]), bytes(target[len(data) :])
    idx = segment_format.idx_view(idx_bytes)
    for checksums in (True, False):
        c = _layout_outcome(segment_run.segment_layout, data, cols[0], idx, checksums)
        py = _layout_outcome(segment_run.segment_layout_py, data, cols[0], idx, checksums)
        assert c == py


@needs_native
@pytest.mark.parametrize(
    ("first", "given"),
    [(5, np.int64(5)), (5, 5 + 2**64), (5, -2), (2**64 - 2, 2**64 - 2), (2**64 - 2, -2)],
)
def test_segment_layout_leaves_odd_first_seqs_to_the_numpy_path(first: int, given: Any) -> None:
    """The C call takes a u64; any other first seq gets the twin's answer, not a wrap."""
    data, idx_bytes = segment_format.encode_columns_py(
        first, [1, 2], [None, "n"], ["t", None], [b'{"d":1}', b'{"d":2}'], [0, 0]
    )
    idx = segment_format.idx_view(idx_bytes)
    c = _layout_outcome(segment_run.segment_layout, data, given, idx, True)
    py = _layout_outcome(segment_run.segment_layout_py, data, given, idx, True)
    assert c == py
