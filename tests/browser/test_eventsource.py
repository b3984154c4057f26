"""A browser's own `EventSource` against the multiplexed SSE watch (API §7, §1.2), unchanged:
headless Chromium, the page served by seglog itself (`/v0/health`, so the stream is same-origin
and needs no CORS), the stream opened with the relative `stream_url` that `POST /v0/watch`
returns. Records are written over HTTP from Python; every assertion about what arrived is
made on what the page's EventSource dispatched (`type`, `lastEventId`, `data`, `readyState`).

Covered:
- `record` / `tombstone` / `caught-up` events, their composite-cursor `lastEventId` (§7.4),
  the `from_seq_too_old` tombstone on the first read of a capped topic (§7.3);
- resume by `es.close()` + a new EventSource on the same session (session cursors);
- the browser's own auto-reconnect with `Last-Event-ID`, after (a) a dropped connection — a
  test proxy swallows frames the server already counted as sent, then cuts the connection,
  so only the rewind by `Last-Event-ID` can recover them — and (b) the server ending the
  stream because every watched topic was deleted;
- shutdown: the `event: error` frame reaches the page, and the reconnect to a fresh server
  process (sessions are in memory) ends in `404`, which closes the EventSource for good;
- `?token=` auth (§1.2, §7.2): the creating key works, other/unknown/absent keys get `401`,
  i.e. `onerror` with `readyState == CLOSED`.

Not covered: resuming a session across a server restart (impossible by design: sessions
are in memory only, §7.1) and HTTP/2 (Chromium speaks h2 only over TLS; seglog is h2c).
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import httpx
import pytest

from tests.browser.conftest import ServerFactory, SseProxy, wait_until
from tests.support.server import ServerProcess

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.timeout(60)

# Installed into the page: opens EventSources and logs every event they dispatch.
WATCH_JS = """
() => {
  if (window.__seglog) return;
  const watches = {};
  const push = (w, kind, e) => w.log.push({
    kind,
    type: e.type,
    id: typeof e.lastEventId === "string" ? e.lastEventId : null,
    data: typeof e.data === "string" ? e.data : null,
    state: w.es.readyState,
    t: performance.now(),
  });
  window.__seglog = {
    open(name, url) {
      const w = { log: [], es: new EventSource(url) };
      watches[name] = w;
      w.es.onopen = (e) => push(w, "open", e);
      for (const t of ["record", "tombstone", "caught-up", "topic-deleted", "message"]) {
        w.es.addEventListener(t, (e) => push(w, t, e));
      }
      // A server frame `event: error` is dispatched as a MessageEvent named "error";
      // a connection failure is a plain Event named "error".
      w.es.addEventListener("error", (e) =>
        push(w, e instanceof MessageEvent ? "error-frame" : "error", e));
    },
    close(name) { watches[name].es.close(); },
    state(name) { return watches[name].es.readyState; },
    lastEventId(name) {
      // not exposed by EventSource itself: the id of the last dispatched message event
      const ids = watches[name].log.filter((x) => x.id !== null && x.kind !== "error");
      return ids.length ? ids[ids.length - 1].id : "";
    },
    log(name) { return watches[name].log; },
    count(name, kind) { return watches[name].log.filter((x) => x.kind === kind).length; },
    has(name, kind, topic) {
      return watches[name].log.some(
        (x) => x.kind === kind && (topic === undefined || JSON.parse(x.data).topic === topic));
    },
    seqs(name, topic) {
      const out = [];
      for (const x of watches[name].log) {
        if (x.kind !== "record") continue;
        const d = JSON.parse(x.data);
        if (d.topic === topic) for (const r of d.records) out.push(r["$seq"]);
      }
      return out;
    },
  };
}
"""

CONNECTING, OPEN, CLOSED = 0, 1, 2


def decode_cursor(event_id: str) -> dict[str, int]:
    """The composite cursor (API §7.4): unpadded base64url of compact JSON, keys sorted."""
    raw = base64.urlsafe_b64decode(event_id + "=" * (-len(event_id) % 4))
    assert raw == json.dumps(json.loads(raw), separators=(",", ":"), sort_keys=True).encode()
    value = json.loads(raw)
    assert isinstance(value, dict)
    return cast(dict[str, int], value)


class BrowserWatch:
    """One EventSource in a page, with waits on what it dispatched."""

    _n = 0

    def __init__(self, page: Page, url: str) -> None:
        BrowserWatch._n += 1
        self.page = page
        self.name = f"w{BrowserWatch._n}"
        page.evaluate(WATCH_JS)
        page.evaluate("([n, u]) => window.__seglog.open(n, u)", [self.name, url])

    def js(self, expr: str) -> Any:
        return self.page.evaluate(f"() => {expr.replace('$W', repr(self.name))}")

    def wait(self, expr: str, timeout_ms: float = 10_000) -> None:
        """Wait until the JS expression (`$W` = this watch's name) is truthy."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        body = expr.replace("$W", repr(self.name))
        try:
            self.page.wait_for_function(f"() => {body}", timeout=timeout_ms, polling=20)
        except PlaywrightTimeout:
            kinds = [(e["kind"], e["data"]) for e in self.log()]
            pytest.fail(f"timed out waiting for {body}; events so far: {kinds}", pytrace=False)

    def wait_seqs(self, topic: str, n: int, timeout_ms: float = 10_000) -> None:
        self.wait(f"window.__seglog.seqs($W, {json.dumps(topic)}).length >= {n}", timeout_ms)

    def wait_kind(self, kind: str, topic: str | None = None, count: int = 1) -> None:
        if topic is None:
            self.wait(f"window.__seglog.count($W, {json.dumps(kind)}) >= {count}")
        else:
            self.wait(f"window.__seglog.has($W, {json.dumps(kind)}, {json.dumps(topic)})")

    def log(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.js("window.__seglog.log($W)"))

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.log() if e["kind"] == kind]

    def seqs(self, topic: str) -> list[int]:
        return cast(list[int], self.js(f"window.__seglog.seqs($W, {json.dumps(topic)})"))

    def state(self) -> int:
        return cast(int, self.js("window.__seglog.state($W)"))

    def close(self) -> None:
        self.js("window.__seglog.close($W)")


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def topic_names(request: pytest.FixtureRequest) -> Callable[[str], str]:
    base = request.node.name.replace("_", "-")[:40]
    return lambda suffix: f"{base}-{suffix}"


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10.0) as c:
        yield c


