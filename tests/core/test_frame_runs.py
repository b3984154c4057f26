"""`append_runs` (where replay takes frames as column slices) and `decode_blobs` (payloads
of a run decoded together) against their frame-by-frame definitions."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.core.frame_runs import append_runs
from seglog.core.frames import FrameError, FrameType
from seglog.core.payload_blob import decode_blob, decode_blobs, encode_blob

APPEND = int(FrameType.APPEND)
U64_MAX = 2**64 - 1


def naive_runs(ftypes: list[int], tids: list[int], seqs: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in range(len(ftypes)):
        joins = (
            i > 0
            and ftypes[i] == APPEND
            and ftypes[i - 1] == APPEND
            and tids[i] == tids[i - 1]
            and seqs[i] == seqs[i - 1] + 1
        )
        if joins:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


FRAME = st.tuples(
    st.sampled_from([APPEND, APPEND, APPEND, int(FrameType.DELETE), int(FrameType.LEASE)]),
    st.sampled_from([1, 2, 2**63, U64_MAX]),  # topic ids are u64 too
    st.integers(0, 2),  # small seq steps: runs, repeats and gaps all occur
)


@given(st.lists(FRAME, max_size=60), st.sampled_from([0, 1, 2**63 - 3, U64_MAX - 20]))
def test_append_runs_match_the_frame_by_frame_rule(
    frames: list[tuple[int, int, int]], base: int
) -> None:
    ftypes = [f for f, _, _ in frames]
    tids = [t for _, t, _ in frames]
    seqs, s = [], base
    for _, _, step in frames:
        s = min(s + step, U64_MAX)
        seqs.append(s)
    assert append_runs(ftypes, tids, seqs) == naive_runs(ftypes, tids, seqs)


def test_a_wrapped_u64_step_is_not_a_join() -> None:
    assert append_runs([APPEND, APPEND], [1, 1], [U64_MAX, 0]) == [(0, 1), (1, 2)]
    assert append_runs([APPEND, APPEND], [1, 1], [U64_MAX - 1, U64_MAX]) == [(0, 2)]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
OUR_BLOB = st.builds(
    lambda d, m: encode_blob(orjson.dumps(d), None if m is None else orjson.dumps(m)),
    JSON,
    st.none() | JSON,
)
FOREIGN = st.sampled_from(
    [b'{"d":}', b'{"d": 1}', b'{"d":{"m":1}}', b'{"d":"}{\\"d\\":"}', b'x{"d":1}', b'{"d":1}x']
)


def outcome(blobs: list[bytes]) -> object:
    try:
        data: list[bytes] = []
        meta: list[bytes | None] = []
        for b in blobs:
            d, m = decode_blob(b)
            data.append(d)
            meta.append(m)
        return data, meta
    except FrameError:
        return FrameError


@given(st.lists(OUR_BLOB | FOREIGN, max_size=12))
def test_decode_blobs_is_decode_blob_of_each(blobs: list[bytes]) -> None:
    expected = outcome(blobs)
    if expected is FrameError:
        with pytest.raises(FrameError):
            decode_blobs(blobs)
    else:
        assert decode_blobs(blobs) == expected


def test_decode_blobs_checks_each_blob_not_the_joined_bytes() -> None:
    # Joined, these two look like two well-formed blobs; the second is not one.
    blobs = [b'{"d":1}{"d":2}', b'q{"d":3}']
    with pytest.raises(FrameError):
        decode_blobs(blobs)
    assert decode_blobs([b'{"d":}', b'{"d":[1]}']) == ([b"", b"[1]"], [None, None])
