"""The columnar diff (API §13.1) against a real server, and the client's `read_arrow()`.

The main property: for any topic history (writes with nodes, tags and meta, deletes, a cap
that evicts) and any read (cursor, limit, node filter, include flags), the Arrow stream
answers exactly the records and every scalar field (cursor, head, earliest, caught_up, lag,
tombstone) that the JSON diff answers for the same request.
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.client import AsyncClient, Client
from tests.support.server import ServerProcess

ARROW = "application/vnd.apache.arrow.stream"
_names = itertools.count()


def arrow_diff(c: httpx.Client, topic: str, body: dict[str, Any]) -> tuple[pa.Table, dict]:
    r = c.post(f"/v0/topics/{topic}/diff", json=body, headers={"Accept": ARROW})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == ARROW
    reader = pa.ipc.open_stream(r.content)
    table = reader.read_all()
    return table, orjson.loads(reader.schema.metadata[b"seglog"])


def json_diff(c: httpx.Client, topic: str, body: dict[str, Any]) -> dict[str, Any]:
    r = c.post(f"/v0/topics/{topic}/diff", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def as_json_records(table: pa.Table) -> list[dict[str, Any]]:
    """Arrow rows in the JSON diff's record shape (API §0.4)."""
    out = []
    for row in table.to_pylist():
        rec: dict[str, Any] = {"$seq": row["seq"], "$ts": row["ts"]}
        if row["node"] is not None:
            rec["$node"] = row["node"]
        if row.get("tag") is not None:
            rec["$tag"] = row["tag"]
        rec["data"] = orjson.loads(row["data"])
        if row.get("meta") is not None:
            rec["meta"] = orjson.loads(row["meta"])
        out.append(rec)
    return out


WRITE = st.lists(
    st.fixed_dictionaries(
        {
            "data": st.one_of(
                st.integers(-(2**63), 2**63 - 1),
                st.text(max_size=8),
                st.lists(st.booleans(), max_size=2),
            )
        },
        optional={
            "node": st.sampled_from(["n1", "n2"]),
            "tag": st.sampled_from(["red", "blue"]),
            "meta": st.dictionaries(
                st.sampled_from("ab"), st.integers(-(2**63), 2**63 - 1), max_size=2
            ),
        },
    ),
    min_size=1,
    max_size=6,
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), WRITE),
        st.tuples(st.just("delete"), st.integers(1, 20)),
    ),
    min_size=1,
    max_size=6,
)
READ = st.fixed_dictionaries(
    {
        "from_seq": st.integers(0, 25),
        "include_tags": st.booleans(),
        "include_meta": st.booleans(),
    },
    optional={"limit": st.integers(1, 10), "node": st.sampled_from(["n1", ["n1", "n2"]])},
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, cap=st.sampled_from([0, 8]), read=READ)
def test_arrow_diff_answers_what_the_json_diff_answers(
    client: httpx.Client, ops: list[tuple[str, Any]], cap: int, read: dict[str, Any]
) -> None:
    topic = f"arrow-prop-{next(_names)}"
    assert client.put(f"/v0/topics/{topic}", json={"cap_records": cap}).status_code in (200, 201)
    for op, arg in ops:
        if op == "write":
            r = client.post(f"/v0/topics/{topic}", json={"records": arg})
        else:
            r = client.post(f"/v0/topics/{topic}/delete", json={"before_seq": arg})
        assert r.status_code in (200, 201), r.text
    want = json_diff(client, topic, read)
    table, fields = arrow_diff(client, topic, read)
    assert as_json_records(table) == want["records"]
    assert set(table.column_names) == {"seq", "ts", "node", "data"} | (
        {"tag"} if read["include_tags"] else set()
    ) | ({"meta"} if read["include_meta"] else set())
    assert set(fields) == set(want) - {"records"}  # the scalars, exactly (API §13.1)
    for key in ("topic", "next_from_seq", "head_seq", "earliest_seq", "caught_up", "lag"):
        assert fields[key] == want[key], key
    assert fields["tombstone"] == want["tombstone"]
    assert "server_total_ms" in fields["performance"]


def test_data_is_the_stored_json_text_and_empty_reads_carry_the_schema(
    client: httpx.Client, topic: str
) -> None:
    client.post(f"/v0/topics/{topic}", json={"records": [{"data": {"b": [1, 2.5, None]}}]})
    table, _ = arrow_diff(client, topic, {})
    assert table.column("data").to_pylist() == ['{"b":[1,2.5,null]}']
    assert table.schema.field("seq").type == pa.int64()
    assert table.schema.field("data").type == pa.string()
    empty, f2 = arrow_diff(client, topic, {"from_seq": 1})
    assert len(empty) == 0 and empty.column_names == table.column_names
    assert f2["caught_up"] is True and f2["next_from_seq"] == 1


def test_errors_stay_json_and_other_accepts_get_json(client: httpx.Client, topic: str) -> None:
    r = client.post("/v0/topics/nope-arrow/diff", json={}, headers={"Accept": ARROW})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "topic_not_found"
    client.post(f"/v0/topics/{topic}", json={"records": [{"data": 1}]})
    r = client.post(f"/v0/topics/{topic}/diff", json={"from_seq": -1}, headers={"Accept": ARROW})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    r = client.post(f"/v0/topics/{topic}/diff", json={}, headers={"Accept": "text/csv"})
    assert r.headers["content-type"].startswith("application/json")
    both = f"application/json;q=0.5, {ARROW}"
    r = client.post(f"/v0/topics/{topic}/diff", json={}, headers={"Accept": both})
    assert r.headers["content-type"] == ARROW


def test_client_read_arrow_pages_to_the_head_and_reports_gaps(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    client.put(f"/v0/topics/{topic}", json={"cap_records": 50})
    for i in range(0, 120, 10):
        records = [
            {"data": {"i": j}, **({"node": "n1"} if j % 2 else {})} for j in range(i, i + 10)
        ]
        r = client.post(f"/v0/topics/{topic}", json={"records": records})
        assert r.status_code in (200, 201), r.text
    with Client(server.url) as c:
        table = c.read_arrow(topic, limit=7)
        assert table.column("seq").to_pylist() == list(range(71, 121))
        summary = orjson.loads(table.schema.metadata[b"seglog"])
        assert summary["next_from_seq"] == 120 and summary["head_seq"] == 120
        assert [t["reason"] for t in summary["tombstones"]] == ["cap"]
        part = c.read_arrow(topic, 100, until_seq=104, limit=3)
        assert part.column("seq").to_pylist() == [101, 102, 103, 104]
        assert orjson.loads(part.schema.metadata[b"seglog"])["next_from_seq"] == 104
        rows = [r for r in c.read(topic, 70) if hasattr(r, "seq")]
        assert [r.seq for r in rows] == table.column("seq").to_pylist()


@pytest.mark.asyncio
async def test_async_client_read_arrow(
    server: ServerProcess, client: httpx.Client, topic: str
) -> None:
    client.post(f"/v0/topics/{topic}", json={"records": [{"data": i} for i in range(5)]})
    async with AsyncClient(server.url) as c:
        table = await c.read_arrow(topic, limit=2, include_meta=False)
    assert table.column("data").to_pylist() == ["0", "1", "2", "3", "4"]
    assert "meta" not in table.column_names