def write(c: httpx.Client, topic: str, datas: list[Any]) -> list[int]:
    r = c.post(f"/v0/topics/{topic}", json={"records": [{"data": d} for d in datas]})
    assert r.status_code in (200, 201), r.text
    return cast(list[int], r.json()["seqs"])


def create_watch(c: httpx.Client, topics: dict[str, dict[str, Any]], **opts: Any) -> str:
    r = c.post("/v0/watch", json={"topics": topics, **opts})
    assert r.status_code == 200, r.text
    url = r.json()["stream_url"]
    assert isinstance(url, str) and url.startswith("/v0/watch/wid_")
    return url


def open_page(new_page: Callable[[], Page], origin: str) -> Page:
    """A tab on the server's own origin (so EventSource/fetch to it are same-origin)."""
    page = new_page()
    resp = page.goto(origin + "/v0/health")
    assert resp is not None and resp.status == 200
    return page


def wait_no_open_streams(c: httpx.Client) -> None:
    """Until the server has released every SSE stream (its `sse_connections` gauge is 0).

    `es.close()` returns before the browser's network process has closed the socket; a write
    landing in that window wakes the *old* stream, which advances the session cursors and
    sends into the closing socket. A new EventSource cannot present a `Last-Event-ID`, so
    those frames would be skipped (§7.4: without it the session cursors rule)."""

    def no_streams() -> bool:
        r = c.get("/v0/metrics", headers={"Accept": "application/json"})
        return r.status_code == 200 and r.json()["sse_connections"] == 0

    wait_until("the server to release the closed stream", no_streams)


def check_record_events(events: list[dict[str, Any]], topics: set[str]) -> None:
    """Every `record` event: its lastEventId is the full composite cursor, with this
    topic's cursor at the frame's `to_seq`; seqs ascend within (from_seq, to_seq]."""
    for e in events:
        d = json.loads(e["data"])
        cursor = decode_cursor(e["id"])
        assert set(cursor) == topics, e
        assert cursor[d["topic"]] == d["to_seq"], e
        seqs = [r["$seq"] for r in d["records"]]
        assert seqs == sorted(seqs) and d["from_seq"] < seqs[0] and seqs[-1] <= d["to_seq"], e
        assert d["to_seq"] <= d["head_seq"], e


# --------------------------------------------------------------------------- tests


