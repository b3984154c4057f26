"""append() refuses records that are not JSON objects with a message naming the record,
before anything is sent (issue 14: it used to fail with "dictionary update sequence")."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.client import _base


@pytest.mark.parametrize(
    ("records", "needle"),
    [
        (["str"], "record 0 is of type str"),
        ([{"data": 1}, 5], 'record 1 is of type int.*\\{"data": \\.\\.\\.\\}'),
        ("abc", "got str"),
        ({"a": 1}, "got dict"),
    ],
)
def test_non_object_records_fail_clearly(records: Any, needle: str) -> None:
    with pytest.raises(TypeError, match=needle):
        _base.append(
            "t",
            records,
            node=None,
            idempotency_key=None,
            create=None,
            config=None,
            return_seqs=True,
        )


def test_mappings_are_encoded() -> None:
    call = _base.append(
        "t",
        [{"data": 1, "tag": "x"}],
        node=None,
        idempotency_key=None,
        create=None,
        config=None,
        return_seqs=True,
    )
    assert call.spec.body == b'{"records":[{"data":1,"tag":"x"}]}'


def _body(records: Any) -> bytes:
    call = _base.append(
        "t", records, node=None, idempotency_key=None, create=None, config=None, return_seqs=True
    )
    assert isinstance(call.spec.body, bytes)
    return call.spec.body


def test_plain_dicts_and_other_mappings_encode_alike() -> None:
    """A list or tuple of plain dicts is encoded as it is; any other sequence, or a record
    that is a Mapping but not a dict, goes through the copying path: same bytes."""
    from collections import OrderedDict, deque
    from types import MappingProxyType

    want = b'{"records":[{"data":1,"tag":"x"},{"data":[2]}]}'
    recs: list[dict[str, Any]] = [{"data": 1, "tag": "x"}, {"data": [2]}]
    assert _body(recs) == _body(tuple(recs)) == _body(deque(recs)) == want
    assert _body([OrderedDict(recs[0]), MappingProxyType(recs[1])]) == want
    assert _body([]) == b'{"records":[]}'


@given(
    st.lists(
        st.one_of(
            st.dictionaries(st.sampled_from(["data", "tag"]), st.integers(0, 10**6), min_size=1),
            st.integers(0, 99).map(lambda i: b'{"data":%d}' % i),
        ),
        max_size=30,
    ),
    st.integers(0, 80),
)
def test_ndjson_pieces_cut_right_after_the_buffer_fills(records: list[Any], buffer: int) -> None:
    """`append_stream`'s body: every record one line, in order; a piece is sent as soon
    as it holds `buffer_bytes` (each line on its own with 0), the rest at the end."""
    lines = [r + b"\n" if isinstance(r, bytes) else orjson.dumps(r) + b"\n" for r in records]
    pieces = list(_base.ndjson_lines(iter(records), buffer))
    assert b"".join(pieces) == b"".join(lines)
    at = 0
    for piece in pieces:
        n = 0
        while len(b"".join(lines[at : at + n])) < len(piece):
            n += 1
        assert b"".join(lines[at : at + n]) == piece
        assert len(piece) - len(lines[at + n - 1]) < buffer or n == 1  # cut right after
        assert len(piece) >= buffer or at + n == len(lines)  # only the last piece is short
        at += n
