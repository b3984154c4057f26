"""Black-box fuzz of every implemented route: random methods × paths × headers × bodies.

Invariants: never a 5xx; every non-2xx carries the canonical error body (API §0.5); every
2xx JSON body is a bare object; afterwards the server is alive, ready, and a sentinel
topic's records are intact. Bounded by `SEGLOG_FUZZ_EXAMPLES` (default keeps it ~30 s)."""

from __future__ import annotations

import os
import time
import urllib.parse
import uuid
from collections import Counter
from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.http.live import describe, is_canonical_error, ok, write
from tests.support.server import ServerProcess

EXAMPLES = int(os.environ.get("SEGLOG_FUZZ_EXAMPLES", "2000"))
TIME_BUDGET_S = float(os.environ.get("SEGLOG_FUZZ_SECONDS", "20"))

FUZZ_PREFIX = "fz"
VALID_NAMES = [f"{FUZZ_PREFIX}-{i}" for i in range(6)] + [f"{FUZZ_PREFIX}.q", f"{FUZZ_PREFIX}:x"]

# --------------------------------------------------------------------------- strategies

junk_name = st.one_of(
    st.sampled_from(VALID_NAMES),
    st.sampled_from(
        [
            "-x",
            "_x",
            ".x",
            "..",
            ".",
            "a b",
            "é",
            "日本",
            "a%2Fb",
            "a/b",
            "%00",
            "x" * 255,
            "y" * 256,
            "z" * 5000,
            "a>b",
            "*",
            "%",
            "%zz",
            "a?b",
            "a#b",
            "tenant1.x",
            "::",
            "0",
        ]
    ),
    st.text(min_size=1, max_size=40),
    st.text(alphabet="abcXYZ019._:-", min_size=1, max_size=300),
)

scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**32, 2**63, 2**64 - 1, 2**64, 10**30, -(2**63)]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
json_value = st.recursive(
    scalar,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(st.text(max_size=8), kids, max_size=4),
    ),
    max_leaves=12,
)

WRITE_FIELDS = ["records", "node", "idempotency_key", "create", "config", "disable_backpressure"]
RECORD_FIELDS = ["data", "tag", "node", "meta"]
DIFF_FIELDS = [
    "from_seq",
    "limit",
    "node",
    "include_tags",
    "include_meta",
    "wait_ms",
    "max_batch_bytes",
]
DELETE_FIELDS = ["before_seq", "match"]
CONFIG_FIELDS = [
    "type",
    "ttl_ms",
    "cap_records",
    "cap_bytes",
    "discard",
    "durable",
    "durability",
    "priority",
    "auto_priority",
    "auto_create",
    "idempotency_window_ms",
    "dedupe_node",
    "lease_ms",
    "claim_jitter_ms",
    "max_deliveries",
    "dead_letter",
    "leases_durable",
]

good_record = st.fixed_dictionaries(
    {"data": json_value},
    optional={
        "tag": st.text(max_size=10),
        "node": st.text(max_size=10),
        "meta": st.one_of(st.none(), st.dictionaries(st.text(max_size=5), scalar, max_size=3)),
    },
)


def fields_of(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), json_value, max_size=len(keys))


record_like = st.one_of(good_record, fields_of(RECORD_FIELDS), json_value)
config_like = st.one_of(
    fields_of(CONFIG_FIELDS),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["log", "queue", "x"]),
            "durability": st.sampled_from(["ephemeral", "memory", "disk", "fsync", "x"]),
            "cap_records": st.integers(0, 5),
            "discard": st.sampled_from(["old", "reject"]),
            "ttl_ms": st.integers(0, 10**6),
            "lease_ms": st.integers(-5, 10**12),
            "dead_letter": st.one_of(st.none(), junk_name),
        },
    ),
)
write_body = st.one_of(
    st.fixed_dictionaries(
        {"records": st.lists(record_like, min_size=0, max_size=5)},
        optional={
            "node": json_value,
            "idempotency_key": st.text(max_size=5),
            "create": st.booleans(),
            "config": config_like,
        },
    ),
    fields_of(WRITE_FIELDS),
)
predicate = st.one_of(
    st.text(max_size=6),
    st.tuples(
        st.sampled_from(["tag", "node", "Tag"]),
        st.sampled_from(["Eq", "Glob", "eq"]),
        st.one_of(st.text(max_size=5), json_value),
    ).map(list),
    json_value,
)
delete_body = st.one_of(
    st.fixed_dictionaries({}, optional={"before_seq": st.integers(-3, 50), "match": predicate}),
    fields_of(DELETE_FIELDS),
)
diff_body = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "from_seq": st.integers(-1, 60),
            "limit": st.integers(-1, 2000),
            "node": st.one_of(st.text(max_size=4), st.lists(st.text(max_size=4), max_size=3)),
            "include_tags": st.booleans(),
            "include_meta": st.booleans(),
            "max_batch_bytes": st.integers(-1, 2**64),
        },
    ),
    fields_of(DIFF_FIELDS),
)