def test_records_carry_composite_cursor_ids_and_caught_up(
    server: ServerProcess,
    http: httpx.Client,
    new_page: Callable[[], Page],
    topic_names: Callable[[str], str],
) -> None:
    a, b = topic_names("a"), topic_names("b")
    write(http, a, [{"i": 1}, {"i": 2}])
    assert http.put(f"/v0/topics/{b}").status_code == 201
    url = create_watch(http, {a: {"from_seq": 0}, b: {"from_seq": 0}})
    page = open_page(new_page, server.url)

    w = BrowserWatch(page, url)
    w.wait_kind("caught-up", a)
    w.wait_kind("caught-up", b)
    assert w.state() == OPEN
    assert w.seqs(a) == [1, 2]

    write(http, b, ["x", None, {"nested": [1, 2, {"k": "v"}]}])
    write(http, a, [{"i": 3}])
    w.wait_seqs(b, 3)
    w.wait_seqs(a, 3)
    w.wait("window.__seglog.count($W, 'caught-up') >= 4")  # both topics caught up again

    log = w.log()
    assert log[0]["kind"] == "open"
    assert sum(1 for e in log if e["kind"] == "open") == 1
    assert not [e for e in log if e["kind"] in ("error", "error-frame", "message")]
    records = [e for e in log if e["kind"] == "record"]
    check_record_events(records, {a, b})
    assert w.seqs(a) == [1, 2, 3] and w.seqs(b) == [1, 2, 3]
    data = {
        (d["topic"], r["$seq"]): r["data"]
        for d in (json.loads(e["data"]) for e in records)
        for r in d["records"]
    }
    assert data == {
        (a, 1): {"i": 1},
        (a, 2): {"i": 2},
        (a, 3): {"i": 3},
        (b, 1): "x",
        (b, 2): None,
        (b, 3): {"nested": [1, 2, {"k": "v"}]},
    }
    # caught-up: data names the head, and the cursor in its id is at that head
    for e in (e for e in log if e["kind"] == "caught-up"):
        d = json.loads(e["data"])
        assert decode_cursor(e["id"])[d["topic"]] == d["head_seq"], e
    # ids only move forward, and the last one is the session's position
    cursors = [decode_cursor(e["id"]) for e in log if e["id"]]
    for before, after in itertools.pairwise(cursors):
        assert all(after[t] >= before[t] for t in (a, b)), (before, after)
    assert cursors[-1] == {a: 3, b: 3}


def test_capped_topic_read_from_too_far_back_gives_tombstone(
    server: ServerProcess,
    http: httpx.Client,
    new_page: Callable[[], Page],
    topic_names: Callable[[str], str],
) -> None:
    t = topic_names("capped")
    assert http.put(f"/v0/topics/{t}", json={"cap_records": 3}).status_code == 201
    write(http, t, [{"n": n} for n in range(1, 11)])  # keeps 8..10
    url = create_watch(http, {t: {"from_seq": 0}})
    page = open_page(new_page, server.url)

    w = BrowserWatch(page, url)
    w.wait_kind("caught-up", t)
    kinds = [e["kind"] for e in w.log()]
    assert kinds == ["open", "tombstone", "record", "caught-up"], kinds
    tomb = w.events("tombstone")[0]
    assert json.loads(tomb["data"]) == {
        "topic": t,
        "reason": "from_seq_too_old",  # first read after the stream opened (§7.3)
        "gap_from": 1,
        "gap_to": 7,
        "earliest_seq": 8,
        "head_seq": 10,
    }
    assert decode_cursor(tomb["id"]) == {t: 7}  # cursor moved to gap_to before the id
    assert w.seqs(t) == [8, 9, 10]
    check_record_events(w.events("record"), {t})

    # close, let the cap evict past the session cursor, open a new EventSource on the same
    # session: its first read reports the gap as from_seq_too_old again
    w.close()
    wait_no_open_streams(http)
    write(http, t, [{"n": n} for n in range(11, 16)])  # keeps 13..15
    w2 = BrowserWatch(page, url)
    w2.wait_kind("caught-up", t)
    assert [e["kind"] for e in w2.log()] == ["open", "tombstone", "record", "caught-up"]
    d = json.loads(w2.events("tombstone")[0]["data"])
    assert (d["reason"], d["gap_from"], d["gap_to"], d["earliest_seq"]) == (
        "from_seq_too_old",
        11,
        12,
        13,
    )
    assert w2.seqs(t) == [13, 14, 15]


