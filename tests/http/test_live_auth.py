"""Black-box: API keys, scopes, prefix allowlists, probes and the startup guard (API §1)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.http.conftest import ServerFactory
from tests.http.live import JSON, data_records, describe, error_of, ok, raw_error_of, raw_http
from tests.support.server import ServerProcess, run_to_exit

KEYS = (
    " full , ronly:r ,, tenant:rw:tenant1.|shared: , adm:a+d,"
    " pfx::p1.|p2:, upper:READ+Write, wonly:w, ronly:admin, S3cr3t-Unlogged-Token "
)
MAX_BODY = 2000


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


FULL = bearer("full")
RONLY = bearer("ronly")
TENANT = bearer("tenant")
ADM = bearer("adm")
PFX = bearer("pfx")
UPPER = bearer("upper")
WONLY = bearer("wonly")


@pytest.fixture(scope="module")
def auth_server() -> Iterator[ServerProcess]:
    srv = ServerProcess(env={"SEGLOG_API_KEYS": KEYS, "SEGLOG_MAX_BODY_BYTES": str(MAX_BODY)})
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def c(auth_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=auth_server.url, timeout=15) as client:
        yield client


def uniq(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def create(c: httpx.Client, name: str) -> None:
    r = c.post(f"/v0/topics/{name}", json={"records": data_records(1)}, headers=FULL)
    assert r.status_code in (200, 201), describe(r)


# --------------------------------------------------------------------------- 401


BAD_HEADERS: list[dict[str, str]] = [
    {},
    bearer("nope"),
    bearer("full2"),
    {"Authorization": "bearer full"},
    {"Authorization": "Bearer"},
    {"Authorization": "Basic full"},
    {"Authorization": "Token full"},
    {"Authorization": "full"},
    {"X-Api-Key": "full"},
]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v0/topics", None),
        ("GET", "/v0/topics/x", None),
        ("PUT", "/v0/topics/x", None),
        ("DELETE", "/v0/topics/x", None),
        ("POST", "/v0/topics/x", {"records": [{"data": 1}]}),
        ("POST", "/v0/topics/x/diff", {}),
        ("POST", "/v0/topics/x/delete", {"before_seq": 1}),
        ("GET", "/v0/metrics", None),
        ("GET", "/v0/nope", None),
        ("PATCH", "/v0/topics/x", None),
    ],
)
def test_missing_or_unknown_key_401(
    c: httpx.Client, method: str, path: str, body: dict[str, Any] | None
) -> None:
    for headers in BAD_HEADERS:
        r = c.request(method, path, json=body, headers=headers)
        error_of(r, 401, "unauthorized")


def test_token_query_ignored_outside_sse(c: httpx.Client) -> None:
    error_of(c.get("/v0/topics", params={"token": "full"}), 401, "unauthorized")


def test_bearer_remainder_trimmed(c: httpx.Client) -> None:
    ok(c.get("/v0/topics", headers={"Authorization": "Bearer    full"}))
    srv_addr = str(c.base_url).removeprefix("http://").rstrip("/")
    r = raw_http(srv_addr, "GET", "/v0/topics", [("Authorization", " Bearer full   ")])
    assert r.status_code == 200, r.content  # leading OWS is not part of the value
    r = raw_http(srv_addr, "GET", "/v0/topics", [("Authorization", "Bearer \t full \t ")])
    assert r.status_code == 200, r.content
    raw_error_of(
        raw_http(srv_addr, "GET", "/v0/topics", [("Authorization", "Bearer ")]), 401, "unauthorized"
    )
    raw_error_of(
        raw_http(srv_addr, "GET", "/v0/topics", [("Authorization", "Bearer   ")]),
        401,
        "unauthorized",
    )


def test_auth_precedes_body_checks(c: httpx.Client) -> None:
    big = b"x" * (MAX_BODY + 1)
    error_of(c.post("/v0/topics/tenant1.x", content=big), 401, "unauthorized")
    error_of(c.post("/v0/topics/tenant1.x", content=b"junk"), 401, "unauthorized")
    # scope/prefix precede size, content type and parse
    error_of(c.post("/v0/topics/tenant1.x", content=big, headers=RONLY), 403, "forbidden")
    error_of(c.post("/v0/topics/other", content=big, headers=TENANT), 403, "forbidden")
    error_of(c.post("/v0/topics/other", content=b"junk", headers=TENANT), 403, "forbidden")
    error_of(c.put("/v0/topics/other", content=big, headers=RONLY), 403, "forbidden")
    # inside the allowlist the size check applies
    error_of(c.post("/v0/topics/tenant1.x", content=big, headers=TENANT), 413, "payload_too_large")
    error_of(
        c.post("/v0/topics/tenant1.x", content=b"junk", headers=TENANT),
        415,
        "unsupported_media_type",
    )


def test_valid_key_unknown_route_404_and_405(c: httpx.Client) -> None:
    error_of(c.get("/v0/nope", headers=FULL), 404, "not_found")
    error_of(c.patch("/v0/topics/x", headers=FULL), 405, "method_not_allowed")


# --------------------------------------------------------------------------- scopes


def test_full_key_does_everything(c: httpx.Client) -> None:
    t = uniq("any")
    ok(c.put(f"/v0/topics/{t}", headers=FULL), 201)
    ok(c.post(f"/v0/topics/{t}", json={"records": data_records(1, 2)}, headers=FULL))
    ok(c.get(f"/v0/topics/{t}", headers=FULL))
    ok(c.post(f"/v0/topics/{t}/diff", json={}, headers=FULL))
    ok(c.get("/v0/topics", headers=FULL))
    ok(c.post(f"/v0/topics/{t}/delete", json={"before_seq": 2}, headers=FULL))
    assert ok(c.delete(f"/v0/topics/{t}", headers=FULL))["deleted"] is True
    assert c.get("/v0/metrics", headers=FULL).status_code == 200


def test_read_only_key(c: httpx.Client) -> None:
    t = uniq("ro")
    create(c, t)
    ok(c.get("/v0/topics", headers=RONLY))
    ok(c.get(f"/v0/topics/{t}", headers=RONLY))
    assert ok(c.post(f"/v0/topics/{t}/diff", json={}, headers=RONLY))["head_seq"] == 1
    assert c.get("/v0/metrics", headers=RONLY).status_code == 200
    error_of(c.put(f"/v0/topics/{t}", headers=RONLY), 403, "forbidden")
    error_of(
        c.post(f"/v0/topics/{t}", json={"records": data_records(2)}, headers=RONLY),
        403,
        "forbidden",
    )
    error_of(c.delete(f"/v0/topics/{t}", headers=RONLY), 403, "forbidden")
    error_of(
        c.post(f"/v0/topics/{t}/delete", json={"before_seq": 5}, headers=RONLY), 403, "forbidden"
    )
    s = ok(c.get(f"/v0/topics/{t}", headers=FULL))
    assert (s["head_seq"], s["count"]) == (1, 1)


def test_admin_delete_key(c: httpx.Client) -> None:
    t = uniq("ad")
    ok(c.put(f"/v0/topics/{t}", headers=ADM), 201)
    ok(c.put(f"/v0/topics/{t}", json={"cap_records": 50}, headers=ADM), 200)
    error_of(
        c.post(f"/v0/topics/{t}", json={"records": data_records(1)}, headers=ADM), 403, "forbidden"
    )
    error_of(c.get(f"/v0/topics/{t}", headers=ADM), 403, "forbidden")
    error_of(c.get("/v0/topics", headers=ADM), 403, "forbidden")
    error_of(c.post(f"/v0/topics/{t}/diff", json={}, headers=ADM), 403, "forbidden")
    error_of(c.get("/v0/metrics", headers=ADM), 403, "forbidden")
    create(c, t)
    assert ok(c.post(f"/v0/topics/{t}/delete", json={"before_seq": 9}, headers=ADM))["deleted"] == 1
    assert ok(c.delete(f"/v0/topics/{t}", headers=ADM))["deleted"] is True


def test_write_only_and_case_insensitive_scopes(c: httpx.Client) -> None:
    t = uniq("wo")
    assert (
        ok(c.post(f"/v0/topics/{t}", json={"records": data_records(1)}, headers=WONLY), 201)[
            "created"
        ]
        is True
    )
    error_of(c.get(f"/v0/topics/{t}", headers=WONLY), 403, "forbidden")
    error_of(c.post(f"/v0/topics/{t}/diff", json={}, headers=WONLY), 403, "forbidden")
    error_of(c.get("/v0/topics", headers=WONLY), 403, "forbidden")
    error_of(c.get("/v0/metrics", headers=WONLY), 403, "forbidden")
    # upper:READ+Write
    ok(c.post(f"/v0/topics/{t}", json={"records": data_records(2)}, headers=UPPER))
    assert ok(c.get(f"/v0/topics/{t}", headers=UPPER))["head_seq"] == 2
    error_of(c.put(f"/v0/topics/{t}", headers=UPPER), 403, "forbidden")
    error_of(c.delete(f"/v0/topics/{t}", headers=UPPER), 403, "forbidden")


# --------------------------------------------------------------------------- prefixes


def test_prefix_allowlist(c: httpx.Client) -> None:
    mine = uniq("tenant1.")
    shared = uniq("shared:")
    other = uniq("tenant2.")
    assert (
        ok(c.post(f"/v0/topics/{mine}", json={"records": data_records(1)}, headers=TENANT), 201)[
            "created"
        ]
        is True
    )
    ok(c.post(f"/v0/topics/{shared}", json={"records": data_records(1)}, headers=TENANT), 201)
    create(c, other)
    for r in (
        c.post(f"/v0/topics/{other}", json={"records": data_records(1)}, headers=TENANT),
        c.get(f"/v0/topics/{other}", headers=TENANT),
        c.post(f"/v0/topics/{other}/diff", json={}, headers=TENANT),
        # the prefix is a byte prefix: "tenant1" alone is outside "tenant1."
        c.post("/v0/topics/tenant1", json={"records": data_records(1)}, headers=TENANT),
    ):
        err = error_of(r, 403, "forbidden")
        assert err.get("detail", {}).get("topic") in (other, "tenant1"), describe(r)
    # rw has neither admin nor delete
    error_of(c.put(f"/v0/topics/{mine}", headers=TENANT), 403, "forbidden")
    error_of(c.delete(f"/v0/topics/{mine}", headers=TENANT), 403, "forbidden")
    assert ok(c.post(f"/v0/topics/{mine}/diff", json={}, headers=TENANT))["head_seq"] == 1
    s = ok(c.get(f"/v0/topics/{other}", headers=FULL))
    assert s["head_seq"] == 1


def test_empty_scope_field_with_prefixes(c: httpx.Client) -> None:
    a, b, bad = uniq("p1."), uniq("p2:"), uniq("p3.")
    ok(c.put(f"/v0/topics/{a}", headers=PFX), 201)
    ok(c.put(f"/v0/topics/{b}", headers=PFX), 201)
    ok(c.post(f"/v0/topics/{a}", json={"records": data_records(1)}, headers=PFX))
    assert ok(c.delete(f"/v0/topics/{a}", headers=PFX))["deleted"] is True
    err = error_of(c.put(f"/v0/topics/{bad}", headers=PFX), 403, "forbidden")
    assert err["detail"] == {"topic": bad}


def test_autocreate_with_config_needs_admin(c: httpx.Client) -> None:
    mine = uniq("tenant1.")
    r = c.post(
        f"/v0/topics/{mine}",
        json={"records": data_records(1), "config": {"ttl_ms": 5}},
        headers=TENANT,
    )
    err = error_of(r, 403, "forbidden")
    assert err["detail"] == {"topic": mine}
    assert "admin" in err["message"]
    error_of(c.get(f"/v0/topics/{mine}", headers=FULL), 404, "topic_not_found")
    # a plain auto-create needs only write; a config on an existing topic is ignored
    ok(c.post(f"/v0/topics/{mine}", json={"records": data_records(1)}, headers=TENANT), 201)
    r = c.post(
        f"/v0/topics/{mine}",
        json={"records": data_records(2), "config": {"ttl_ms": 5}},
        headers=TENANT,
    )
    assert ok(r)["seqs"] == [2]
    # the full key (has admin) may create with a config
    t = uniq("cfg")
    r = c.post(
        f"/v0/topics/{t}", json={"records": data_records(1), "config": {"ttl_ms": 9}}, headers=FULL
    )
    assert ok(r, 201)["created"] is True


def test_list_filtered_to_allowlist(c: httpx.Client) -> None:
    tag = uuid.uuid4().hex[:8]
    allowed = {f"tenant1.{tag}a", f"tenant1.{tag}b", f"shared:{tag}"}
    denied = {f"tenant2.{tag}", f"other{tag}", f"tenant1{tag}"}
    for n in allowed | denied:
        create(c, n)
    seen: list[str] = []
    cursor = ""
    for _ in range(1000):
        body = ok(c.get("/v0/topics", params={"page_size": 2, "cursor": cursor}, headers=TENANT))
        seen += [r["topic"] for r in body["topics"]]
        if "next_cursor" not in body:
            break
        cursor = body["next_cursor"]
    assert all(n.startswith(("tenant1.", "shared:")) for n in seen), seen
    assert allowed <= set(seen)
    assert len(seen) == len(set(seen))
    body = ok(c.get("/v0/topics", params={"prefix": f"tenant1.{tag}"}, headers=TENANT))
    assert [r["topic"] for r in body["topics"]] == sorted(allowed - {f"shared:{tag}"})
    body = ok(c.get("/v0/topics", params={"prefix": f"tenant2.{tag}"}, headers=FULL))
    assert [r["topic"] for r in body["topics"]] == [f"tenant2.{tag}"]
    body = ok(c.get("/v0/topics", params={"prefix": f"tenant2.{tag}"}, headers=TENANT))
    assert body["topics"] == []


def test_a_prefix_key_lists_and_touches_only_its_names(c: httpx.Client) -> None:
    """No `next_cursor` when nothing more the key may see follows (never an empty page at
    the end), and `touch=true` leaves the names it may not see alone (API §0.9, §1.3)."""
    tag = uuid.uuid4().hex[:8]
    mine, hidden = [f"tenant1.{tag}{k}" for k in "ab"], f"tenant1{tag}z"  # "." sorts first
    for n in [*mine, hidden]:
        create(c, n)
    before = ok(c.get(f"/v0/topics/{hidden}", params={"touch": "false"}, headers=FULL))
    listed: list[str] = []
    params = {"prefix": "tenant1", "page_size": 2, "touch": "true"}
    for _ in range(1000):
        body = ok(c.get("/v0/topics", params=params, headers=TENANT))
        assert body["topics"], f"an empty page after {listed}"
        listed += [r["topic"] for r in body["topics"]]
        if "next_cursor" not in body:
            break
        params["cursor"] = body["next_cursor"]
    assert set(mine) <= set(listed) and hidden not in listed
    after = ok(c.get(f"/v0/topics/{hidden}", params={"touch": "false"}, headers=FULL))
    assert after["last_read_ts"] == before["last_read_ts"]
    assert after["effective_priority"] == before["effective_priority"]


def test_other_method_under_topic_needs_write_scope(c: httpx.Client) -> None:
    error_of(c.patch("/v0/topics/anything", headers=RONLY), 403, "forbidden")
    error_of(c.get("/v0/topics/outside/diff", headers=TENANT), 403, "forbidden")
    # API §1.3/§12: any method, even one no route lists, is a write under a topic
    for method in ("TRACE", "PROPFIND", "FOO"):
        for path in ("/v0/topics/anything", "/v0/topics/anything/diff", "/v0/topics/x/work"):
            error_of(c.request(method, path, headers=RONLY), 403, "forbidden")
            error_of(c.request(method, path, headers=FULL), 405, "method_not_allowed")
        error_of(c.request(method, "/v0/topics/outside", headers=TENANT), 403, "forbidden")
        # "other methods on /v0/routers/:r": admin, then 405
        error_of(c.request(method, "/v0/routers/r1", headers=RONLY), 403, "forbidden")
        error_of(c.request(method, "/v0/routers/r1", headers=FULL), 405, "method_not_allowed")


def test_a_config_on_a_write_that_would_not_create_needs_no_admin(c: httpx.Client) -> None:
    """API §1.3: only a write that would create its topic needs admin for a body config;
    one with `create: false` (or a config with `auto_create: false`) to a missing topic is
    a plain `404`."""
    t = uniq("nx")
    for body in (
        {"records": data_records(1), "config": {}, "create": False},
        {"records": data_records(1), "config": {"auto_create": False}},
    ):
        error_of(c.post(f"/v0/topics/{t}", json=body, headers=WONLY), 404, "topic_not_found")
    r = c.post(f"/v0/topics/{t}", json={"records": data_records(1), "config": {}}, headers=WONLY)
    error_of(r, 403, "forbidden")
    error_of(c.get(f"/v0/topics/{t}", headers=FULL), 404, "topic_not_found")


def test_watch_stream_get_is_exempt_from_authentication(c: httpx.Client) -> None:
    """API §1.2/§7.2: `GET /v0/watch/:wid` is not authenticated up front; an unknown wid
    is `404 not_found` (no key needed to learn that)."""
    error_of(c.get("/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA"), 404, "not_found")


# --------------------------------------------------------------------------- probes


@pytest.mark.parametrize("path", ["/v0/health", "/healthz", "/v0/ready", "/readyz"])
def test_probes_open_without_probe_auth(c: httpx.Client, path: str) -> None:
    for headers in ({}, bearer("nope"), ADM):
        r = c.get(path, headers=headers)
        assert r.status_code == 200, describe(r)


def test_probe_auth_closes_probes(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "adm:a,ro:r", "SEGLOG_PROBE_AUTH": "true"})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        for path in ("/v0/health", "/healthz", "/v0/ready", "/readyz"):
            error_of(c.get(path), 401, "unauthorized")
            error_of(c.get(path, headers=bearer("nope")), 401, "unauthorized")
            assert c.get(path, headers=bearer("adm")).status_code == 200  # any scope
            assert c.get(path, headers=bearer("ro")).status_code == 200
        error_of(c.get("/v0/metrics", headers=bearer("adm")), 403, "forbidden")
        assert c.get("/v0/metrics", headers=bearer("ro")).status_code == 200


# --------------------------------------------------------------------------- in-flight cap


def test_inflight_per_key_cap(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "k1,k2", "SEGLOG_MAX_INFLIGHT_PER_KEY": "1"})
    k1, k2 = bearer("k1"), bearer("k2")
    with httpx.Client(base_url=srv.url, timeout=15) as c:
        ok(c.post("/v0/topics/lp", json={"records": data_records(1)}, headers=k1), 201)
        done: dict[str, httpx.Response] = {}

        def hold() -> None:
            with httpx.Client(base_url=srv.url, timeout=15) as c2:
                done["r"] = c2.post(
                    "/v0/topics/lp/diff", json={"from_seq": 1, "wait_ms": 1500}, headers=k1
                )

        th = threading.Thread(target=hold)
        th.start()
        time.sleep(0.4)
        assert th.is_alive()
        err = error_of(c.get("/v0/topics", headers=k1), 429, "throttled")
        assert "detail" not in err
        ok(c.get("/v0/topics", headers=k2))
        th.join(10)
        assert ok(done["r"])["records"] == []
        ok(c.get("/v0/topics", headers=k1))  # the slot was released


# --------------------------------------------------------------------------- startup guard


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_startup_guard_refuses_wildcard_without_keys(host: str) -> None:
    rc, out = run_to_exit({"SEGLOG_HOST": host})
    assert rc is not None and rc != 0, out
    assert "SEGLOG_ALLOW_INSECURE_NO_AUTH" in out or "loopback" in out.lower(), out


def test_startup_guard_allow_insecure(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_HOST": "0.0.0.0", "SEGLOG_ALLOW_INSECURE_NO_AUTH": "true"})
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        assert c.get("/v0/health").status_code == 200
        ok(c.put("/v0/topics/open"), 201)  # auth disabled


@pytest.mark.parametrize("keys", ["good,bad:rx", "k:r:p1.,j:read+admin+x"])
def test_bad_scope_token_refuses_to_start(keys: str) -> None:
    rc, out = run_to_exit({"SEGLOG_API_KEYS": keys})
    assert rc is not None and rc != 0, out
    assert "scope" in out.lower(), out


def test_json_content_type_still_checked_with_auth(c: httpx.Client) -> None:
    t = uniq("tenant1.")
    r = c.post(f"/v0/topics/{t}", content=b'{"records":[{"data":1}]}', headers={**TENANT, **JSON})
    assert ok(r, 201)["seqs"] == [1]


def test_inflight_slot_released_on_client_disconnect(make_server: ServerFactory) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "k1", "SEGLOG_MAX_INFLIGHT_PER_KEY": "1"})
    k1 = bearer("k1")
    with httpx.Client(base_url=srv.url, timeout=15) as c:
        ok(c.post("/v0/topics/lp", json={"records": data_records(1)}, headers=k1), 201)
        with pytest.raises(httpx.TimeoutException):
            httpx.post(
                srv.url + "/v0/topics/lp/diff",
                json={"from_seq": 1, "wait_ms": 4000},
                headers=k1,
                timeout=0.3,
            )
        deadline = time.monotonic() + 1.5
        status = 0
        while time.monotonic() < deadline:
            status = c.get("/v0/topics", headers=k1).status_code
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200


def test_duplicate_secret_first_entry_wins(c: httpx.Client) -> None:
    # KEYS has "ronly:r" and later "ronly:admin": the first entry wins
    error_of(c.put(f"/v0/topics/{uniq('dup')}", headers=RONLY), 403, "forbidden")


def test_tokens_never_logged(c: httpx.Client, auth_server: ServerProcess) -> None:
    good = bearer("S3cr3t-Unlogged-Token")
    ok(c.post(f"/v0/topics/{uniq('log')}", json={"records": data_records(1)}, headers=good), 201)
    error_of(c.get("/v0/topics", headers=bearer("Wr0ng-Unlogged-Token")), 401, "unauthorized")
    error_of(c.get("/v0/nope", headers=bearer("Wr0ng-Unlogged-Token")), 401, "unauthorized")
    log = auth_server.log_text()
    assert "S3cr3t-Unlogged-Token" not in log and "Wr0ng-Unlogged-Token" not in log
