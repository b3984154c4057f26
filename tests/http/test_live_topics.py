"""Black-box: topic control plane over HTTP (API §0.11, §2) against a real server."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from tests.http.live import (
    CONFIG_KEYS,
    DEFAULT_CONFIG,
    JSON,
    LIST_ROW_KEYS,
    STATE_KEYS,
    cursor_for,
    data_records,
    error_of,
    now_ms,
    ok,
    put_topic,
    state,
    write,
)

Names = Callable[[str], str]

# --------------------------------------------------------------------------- PUT


def test_put_creates_with_defaults_then_identical_is_200(client: httpx.Client, topic: str) -> None:
    body = ok(client.put(f"/v0/topics/{topic}"), 201)
    assert body["topic"] == topic
    assert body["created"] is True
    assert body["config"] == DEFAULT_CONFIG
    assert list(body["config"]) == CONFIG_KEYS
    again = ok(client.put(f"/v0/topics/{topic}", json={}), 200)
    assert again["created"] is False
    assert again["config"] == DEFAULT_CONFIG
    assert list(again["config"]) == CONFIG_KEYS


def test_put_update_replaces_config_wholesale(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic, {"ttl_ms": 60000, "cap_records": 5, "priority": 10})
    changed = ok(client.put(f"/v0/topics/{topic}", json={"cap_records": 7}), 200)
    assert changed["created"] is False
    expected = {**DEFAULT_CONFIG, "cap_records": 7}
    assert changed["config"] == expected  # ttl_ms / priority fell back to defaults
    assert state(client, topic)["config"] == expected


def test_put_echo_full_config_in_key_order(client: httpx.Client, topic: str) -> None:
    cfg = {
        "leases_durable": True,
        "dead_letter": "dlq-x",
        "max_deliveries": 3,
        "claim_jitter_ms": 10,
        "lease_ms": 1000,
        "dedupe_node": False,
        "idempotency_window_ms": 5,
        "auto_create": False,
        "auto_priority": False,
        "priority": -7,
        "durability": "memory",
        "discard": "reject",
        "cap_bytes": 9,
        "cap_records": 8,
        "ttl_ms": 7,
        "type": "log",
        "ignored_unknown_field": {"x": 1},
    }
    body = put_topic(client, topic, cfg)
    assert list(body["config"]) == CONFIG_KEYS
    expected = {k: v for k, v in cfg.items() if k != "ignored_unknown_field"}
    expected["durable"] = False
    assert body["config"] == expected
    got = state(client, topic)
    assert list(got["config"]) == CONFIG_KEYS
    assert got["config"] == expected


@pytest.mark.parametrize(
    ("given", "durable", "durability"),
    [
        ({"durable": True}, True, "fsync"),
        ({"durable": False}, False, "disk"),
        ({"durability": "fsync"}, True, "fsync"),
        ({"durable": True, "durability": "disk"}, False, "disk"),
        ({"durable": True, "durability": "memory"}, False, "memory"),
        ({"durable": False, "durability": "fsync"}, True, "fsync"),
        ({"durability": "ephemeral"}, False, "ephemeral"),
    ],
)
def test_durable_durability_aliasing(
    client: httpx.Client, topic: str, given: dict[str, Any], durable: bool, durability: str
) -> None:
    cfg = put_topic(client, topic, given)["config"]
    assert (cfg["durable"], cfg["durability"]) == (durable, durability)


def test_durability_is_mutable_in_place(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic, {"durability": "disk"})
    write(client, topic, data_records(1))
    cfg = ok(client.put(f"/v0/topics/{topic}", json={"durable": True}))["config"]
    assert cfg["durability"] == "fsync" and cfg["durable"] is True
    assert write(client, topic, data_records(2))["seqs"] == [2]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"lease_ms": 0}, {"lease_ms": 100}),
        ({"lease_ms": 5}, {"lease_ms": 100}),
        ({"lease_ms": 100}, {"lease_ms": 100}),
        ({"lease_ms": 86400001}, {"lease_ms": 86400000}),
        ({"lease_ms": 10**15}, {"lease_ms": 86400000}),
        ({"claim_jitter_ms": 5001}, {"claim_jitter_ms": 5000}),
        ({"claim_jitter_ms": 10**12}, {"claim_jitter_ms": 5000}),
        ({"claim_jitter_ms": 4999}, {"claim_jitter_ms": 4999}),
        ({"priority": 5000}, {"priority": 5000}),  # stored as given, clamped only when used
        ({"priority": -(2**31)}, {"priority": -(2**31)}),
    ],
)
def test_config_clamps(
    client: httpx.Client, topic: str, given: dict[str, Any], expected: dict[str, Any]
) -> None:
    cfg = put_topic(client, topic, given)["config"]
    assert cfg == {**DEFAULT_CONFIG, **expected}


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "stream"},
        {"ttl_ms": "60000"},
        {"ttl_ms": -1},
        {"ttl_ms": 1.5},
        {"ttl_ms": True},
        {"ttl_ms": 2**64},
        {"discard": "new"},
        {"durable": "yes"},
        {"durability": "tape"},
        {"priority": 1.5},
        {"priority": "high"},
        {"priority": 2**31},
        {"auto_create": 1},
        {"dead_letter": 5},
        {"lease_ms": -100},
    ],
)
def test_put_bad_field_types_400(client: httpx.Client, topic: str, bad: dict[str, Any]) -> None:
    error_of(client.put(f"/v0/topics/{topic}", json=bad), 400, "invalid_request")
    error_of(client.get(f"/v0/topics/{topic}"), 404, "topic_not_found")


@pytest.mark.parametrize("raw", [b"[]", b'"x"', b"1", b"null", b"true"])
def test_put_non_object_body_400(client: httpx.Client, topic: str, raw: bytes) -> None:
    error_of(client.put(f"/v0/topics/{topic}", content=raw, headers=JSON), 400, "invalid_request")


@pytest.mark.parametrize(
    "name",
    ["-lead", "_lead", ".lead", "has space", "x" * 256, "caf%C3%A9", "a*b", "a>b", "a%00b"],
)
def test_put_invalid_topic_name_400(client: httpx.Client, name: str) -> None:
    error_of(client.put(f"/v0/topics/{name}"), 400, "invalid_request")


def test_put_max_length_name_and_charset_ok(client: httpx.Client, tname: Names) -> None:
    long = ("L" + tname("")).ljust(255, "z")[:255]
    assert ok(client.put(f"/v0/topics/{long}"), 201)["topic"] == long
    odd = tname("") + "A.b_c:d-9"
    assert ok(client.put(f"/v0/topics/{odd}"), 201)["topic"] == odd
    assert state(client, odd)["topic"] == odd


def test_names_are_case_sensitive(client: httpx.Client, tname: Names) -> None:
    n = tname("Case")
    put_topic(client, n)
    put_topic(client, n.lower(), status=201)
    error_of(client.get(f"/v0/topics/{n.upper()}"), 404, "topic_not_found")


def test_type_change_is_409_with_detail(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    err = error_of(
        client.put(f"/v0/topics/{topic}", json={"type": "queue"}), 409, "topic_exists_incompatible"
    )
    assert err["detail"] == {"topic": topic, "existing_type": "log", "requested_type": "queue"}
    assert state(client, topic)["type"] == "log"


def test_put_empty_on_queue_is_type_change(client: httpx.Client, topic: str) -> None:
    cfg = put_topic(client, topic, {"type": "queue"})["config"]
    assert cfg["type"] == "queue"
    err = error_of(client.put(f"/v0/topics/{topic}"), 409, "topic_exists_incompatible")
    assert err["detail"] == {"topic": topic, "existing_type": "queue", "requested_type": "log"}
    ok(client.put(f"/v0/topics/{topic}", json={"type": "queue", "ttl_ms": 5}), 200)


def test_queue_topic_state_has_queue_counters(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic, {"type": "queue"})
    s = state(client, topic)
    assert s["type"] == "queue"
    assert s.get("queue") == {"ready": 0, "in_flight": 0, "dead_lettered": 0}
    write(client, topic, data_records(1, 2))
    assert state(client, topic)["queue"] == {"ready": 2, "in_flight": 0, "dead_lettered": 0}


def test_log_topic_state_has_no_queue_key(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    assert "queue" not in state(client, topic)


def test_dead_letter_validation(client: httpx.Client, tname: Names) -> None:
    t = tname("dl")
    err = error_of(
        client.put(f"/v0/topics/{t}", json={"dead_letter": "bad name!"}), 400, "invalid_request"
    )
    assert err.get("detail", {}).get("dead_letter") == "bad name!"
    q = tname("q")
    error_of(
        client.put(f"/v0/topics/{q}", json={"type": "queue", "dead_letter": q}),
        400,
        "invalid_request",
    )
    error_of(client.get(f"/v0/topics/{q}"), 404, "topic_not_found")
    # on a log topic a self dead-letter is accepted (queue fields have no effect there)
    assert put_topic(client, t, {"dead_letter": t})["config"]["dead_letter"] == t


def test_put_wrong_content_type_with_body_415(client: httpx.Client, topic: str) -> None:
    r = client.put(
        f"/v0/topics/{topic}", content=b'{"ttl_ms":1}', headers={"Content-Type": "text/plain"}
    )
    error_of(r, 415, "unsupported_media_type")
    r = client.put(f"/v0/topics/{topic}", content=b'{"ttl_ms":1}')
    error_of(r, 415, "unsupported_media_type")


def test_put_empty_body_any_content_type_is_empty_object(client: httpx.Client, topic: str) -> None:
    r = client.put(f"/v0/topics/{topic}", content=b"", headers={"Content-Type": "text/plain"})
    assert ok(r, 201)["config"] == DEFAULT_CONFIG


def test_put_content_type_prefix_rules(client: httpx.Client, tname: Names) -> None:
    for ct in (
        "application/json; charset=utf-8",
        "application/json;x=y",
        "application/json;charset=utf-8",
    ):
        r = client.put(
            f"/v0/topics/{tname('ct')}", content=b'{"ttl_ms":1}', headers={"Content-Type": ct}
        )
        assert ok(r, 201)["config"]["ttl_ms"] == 1


def test_put_malformed_json_400_prefix(client: httpx.Client, topic: str) -> None:
    r = client.put(f"/v0/topics/{topic}", content=b'{"ttl_ms":', headers=JSON)
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")


def test_put_field_type_error_message_prefix(client: httpx.Client, topic: str) -> None:
    r = client.put(f"/v0/topics/{topic}", json={"ttl_ms": "x"})
    error_of(r, 400, "invalid_request", message_prefix="malformed JSON body:")


# --------------------------------------------------------------------------- GET state


def test_fresh_topic_state(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    s = state(client, topic)
    assert set(s) >= STATE_KEYS
    assert s["topic"] == topic and s["type"] == "log"
    assert (s["head_seq"], s["earliest_seq"], s["next_seq"], s["count"], s["bytes"]) == (
        0,
        1,
        1,
        0,
        0,
    )
    assert s["config"] == DEFAULT_CONFIG and list(s["config"]) == CONFIG_KEYS
    assert s["last_write_ts"] is None
    assert s["last_read_ts"] is None  # touch=false never marks a read
    assert isinstance(s["effective_priority"], int)


def test_state_after_writes(client: httpx.Client, topic: str) -> None:
    t0 = now_ms()
    write(client, topic, [{"data": {"a": 1}, "meta": {"k": "v"}}, {"data": "xy"}, {"data": None}])
    s = state(client, topic)
    assert (s["head_seq"], s["earliest_seq"], s["next_seq"], s["count"]) == (3, 1, 4, 3)
    assert s["bytes"] == len(b'{"a":1}') + len(b'{"k":"v"}') + len(b'"xy"') + len(b"null")
    assert (
        isinstance(s["last_write_ts"], int) and t0 - 1000 <= s["last_write_ts"] <= now_ms() + 1000
    )


def test_touch_controls_last_read_ts(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    assert state(client, topic)["last_read_ts"] is None
    ok(client.get(f"/v0/topics/{topic}", params={"touch": "0"}))
    assert state(client, topic)["last_read_ts"] is None
    t0 = now_ms()
    ok(client.get(f"/v0/topics/{topic}", params={"touch": "bogus"}))  # anything else = default true
    ts = state(client, topic)["last_read_ts"]
    assert isinstance(ts, int) and t0 - 1000 <= ts <= now_ms() + 1000


def test_effective_priority(client: httpx.Client, tname: Names) -> None:
    auto = tname("auto")
    put_topic(client, auto)
    assert state(client, auto)["effective_priority"] == 0  # never consumed
    assert ok(client.get(f"/v0/topics/{auto}"))["effective_priority"] == 500  # after its own touch
    hi = tname("hi")
    put_topic(client, hi, {"priority": 5000})
    assert ok(client.get(f"/v0/topics/{hi}"))["effective_priority"] == 1000
    lo = tname("lo")
    put_topic(client, lo, {"priority": -5000})
    assert ok(client.get(f"/v0/topics/{lo}"))["effective_priority"] == -1000
    off = tname("off")
    put_topic(client, off, {"auto_priority": False})
    assert ok(client.get(f"/v0/topics/{off}"))["effective_priority"] == 0


@pytest.mark.parametrize("name", ["never-created-x", "bad name", "-x", "x" * 300])
def test_get_absent_or_impossible_name_404(client: httpx.Client, name: str) -> None:
    err = error_of(client.get(f"/v0/topics/{name}"), 404, "topic_not_found")
    if name == "never-created-x":
        assert err["detail"] == {"topic": name}


def test_get_never_auto_creates(client: httpx.Client, topic: str) -> None:
    error_of(client.get(f"/v0/topics/{topic}"), 404, "topic_not_found")
    error_of(client.post(f"/v0/topics/{topic}/diff", json={}), 404, "topic_not_found")
    error_of(client.get(f"/v0/topics/{topic}"), 404, "topic_not_found")


# --------------------------------------------------------------------------- list


@pytest.fixture
def listed(client: httpx.Client, tname: Names) -> tuple[str, list[str]]:
    prefix = tname("L") + "."
    names = [prefix + s for s in ("e", "a", "c", "b", "d")]
    for n in names:
        put_topic(client, n)
    return prefix, sorted(names)


def _list(client: httpx.Client, **params: Any) -> dict[str, Any]:
    return ok(client.get("/v0/topics", params=params))


def test_list_prefix_sorted_rows(client: httpx.Client, listed: tuple[str, list[str]]) -> None:
    prefix, names = listed
    write(client, names[0], data_records(1, 2))
    put_topic(client, names[1], {"durable": True}, status=200)
    body = _list(client, prefix=prefix)
    assert [r["topic"] for r in body["topics"]] == names
    assert "next_cursor" not in body
    for row in body["topics"]:
        assert set(row) >= LIST_ROW_KEYS
    first = body["topics"][0]
    assert (first["head_seq"], first["earliest_seq"], first["count"]) == (2, 1, 2)
    assert first["bytes"] == 2 and first["durable"] is False
    assert body["topics"][1]["durable"] is True
    assert isinstance(first["effective_priority"], int)


def test_list_paging_cursor_format(client: httpx.Client, listed: tuple[str, list[str]]) -> None:
    prefix, names = listed
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"prefix": prefix, "page_size": 2}
        if cursor is not None:
            params["cursor"] = cursor
        body = _list(client, **params)
        pages += 1
        page = [r["topic"] for r in body["topics"]]
        seen += page
        if "next_cursor" not in body:
            break
        cursor = body["next_cursor"]
        assert isinstance(cursor, str)
        # standard base64 with padding of the compact JSON {"after":"<last name>"}
        assert base64.b64decode(cursor, validate=True) == orjson.dumps({"after": page[-1]})
        assert cursor == cursor_for(page[-1])
    assert seen == names
    assert pages == 3


def test_list_exact_page_has_no_next_cursor(
    client: httpx.Client, listed: tuple[str, list[str]]
) -> None:
    prefix, names = listed
    body = _list(client, prefix=prefix, page_size=5)
    assert [r["topic"] for r in body["topics"]] == names
    assert "next_cursor" not in body


@pytest.mark.parametrize(
    ("size", "rows"), [("0", 1), ("-3", 1), ("1", 1), ("abc", 5), ("", 5), ("100000", 5), ("4", 4)]
)
def test_list_page_size_clamps(
    client: httpx.Client, listed: tuple[str, list[str]], size: str, rows: int
) -> None:
    prefix, names = listed
    body = _list(client, prefix=prefix, page_size=size)
    assert [r["topic"] for r in body["topics"]] == names[:rows]
    assert ("next_cursor" in body) == (rows < 5)


def test_list_handmade_cursor_and_empty_cursor(
    client: httpx.Client, listed: tuple[str, list[str]]
) -> None:
    prefix, names = listed
    body = _list(client, prefix=prefix, cursor=cursor_for(names[2]))
    assert [r["topic"] for r in body["topics"]] == names[3:]
    # `after` need not be an existing name: strictly greater names follow
    body = _list(client, prefix=prefix, cursor=cursor_for(names[2] + "0"))
    assert [r["topic"] for r in body["topics"]] == names[3:]
    body = _list(client, prefix=prefix, cursor="")
    assert [r["topic"] for r in body["topics"]] == names


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!not-base64!!!",
        base64.b64encode(b"not json").decode(),
        base64.b64encode(b'{"x":"a"}').decode(),
        base64.b64encode(b'{"after":5}').decode(),
        base64.b64encode(b'["a"]').decode(),
    ],
)
def test_list_malformed_cursor_400(client: httpx.Client, cursor: str) -> None:
    r = client.get("/v0/topics", params={"cursor": cursor})
    err = error_of(r, 400, "invalid_request")
    assert err["message"] == "malformed cursor"


def test_list_without_prefix_includes_topic(client: httpx.Client, topic: str) -> None:
    put_topic(client, topic)
    names: list[str] = []
    cursor = ""
    for _ in range(100):
        body = _list(client, page_size=1000, cursor=cursor)
        names += [r["topic"] for r in body["topics"]]
        if "next_cursor" not in body:
            break
        cursor = body["next_cursor"]
    assert topic in names
    assert names == sorted(names, key=lambda n: n.encode())


def test_list_prefix_no_match_is_empty(client: httpx.Client, tname: Names) -> None:
    body = _list(client, prefix=tname("nothing-here"))
    assert body["topics"] == [] and "next_cursor" not in body


# --------------------------------------------------------------------------- DELETE


def test_delete_absent_topic_200_false(client: httpx.Client, topic: str) -> None:
    body = ok(client.delete(f"/v0/topics/{topic}"))
    assert body["topic"] == topic
    assert body["deleted"] is False
    assert body["routers_removed"] == []


def test_delete_existing_then_gone(client: httpx.Client, topic: str) -> None:
    write(client, topic, data_records(1, 2))
    body = ok(client.delete(f"/v0/topics/{topic}"))
    assert (body["topic"], body["deleted"], body["routers_removed"]) == (topic, True, [])
    error_of(client.get(f"/v0/topics/{topic}"), 404, "topic_not_found")
    assert ok(client.delete(f"/v0/topics/{topic}"))["deleted"] is False


def test_delete_if_empty(client: httpx.Client, tname: Names) -> None:
    full = tname("full")
    write(client, full, data_records(1, 2, 3))
    err = error_of(
        client.delete(f"/v0/topics/{full}", params={"if_empty": "true"}), 409, "topic_not_empty"
    )
    assert err["detail"] == {"topic": full, "count": 3}
    assert state(client, full)["count"] == 3
    # if_empty=false (and anything unparseable = default false) deletes anyway
    assert ok(client.delete(f"/v0/topics/{full}", params={"if_empty": "nah"}))["deleted"] is True
    empty = tname("empty")
    put_topic(client, empty)
    assert ok(client.delete(f"/v0/topics/{empty}", params={"if_empty": "1"}))["deleted"] is True
    # a topic whose records were all deleted has count 0 and counts as empty
    drained = tname("drained")
    write(client, drained, data_records(1, 2))
    ok(client.post(f"/v0/topics/{drained}/delete", json={"before_seq": 100}))
    assert ok(client.delete(f"/v0/topics/{drained}", params={"if_empty": "true"}))["deleted"]


def test_recreate_is_new_instance(client: httpx.Client, topic: str) -> None:
    write(client, topic, data_records(1, 2, 3, 4, 5))
    ok(client.delete(f"/v0/topics/{topic}"))
    created = write(client, topic, data_records("new"), status=201)
    assert created["seqs"] == [1] and created["created"] is True
    # a stale cursor from the old instance (5 > head 1) learns about the recreation
    d = ok(client.post(f"/v0/topics/{topic}/diff", json={"from_seq": 5}))
    assert d["tombstone"] == {
        "gap_from": 1,
        "gap_to": 1,
        "reason": "recreated",
        "missed_estimate": 1,
        "earliest_seq": 1,
        "head_seq": 1,
    }
    assert [r["data"] for r in d["records"]] == ["new"]
    assert d["next_from_seq"] == 1 and d["caught_up"] is True
