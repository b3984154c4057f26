"""Black-box: edges of the wire contract a conformance audit found the server off on (API
§0.2, §0.10, §4, §9): what counts as an empty body, the `Idempotency-Key` header's bytes,
the range of `u32` fields, and the empty bodies of the queue routes."""

from __future__ import annotations

import httpx
import pytest

from tests.http.live import data_records, diff, error_of, ok, put_topic, write


def test_whitespace_is_a_body_not_an_empty_one(client: httpx.Client, topic: str) -> None:
    """Only a body of no bytes is `{}` on PUT and diff: whitespace with another content
    type is `415`, and the topic's config stays as it was."""
    put_topic(client, topic, {"ttl_ms": 60000, "cap_records": 5, "durability": "fsync"})
    for body in (b" ", b"\n", b"\r\n\t "):
        r = client.put(f"/v0/topics/{topic}", content=body, headers={"content-type": "text/plain"})
        error_of(r, 415, "unsupported_media_type")
        r = client.post(
            f"/v0/topics/{topic}/diff", content=body, headers={"content-type": "text/plain"}
        )
        error_of(r, 415, "unsupported_media_type")
        r = client.put(
            f"/v0/topics/{topic}", content=body, headers={"content-type": "application/json"}
        )
        error_of(r, 400, "invalid_request")
    config = ok(client.get(f"/v0/topics/{topic}"))["config"]
    assert (config["ttl_ms"], config["cap_records"], config["durability"]) == (60000, 5, "fsync")
    assert ok(client.put(f"/v0/topics/{topic}", content=b""), 200)["config"]["ttl_ms"] == 0


def test_idempotency_key_header_is_utf8_like_the_body_key(client: httpx.Client, topic: str) -> None:
    key = "é" + "ü" * 127  # 256 bytes of UTF-8
    first = write(client, topic, data_records(1), idempotency_key=key)
    r = client.post(
        f"/v0/topics/{topic}",
        json={"records": data_records(1)},
        headers={"Idempotency-Key": key.encode()},  # its UTF-8 bytes
    )
    again = ok(r)
    assert again["deduped"] is True and again["first_seq"] == first["first_seq"]
    over = ("ü" * 129).encode()  # 258 bytes
    r = client.post(
        f"/v0/topics/{topic}", json={"records": data_records(1)}, headers={"Idempotency-Key": over}
    )
    error_of(r, 400, "invalid_request")
    latin = write(client, topic, data_records(1), idempotency_key="café")
    r = client.post(
        f"/v0/topics/{topic}",
        json={"records": data_records(1)},
        headers={"Idempotency-Key": "café".encode("latin-1")},  # not UTF-8: read as Latin-1
    )
    assert ok(r)["deduped"] is True and ok(r)["first_seq"] == latin["first_seq"]
    seqs = [x["$seq"] for x in diff(client, topic)["records"]]
    assert seqs == [first["first_seq"], latin["first_seq"]]


@pytest.mark.parametrize("field", ["limit", "wait_ms"])
def test_u32_diff_fields_out_of_range_are_400(client: httpx.Client, topic: str, field: str) -> None:
    write(client, topic, data_records(1))
    r = client.post(f"/v0/topics/{topic}/diff", json={field: 2**32})
    error_of(r, 400, "invalid_request")
    r = client.post(f"/v0/topics/{topic}/diff", json={field: 2**64 - 1})
    error_of(r, 400, "invalid_request")
    ok(client.post(f"/v0/topics/{topic}/diff", json={field: 2**32 - 1, "wait_ms": 0}))


@pytest.mark.parametrize("verb", ["ack", "nack", "extend"])
def test_an_empty_settle_body_is_checked_for_its_type(
    client: httpx.Client, topic: str, verb: str
) -> None:
    """API §0.2: only a claim's empty body is `400` before the content-type check."""
    put_topic(client, topic, {"type": "queue"})
    error_of(client.post(f"/v0/topics/{topic}/{verb}", content=b""), 415, "unsupported_media_type")
    r = client.post(
        f"/v0/topics/{topic}/{verb}", content=b"", headers={"content-type": "application/json"}
    )
    error_of(r, 400, "invalid_request")
    error_of(client.post(f"/v0/topics/{topic}/claim", content=b""), 400, "invalid_request")