BODIES: dict[str, st.SearchStrategy[Any]] = {
    "write": write_body,
    "config": config_like,
    "diff": diff_body,
    "delete": delete_body,
    "topic": st.one_of(write_body, config_like),
}


def deep(n: int) -> bytes:
    return b'{"records":[{"data":' + b"[" * n + b"]" * n + b"}]}"


raw_body = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"",
            b" ",
            b"{",
            b"}",
            b"null",
            b"[]",
            b"{}",
            b"\xff",
            b"\x00",
            b"1e999",
            b"-0",
            b"99999999999999999999999999",
            b'{"a":NaN}',
            b'{"a":Infinity}',
            deep(100),
            deep(300),
            deep(2000),
            b'{"records":[' + b'{"data":1},' * 50 + b'{"data":1}]}',
            b'{"records":[{"data":"\\ud800"}]}',
        ]
    ),
)
json_body = st.one_of(json_value, write_body, diff_body, delete_body, config_like)

JSON_CT = "application/json"
CONTENT_TYPES = [
    None,
    "application/json",
    "application/json; charset=utf-8",
    "text/plain",
    "application/x-www-form-urlencoded",
    "",
    "application/jsonx",
    "APPLICATION/JSON",
    "multipart/form-data; boundary=x",
    "application/*",
]

ENDPOINTS: list[tuple[list[str], str, str]] = [
    (["GET", "PUT", "POST", "DELETE"], "/v0/topics/{n}", "topic"),
    (["GET", "PUT", "POST", "DELETE"], "/v0/topics/{n}", "topic"),
    (["POST"], "/v0/topics/{n}", "write"),
    (["POST"], "/v0/topics/{n}", "write"),
    (["PUT"], "/v0/topics/{n}", "config"),
    (["POST"], "/v0/topics/{n}/diff", "diff"),
    (["POST"], "/v0/topics/{n}/diff", "diff"),
    (["POST"], "/v0/topics/{n}/delete", "delete"),
    (["POST"], "/v0/topics/{n}/delete", "delete"),
    (["GET"], "/v0/topics", "none"),
    (["GET"], "/v0/health", "none"),
    (["GET"], "/healthz", "none"),
    (["GET"], "/v0/ready", "none"),
    (["GET"], "/readyz", "none"),
    (["GET"], "/v0/metrics", "none"),
    (["GET"], "/v0/openapi.json", "none"),
    (["GET", "POST"], "/v0/topics/{n}/{j}", "any"),
    (["GET", "POST"], "/v0/{j}", "any"),
    (["GET"], "/{j}", "any"),
    (["POST"], "/v0/topics/{n}/diff/{j}", "diff"),
]
METHODS = ["GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS", "HEAD"]
QUERY_KEYS = [
    "touch",
    "if_empty",
    "return_seqs",
    "page_size",
    "cursor",
    "prefix",
    "token",
    "lenient",
    "x",
]

