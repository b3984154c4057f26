"""append() refuses records that are not JSON objects with a message naming the record,
before anything is sent (issue 14: it used to fail with "dictionary update sequence")."""

from __future__ import annotations

from typing import Any

import pytest

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