def test_close_and_reopen_resumes_from_session_cursors(
    server: ServerProcess,
    http: httpx.Client,
    new_page: Callable[[], Page],
    topic_names: Callable[[str], str],
) -> None:
    t = topic_names("resume")
    write(http, t, [1, 2, 3])
    url = create_watch(http, {t: {"from_seq": 0}})
    page = open_page(new_page, server.url)

    w = BrowserWatch(page, url)
    w.wait_kind("caught-up", t)
    assert w.seqs(t) == [1, 2, 3]
    w.close()
    assert w.state() == CLOSED
    wait_no_open_streams(http)
    write(http, t, [4, 5, 6])  # while no stream is open

    w2 = BrowserWatch(page, url)  # a new EventSource: no Last-Event-ID, session cursors rule
    w2.wait_seqs(t, 3)
    w2.wait_kind("caught-up", t)
    write(http, t, [7])
    w2.wait_seqs(t, 4)
    assert w.seqs(t) + w2.seqs(t) == [1, 2, 3, 4, 5, 6, 7]
    assert w.seqs(t) == [1, 2, 3]  # the closed one got nothing more
    check_record_events(w2.events("record"), {t})


def test_auto_reconnect_sends_last_event_id_and_loses_nothing(
    server: ServerProcess,
    http: httpx.Client,
    new_page: Callable[[], Page],
    make_proxy: Callable[[ServerProcess], SseProxy],
    topic_names: Callable[[str], str],
) -> None:
    """The server sends frames the browser never gets (the proxy swallows them), then the
    connection drops. The session cursor is already past them; only the browser's own
    `Last-Event-ID` on its automatic reconnect (§7.4 rewind) brings them back."""
    t = topic_names("reconnect")
    write(http, t, [1, 2, 3])
    url = create_watch(http, {t: {"from_seq": 0}})
    proxy = make_proxy(server)
    page = open_page(new_page, proxy.url)

    w = BrowserWatch(page, url)
    w.wait_kind("caught-up", t)
    assert w.seqs(t) == [1, 2, 3]
    seen_id = w.js("window.__seglog.lastEventId($W)")
    assert decode_cursor(seen_id) == {t: 3}

    proxy.freeze()
    write(http, t, [4, 5, 6])
    wait_until(
        "the server to send records 4..6 into the frozen proxy",
        lambda: b'"to_seq":6' in proxy.swallowed,
    )
    proxy.cut()

    w.wait("window.__seglog.count($W, 'open') >= 2", timeout_ms=10_000)  # retry: 2000
    w.wait_seqs(t, 6)
    w.wait_kind("caught-up", t, count=2)
    write(http, t, [7])
    w.wait_seqs(t, 7)

    assert w.seqs(t) == [1, 2, 3, 4, 5, 6, 7]  # nothing lost, nothing twice
    assert len(proxy.watch_requests) == 2
    first, again = proxy.watch_requests
    assert "last-event-id" not in first
    assert again["_request_line"].startswith(f"GET {url} ")
    assert again["last-event-id"] == seen_id  # the browser resumed from what it had seen
    kinds = [e["kind"] for e in w.log()]
    cut_at = kinds.index("error")
    assert kinds[cut_at + 1] == "open", kinds
    assert w.log()[cut_at]["state"] == CONNECTING  # a dropped stream is retried, not closed
    waited_ms = w.log()[cut_at + 1]["t"] - w.log()[cut_at]["t"]
    assert waited_ms >= 1500, waited_ms  # the server's `retry: 2000` was honoured
    check_record_events(w.events("record"), {t})


def test_stream_ended_by_topic_deletion_reconnects_with_last_event_id(
    server: ServerProcess,
    http: httpx.Client,
    new_page: Callable[[], Page],
    make_proxy: Callable[[ServerProcess], SseProxy],
    topic_names: Callable[[str], str],
) -> None:
    """Deleting every watched topic ends the stream (§7.3 `topic-deleted`); to a browser that
    is a dropped connection, so it reconnects by itself, sending `Last-Event-ID`, and the
    session, having nothing left to watch, is gone (`404`): the EventSource closes."""
    t = topic_names("deleted")
    write(http, t, ["a", "b"])
    url = create_watch(http, {t: {"from_seq": 0}})
    proxy = make_proxy(server)
    page = open_page(new_page, proxy.url)

    w = BrowserWatch(page, url)
    w.wait_kind("caught-up", t)
    assert http.delete(f"/v0/topics/{t}").json()["deleted"] is True
    w.wait_kind("topic-deleted", t)
    gone = w.events("topic-deleted")[0]
    assert json.loads(gone["data"]) == {"topic": t, "head_seq": 0, "reason": "deleted"}
    assert decode_cursor(gone["id"]) == {t: 2}

    # The browser reconnects by itself with the last id; the session ended with its last
    # topic, so the reconnect is `404` and the EventSource stops (no endless reconnects).
    wait_until("the reconnect request", lambda: len(proxy.watch_requests) >= 2)
    assert proxy.watch_requests[1]["last-event-id"] == gone["id"]
    w.wait(f"window.__seglog.state($W) === {CLOSED}", timeout_ms=10_000)
    assert w.seqs(t) == [1, 2]  # no record redelivered
    assert len(w.events("topic-deleted")) == 1
    assert http.get(url).status_code == 404


