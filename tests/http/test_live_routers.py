"""Black-box: router routes against a real server (API §6, §2.4, §10, §11)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.http.conftest import ServerFactory
from tests.http.live import JSON, cursor_for, diff, error_of, ok, write

Names = Callable[[str], str]

PUT_KEYS = [
    "router",
    "created",
    "source",
    "dest",
    "preserve_node",
    "preserve_tag",
    "filter",
    "allow_cycle",
    "guarantee",
    "performance",
]
GET_KEYS = [k for k in PUT_KEYS if k != "created"]
GET_KEYS.insert(-1, "forwarded_total")


def put(c: httpx.Client, name: str, status: int = 201, **body: Any) -> dict[str, Any]:
    return ok(c.put(f"/v0/routers/{name}", json=body), status)


def test_put_get_delete_round_trip(client: httpx.Client, tname: Names) -> None:
    src, dst = tname("src"), tname("dst")
    name = f"{src}->{dst}"
    body = put(client, name, source=src, dest=dst, filter="public:*")
    assert list(body) == PUT_KEYS
    assert body | {"performance": None} == {
        "router": name,
        "created": True,
        "source": src,
        "dest": dst,
        "preserve_node": True,
        "preserve_tag": True,
        "filter": ["tag", "Glob", "public:*"],
        "allow_cycle": False,
        "guarantee": "at_least_once",
        "performance": None,
    }
    # both endpoints were auto-created with the default config
    assert ok(client.get(f"/v0/topics/{dst}"))["head_seq"] == 0
    again = put(client, name, 200, source=src, dest=dst, guarantee="exactly_once")
    assert again["created"] is False and again["filter"] is None
    assert again["guarantee"] == "exactly_once"

    write(client, src, [{"data": 1, "tag": "public:a"}, {"data": 2, "node": "n1"}])
    state = ok(client.get(f"/v0/routers/{name}"))  # drives the router first
    assert list(state) == GET_KEYS
    assert state["forwarded_total"] == 2
    d = diff(client, dst, include_tags=True, include_meta=False)
    assert [(r["$seq"], r["data"]) for r in d["records"]] == [(1, 1), (2, 2)]
    assert d["records"][0]["$tag"] == "public:a" and d["records"][1]["$node"] == "n1"

    gone = ok(client.delete(f"/v0/routers/{name}"))
    assert gone | {"performance": None} == {"router": name, "deleted": True, "performance": None}
    assert ok(client.delete(f"/v0/routers/{name}"))["deleted"] is False
    error_of(client.get(f"/v0/routers/{name}"), 404, "router_not_found", detail={"router": name})
    write(client, src, [{"data": 3}])
    assert [r["data"] for r in diff(client, dst)["records"]] == [1, 2]  # copies stay


def test_diff_and_state_read_their_writes(client: httpx.Client, tname: Names) -> None:
    a, b, c = tname("a"), tname("b"), tname("c")
    put(client, tname("r1"), source=a, dest=b)
    put(client, tname("r2"), source=b, dest=c)
    write(client, a, [{"data": "x"}])
    assert [r["data"] for r in diff(client, c)["records"]] == ["x"]
    write(client, a, [{"data": "y"}])
    assert ok(client.get(f"/v0/topics/{b}", params={"touch": "false"}))["head_seq"] == 2


def test_check_order_and_error_codes(client: httpx.Client, tname: Names) -> None:
    x, y, z = tname("x"), tname("y"), tname("z")
    put(client, "xy" + x, source=x, dest=y)
    bad = [
        ("-bad", {"source": "a", "dest": "a"}, 400, "invalid_request"),
        (tname("r"), {"source": x, "dest": x}, 400, "invalid_request"),
        (tname("r"), {"source": "a/b", "dest": y}, 400, "invalid_request"),
        (tname("r"), {"source": x, "dest": "-no"}, 400, "invalid_request"),
        (tname("r"), {"source": x, "dest": z, "create_dest": False}, 404, "topic_not_found"),
        (tname("r"), {"source": z, "dest": y}, 409, "topic_exists_incompatible"),
        ("xy" + x, {"source": x, "dest": z}, 409, "topic_exists_incompatible"),
        (tname("r"), {"source": y, "dest": x}, 409, "router_cycle"),
    ]
    for name, body, status, code in bad:
        err = error_of(client.put(f"/v0/routers/{name}", json=body), status, code)
        if code == "topic_not_found":
            assert err["detail"] == {"topic": z}
        if status == 409 and code != "router_cycle":
            reason = err["detail"]["reason"]
            assert reason in ("router_dest_fan_in", "router_repoint_forbidden")
            if reason == "router_dest_fan_in":
                assert err["detail"] == {"topic": y, "reason": "router_dest_fan_in"}
            else:
                assert err["detail"] == {
                    "router": "xy" + x,
                    "reason": "router_repoint_forbidden",
                    "existing_source": x,
                    "existing_dest": y,
                }
        if code == "router_cycle":
            assert err["detail"]["cycle"] == [y, x, y]
    # nothing was created by any refusal
    error_of(client.get(f"/v0/topics/{z}"), 404, "topic_not_found")
    listed = ok(client.get("/v0/routers", params={"source": x}))["routers"]
    assert [r["router"] for r in listed] == ["xy" + x]


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        (b'{"source":"a","dest":"b"}', {}, "unsupported_media_type"),
        (b"{", JSON, "invalid_request"),
        (b"", JSON, "invalid_request"),
        (b'{"dest":"b"}', JSON, "invalid_request"),
        (b'{"source":1,"dest":"b"}', JSON, "invalid_request"),
        (b'{"source":"a","dest":"b","guarantee":"maybe"}', JSON, "invalid_request"),
        (b'{"source":"a","dest":"b","filter":["tag","Like","x"]}', JSON, "invalid_request"),
        (b'{"source":"a","dest":"b","preserve_node":"yes"}', JSON, "invalid_request"),
        (b"[]", JSON, "invalid_request"),
    ],
)
def test_body_errors(
    client: httpx.Client, tname: Names, body: bytes, headers: dict[str, str], code: str
) -> None:
    name = tname("r")
    r = client.put(f"/v0/routers/{name}", content=body, headers=headers)
    error_of(r, 415 if code == "unsupported_media_type" else 400, code)
    error_of(client.get(f"/v0/routers/{name}"), 404, "router_not_found")


def test_other_methods(client: httpx.Client) -> None:
    for method in ("POST", "PATCH"):
        error_of(client.request(method, "/v0/routers/r", json={}), 405, "method_not_allowed")
    error_of(client.post("/v0/routers", json={}), 405, "method_not_allowed")
    error_of(client.get("/v0/routers/r/x"), 404, "not_found")


def test_list_filters_pagination_and_cursor(client: httpx.Client, tname: Names) -> None:
    p = tname("lst")
    src, other = tname("s"), tname("o")
    names = [f"{p}-{i}" for i in range(5)]
    for i, n in enumerate(names):
        put(client, n, source=src if i % 2 == 0 else other, dest=tname(f"d{i}"))
    everything = ok(client.get("/v0/routers", params={"prefix": p}))
    assert [r["router"] for r in everything["routers"]] == names
    assert "next_cursor" not in everything
    row = everything["routers"][0]
    assert list(row) == ["router", "source", "dest", "guarantee", "forwarded_total"]
    page = ok(client.get("/v0/routers", params={"prefix": p, "page_size": 2}))
    assert [r["router"] for r in page["routers"]] == names[:2]
    assert page["next_cursor"] == cursor_for(names[1])
    page2 = ok(
        client.get(
            "/v0/routers", params={"prefix": p, "page_size": 2, "cursor": page["next_cursor"]}
        )
    )
    assert [r["router"] for r in page2["routers"]] == names[2:4]
    by_src = ok(client.get("/v0/routers", params={"source": src}))["routers"]
    assert [r["router"] for r in by_src] == names[0::2]
    by_dest = ok(client.get("/v0/routers", params={"dest": everything["routers"][3]["dest"]}))
    assert [r["router"] for r in by_dest["routers"]] == [names[3]]
    error_of(
        client.get("/v0/routers", params={"cursor": "%%%"}),
        400,
        "invalid_request",
        message_prefix="malformed cursor",
    )


def test_topic_delete_cascades(client: httpx.Client, tname: Names) -> None:
    s, d, e = tname("s"), tname("d"), tname("e")
    put(client, f"{s}->{d}", source=s, dest=d)
    put(client, f"{d}->{e}", source=d, dest=e)
    put(client, f"{s}->{e}x", source=s, dest=tname("f"))
    res = ok(client.delete(f"/v0/topics/{d}"))
    assert res["routers_removed"] == sorted([f"{s}->{d}", f"{d}->{e}"])
    error_of(client.get(f"/v0/routers/{s}->{d}"), 404, "router_not_found")
    ok(client.get(f"/v0/routers/{s}->{e}x"))


def test_metrics_count_routers(make_server: ServerFactory) -> None:
    srv = make_server()
    with httpx.Client(base_url=srv.url, timeout=15) as c:
        put(c, "a->b", source="a", dest="b")
        put(c, "a->c", source="a", dest="c")
        js = ok(c.get("/v0/metrics", headers={"Accept": "application/json"}), perf=False)
        assert js["routers"] == 2
        text = c.get("/v0/metrics").text
        assert "# TYPE topics_routers gauge" in text
        assert "\ntopics_routers 2\n" in text


def test_caps(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_MAX_ROUTERS": "1", "SEGLOG_MAX_TOPICS": "3"})
    with httpx.Client(base_url=srv.url, timeout=15) as c:
        put(c, "a->b", source="a", dest="b")
        error_of(
            c.put("/v0/routers/a->c", json={"source": "a", "dest": "c"}),
            429,
            "throttled",
            detail={"limit": "max_routers", "max": 1},
        )
        put(c, "a->b", 200, source="a", dest="b", preserve_tag=False)  # re-PUT: no cap
        ok(c.delete("/v0/routers/a->b"))
        error_of(
            c.put("/v0/routers/c->d", json={"source": "c", "dest": "d"}),
            429,
            "throttled",
            detail={"limit": "max_topics", "max": 3},
        )
        error_of(c.get("/v0/topics/c"), 404, "topic_not_found")  # neither endpoint created
        assert ok(c.get("/v0/routers"))["routers"] == []


def test_body_size_cap(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_MAX_BODY_BYTES": "64"})
    with httpx.Client(base_url=srv.url, timeout=15) as c:
        big = {"source": "a", "dest": "b", "pad": "x" * 100}
        error_of(c.put("/v0/routers/r", json=big), 413, "payload_too_large")


def test_reject_dest_backpressure_over_http(client: httpx.Client, tname: Names) -> None:
    s, d = tname("s"), tname("d")
    ok(client.put(f"/v0/topics/{d}", json={"cap_records": 2, "discard": "reject"}), 201)
    put(client, tname("r"), source=s, dest=d)
    write(client, s, [{"data": i} for i in range(4)])
    assert [r["data"] for r in diff(client, d)["records"]] == [0, 1]
    ok(client.post(f"/v0/topics/{d}/delete", json={"before_seq": 3}))
    assert [r["data"] for r in diff(client, d)["records"]] == [2, 3]


def test_exactly_once_meta_on_the_wire(client: httpx.Client, tname: Names) -> None:
    s, d = tname("s"), tname("d")
    r = tname("r")
    put(client, r, source=s, dest=d, guarantee="exactly_once", preserve_node=False)
    write(client, s, [{"data": 1, "meta": {"trace": "z"}, "node": "n"}, {"data": 2}])
    recs = diff(client, d)["records"]
    assert "$node" not in recs[0]
    key = recs[0]["meta"]["_topics_router"]
    assert recs[0]["meta"]["trace"] == "z"
    assert key["router"] == r and key["source_topic"] == s and key["source_seq"] == 1
    assert key["source_epoch"] == 1
    assert key["idempotency_key"] == f"router:{r}:{key['source_topic_id']}:1:1"
    assert set(recs[1]["meta"]) == {"_topics_router"}


def test_background_worker_forwards_without_a_reader(client: httpx.Client, tname: Names) -> None:
    """Nobody reads the dest and the list never drives routers: only the worker (every
    50 ms) can move `forwarded_total`."""
    s, d, r = tname("s"), tname("d"), tname("r")
    put(client, r, source=s, dest=d)
    write(client, s, [{"data": i} for i in range(3)])
    deadline = time.monotonic() + 10
    total = -1
    while time.monotonic() < deadline:
        (row,) = ok(client.get("/v0/routers", params={"prefix": r}))["routers"]
        total = row["forwarded_total"]
        if total == 3:
            break
        time.sleep(0.02)
    assert total == 3
