"""Any JSON value into the request-body parsers (API §3, §4, §5): they fail only with
`SeglogError` and a 4xx request code, never with anything else."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.errors import ErrorCode, SeglogError
from seglog.http.delete_request import parse_delete
from seglog.http.diff_request import parse_diff
from seglog.http.write_request import parse_write

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)

json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)

field_names = st.sampled_from(
    [
        "records", "data", "meta", "tag", "node", "idempotency_key", "create", "config",
        "disable_backpressure", "from_seq", "limit", "include_tags", "include_meta", "wait_ms",
        "max_batch_bytes", "before_seq", "match",
    ]
)  # fmt: skip

records_like = st.lists(
    st.dictionaries(field_names, json_values, max_size=5) | json_values, max_size=4
)

bodies = (
    st.dictionaries(field_names, json_values | records_like, max_size=6)
    | st.fixed_dictionaries({"records": records_like}, optional={"node": json_values})
    | json_values
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_parsers_raise_only_seglog_error(body: Any) -> None:
    for parse in (parse_write, parse_diff, parse_delete):
        try:
            parse(body)
        except SeglogError as e:
            assert e.code in {
                ErrorCode.INVALID_REQUEST,
                ErrorCode.BATCH_TOO_LARGE,
                ErrorCode.RECORD_TOO_LARGE,
            }