def test_shutdown_error_frame_then_fresh_server_closes_the_eventsource(
    make_server: ServerFactory,
    new_page: Callable[[], Page],
    make_proxy: Callable[[ServerProcess], SseProxy],
) -> None:
    """SIGTERM: the page sees the `event: error` frame (§7.3 item 6) as a MessageEvent on
    the EventSource's `error` listeners, then reconnects; a restarted server has no
    sessions (§7.1: in memory), so the reconnect is `404` and the EventSource closes."""
    old, fresh = make_server(), make_server()
    with httpx.Client(base_url=old.url, timeout=10.0) as c:
        write(c, "shut", ["x"])
        url = create_watch(c, {"shut": {"from_seq": 0}})
    proxy = make_proxy(old)
    page = open_page(new_page, proxy.url)

    w = BrowserWatch(page, url)
    w.wait_kind("caught-up", "shut")
    proxy.upstream = fresh.address  # new connections (the reconnect) reach the new process
    old.stop()

    w.wait("window.__seglog.count($W, 'error-frame') >= 1")
    frame = w.events("error-frame")[0]
    assert json.loads(frame["data"]) == {
        "code": "server_shutting_down",
        "message": "server is shutting down; reconnect",
    }
    assert decode_cursor(frame["id"]) == {"shut": 1}
    w.wait(f"window.__seglog.state($W) === {CLOSED}", timeout_ms=10_000)
    wait_until("the reconnect request", lambda: len(proxy.watch_requests) >= 2)
    assert proxy.watch_requests[1]["last-event-id"] == frame["id"]
    status = page.evaluate(
        "async (u) => (await fetch(u, {headers: {Accept: 'text/event-stream'}})).status", url
    )
    assert status == 404


def test_token_query_parameter_authenticates_the_stream(
    make_server: ServerFactory, new_page: Callable[[], Page]
) -> None:
    owner, other = "own+er/k=1", "other-key"  # '+', '/', '=' must survive form-urlencoding
    srv = make_server(env={"SEGLOG_API_KEYS": f"{owner},{other}"})
    with httpx.Client(
        base_url=srv.url, timeout=10.0, headers={"Authorization": f"Bearer {owner}"}
    ) as c:
        write(c, "secured", [{"v": 1}])
        url = create_watch(c, {"secured": {"from_seq": 0}})
        page = open_page(new_page, srv.url)  # probes need no key

        def with_token(token: str | None) -> str:
            if token is None:
                return url
            return str(
                page.evaluate("([u, k]) => u + '?token=' + encodeURIComponent(k)", [url, token])
            )

        refused = {
            name: BrowserWatch(page, with_token(tok))
            for name, tok in (("other", other), ("unknown", "nope"), ("none", None))
        }
        ok = BrowserWatch(page, with_token(owner))
        ok.wait_kind("caught-up", "secured")
        write(c, "secured", [{"v": 2}])
        ok.wait_seqs("secured", 2)
        assert ok.state() == OPEN

        for name, w in refused.items():
            w.wait(f"window.__seglog.state($W) === {CLOSED}")
            kinds = [e["kind"] for e in w.log()]
            assert kinds == ["error"], (name, kinds)  # never opened, no retry after a 401
            assert w.events("error")[0]["state"] == CLOSED

        for token in (other, "nope", None):
            got = page.evaluate(
                """async (u) => {
                     const r = await fetch(u, {headers: {Accept: 'text/event-stream'}});
                     return [r.status, await r.json()];
                   }""",
                with_token(token),
            )
            assert got[0] == 401 and got[1]["error"]["code"] == "unauthorized", (token, got)
        assert ok.seqs("secured") == [1, 2]