query = st.dictionaries(
    st.sampled_from(QUERY_KEYS),
    st.one_of(
        st.sampled_from(
            [
                "true",
                "false",
                "1",
                "0",
                "",
                "-1",
                "99999999999999999999",
                "abc",
                "eyJhZnRlciI6ImZ6In0=",
                "!!",
                "fz",
            ]
        ),
        st.text(max_size=12),
    ),
    max_size=3,
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, dict[str, str], bytes | None]:
    methods, template, kind_name = draw(st.sampled_from(ENDPOINTS))
    method = draw(st.sampled_from(methods if draw(st.integers(0, 5)) else METHODS))
    name = draw(st.sampled_from(VALID_NAMES) if draw(st.booleans()) else junk_name)
    safe = draw(st.sampled_from(["", "", "", "/", ":", "%"]))
    path = template.format(
        n=urllib.parse.quote(name, safe=safe),
        j=urllib.parse.quote(draw(st.text(min_size=1, max_size=12)), safe=""),
    )
    q = draw(query)
    if q:
        path += "?" + urllib.parse.urlencode(q)
    headers: dict[str, str] = {}
    ct = draw(st.sampled_from(CONTENT_TYPES) if draw(st.booleans()) else st.just(JSON_CT))
    if ct is not None:
        headers["Content-Type"] = ct
    if draw(st.booleans()):
        headers["Idempotency-Key"] = draw(st.text(alphabet="abcdef0123456789-", max_size=300))
    if draw(st.booleans()):
        headers["Accept"] = draw(
            st.sampled_from(["application/json", "text/event-stream", "*/*", "text/plain", "x"])
        )
    if draw(st.integers(0, 9)) == 0:
        headers["Authorization"] = draw(st.sampled_from(["Bearer x", "Basic y", "Bearer"]))
    kind = draw(st.integers(0, 9))
    body: bytes | None
    if kind == 0:
        body = None
    elif kind <= 2:
        body = draw(raw_body)
    else:
        relevant = BODIES.get(kind_name, json_body)
        value = draw(relevant if draw(st.integers(0, 3)) else json_body)
        if isinstance(value, dict) and "wait_ms" in value:
            w = value["wait_ms"]
            if isinstance(w, int) and not isinstance(w, bool) and w > 0:
                value["wait_ms"] = w % 40  # keep long-polls short; clamping is tested elsewhere
        body = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS) if _encodable(value) else b"{}"
    return method, path, headers, body


def _encodable(value: Any) -> bool:
    try:
        orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return False
    return True


# --------------------------------------------------------------------------- test


def test_fuzz_every_endpoint(server: ServerProcess) -> None:
    sentinel = f"sentinel-{uuid.uuid4().hex[:8]}"
    stats: Counter[int] = Counter()
    failures: list[str] = []
    with httpx.Client(base_url=server.url, timeout=30) as c:
        recs = [
            {"data": {"i": i, "s": "ü" * i}, "tag": f"t{i}", "node": "n", "meta": {"i": i}}
            for i in range(20)
        ]
        write(c, sentinel, recs, status=201, config={"durable": True})
        before = ok(c.post(f"/v0/topics/{sentinel}/diff", json={"include_tags": True}))
        deadline = time.monotonic() + TIME_BUDGET_S

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
                HealthCheck.filter_too_much,
                HealthCheck.large_base_example,
            ],
        )
        @given(req=requests())
        def one(req: tuple[str, str, dict[str, str], bytes | None]) -> None:
            if time.monotonic() > deadline:
                return
            method, path, headers, body = req
            url = httpx.URL(server.url).copy_with(raw_path=path.encode("ascii"))
            try:
                r = c.request(method, url, headers=headers, content=body)
            except httpx.TransportError as e:  # the server must never drop a connection
                failures.append(f"{method} {path} {headers} {body!r:.200}: transport error {e!r}")
                raise
            stats[r.status_code] += 1
            where = f"{method} {path} {headers} body={body!r:.300}\n-> {describe(r)}"
            assert r.status_code < 500, where
            if method == "HEAD":
                return
            if r.status_code >= 300:
                assert is_canonical_error(r), where
                assert "performance" not in r.json(), where
                if r.status_code == 429:
                    assert r.headers.get("retry-after") == "1", where
            elif r.headers.get("content-type", "").startswith("application/json"):
                b = r.json()
                assert isinstance(b, dict) and "error" not in b, where

        one()
    assert not failures, failures
    print(f"fuzz status histogram: {dict(sorted(stats.items()))}")
    assert server.running, server.log_text()[-3000:]
    with httpx.Client(base_url=server.url, timeout=10) as c:
        assert c.get("/v0/ready").status_code == 200
        assert c.get("/v0/health").json()["status"] == "ok"
        after = ok(c.post(f"/v0/topics/{sentinel}/diff", json={"include_tags": True}))
        assert after["records"] == before["records"]
        assert (after["head_seq"], after["earliest_seq"]) == (20, 1)
        # and the server still takes writes
        assert write(c, sentinel, [{"data": "post-fuzz"}])["seqs"] == [21]
