"""The web console at `/console` (API §13.3, issue 14) in headless Chromium against a real server.

Every assertion is made on what the page shows (its DOM), and what the console did is
checked against the server over HTTP. Waits are on DOM conditions, never on sleeps.

Covered: the page and its assets are served without a key (auth on) and nothing else is;
the topic list (heads, counts, human sizes, write rate, queue fields); the message browser
(paging, jump to seq, jump to time, tag filter); the live tail over SSE (a record written
after the page opened; a tombstone in words; `?token=` with auth on); the topic forms
(create, alter as a read-modify-write, refuse a second create, delete); with auth on, a
read-only key sees the list and its create is refused with the server's own message; the
key lives in sessionStorage; record content with markup renders as text; the server view.

`SEGLOG_CONSOLE_SCREENSHOT=docs/console.png` makes the topic-list test save a screenshot.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote as enc

import httpx
import pytest

from tests.browser.conftest import ServerFactory
from tests.support.server import ServerProcess

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.timeout(90)

SCREENSHOT_ENV = "SEGLOG_CONSOLE_SCREENSHOT"


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10.0) as c:
        yield c


@pytest.fixture
def name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    base = request.node.name.removeprefix("test_").replace("_", "-")[:40]
    return lambda suffix: f"console-{base}-{suffix}"


def write(c: httpx.Client, topic: str, records: list[dict[str, Any]]) -> list[int]:
    r = c.post(f"/v0/topics/{topic}", json={"records": records})
    assert r.status_code in (200, 201), r.text
    return cast(list[int], r.json()["seqs"])


def open_console(new_page: Callable[[], Page], origin: str, hash_: str = "#/topics") -> Page:
    page = new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    resp = page.goto(f"{origin}/console{hash_}")
    assert resp is not None and resp.status == 200
    page.wait_for_selector("body[data-ready='1']", state="attached")
    assert errors == [], errors
    return page


def wait_js(page: Page, body: str, arg: Any = None, timeout_ms: float = 10_000) -> Any:
    """Wait until the JS function body (`a` = arg) returns something truthy; return it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        handle = page.wait_for_function(
            f"(a) => {{ {body} }}", arg=arg, timeout=timeout_ms, polling=50
        )
    except PlaywrightTimeout:
        pytest.fail(f"timed out waiting for: {body} (arg {arg!r})", pytrace=False)
    return handle.json_value()


def cell(page: Page, topic: str, col: str) -> str:
    return page.inner_text(f'tr[data-topic="{topic}"] td[data-col="{col}"]')


def shown_seqs(page: Page) -> list[int]:
    got = page.eval_on_selector_all(
        "#browse-records .rec", "els => els.map(e => Number(e.dataset.seq))"
    )
    return cast(list[int], got)


def wait_seqs(page: Page, first: int, last: int) -> None:
    wait_js(
        page,
        """const s = [...document.querySelectorAll('#browse-records .rec')]
             .map(e => Number(e.dataset.seq));
           return s.length && s[0] === a[0] && s[s.length - 1] === a[1];""",
        [first, last],
    )
    assert shown_seqs(page) == list(range(first, last + 1))


def fill_topic_form(page: Page, topic: str, **fields: str) -> None:
    page.fill("#topic-form [name=name]", topic)
    for key, value in fields.items():
        selector = f"#topic-form [name={key}]"
        if page.eval_on_selector(selector, "e => e.tagName") == "SELECT":
            page.select_option(selector, value)
        else:
            page.fill(selector, value)


def use_key(page: Page, key: str) -> None:
    page.fill("#key", key)
    page.click("#key-form button[type=submit]")
    wait_js(page, "return document.querySelector('#key-state').textContent.startsWith('key set')")


def human_bytes(n: int) -> str:
    """The console's size format (binary units)."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, i = float(n), 0
    while v >= 1024 and i < len(units) - 1:
        v, i = v / 1024, i + 1
    return f"{n} B" if i == 0 else f"{v:.{2 if v < 10 else 1}f} {units[i]}"


# --------------------------------------------------------------------------- serving


def test_page_and_assets_are_served_without_a_key_and_nothing_else(
    make_server: ServerFactory,
) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "admin-key"})
    with httpx.Client(base_url=srv.url, timeout=10.0) as c:
        page = c.get("/console")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert '<script src="/console/app.js"' in page.text
        for asset, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
            r = c.get(f"/console/{asset}")
            assert r.status_code == 200 and r.headers["content-type"].startswith(kind), asset
            assert len(r.content) > 1000
        missing = c.get("/console/__init__.py")  # in the package, but not an asset
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert c.get("/console/a/b").status_code in (401, 404)
        assert c.post("/console").status_code == 401  # only the GETs skip authentication
        assert c.post("/console", headers={"Authorization": "Bearer admin-key"}).status_code == 405
        assert c.get("/v0/topics").status_code == 401  # the API itself still needs the key
        doc = c.get("/v0/openapi.json", headers={"Authorization": "Bearer admin-key"})
        paths = doc.json()["paths"]  # served, so documented (§13.3)
        assert {"/console", "/console/{name}"} <= set(paths)


# --------------------------------------------------------------------------- topic list


def test_topic_list_shows_topics_written_through_the_api(
    server: ServerProcess, api: httpx.Client, new_page: Callable[[], Page]
) -> None:
    log, queue = "orders.events", "jobs.resize"  # short names: this page is the docs' screenshot
    write(api, log, [{"data": {"n": n, "text": "x" * 700}} for n in range(3)])
    assert api.put(f"/v0/topics/{queue}", json={"type": "queue"}).status_code == 201
    write(api, queue, [{"data": {"job": 1}}, {"data": {"job": 2}}])
    state = api.get(f"/v0/topics/{log}").json()
    page = open_console(new_page, server.url)
    page.set_viewport_size({"width": 1400, "height": 800})

    page.wait_for_selector(f'tr[data-topic="{log}"]')
    page.wait_for_selector(f'tr[data-topic="{queue}"]')
    assert cell(page, log, "head") == "3" and cell(page, log, "count") == "3"
    assert cell(page, log, "earliest") == "1"
    assert cell(page, log, "size") == human_bytes(state["bytes"])
    assert cell(page, log, "size").endswith("KiB")  # > 2 KiB of data
    assert cell(page, log, "type") == "log" and cell(page, log, "durability") == "disk"
    assert cell(page, log, "queue") == ""
    assert cell(page, queue, "type") == "queue"
    assert cell(page, queue, "queue") == "2 / 0 / 0"  # ready / in flight / dead-lettered
    assert cell(page, log, "rate") == "—"  # no earlier refresh to compare with yet

    # The next auto refresh sees the new head and a write rate from the head delta.
    write(api, log, [{"data": n} for n in range(5)])
    rate = wait_js(
        page,
        """const row = document.querySelector(`tr[data-topic="${a}"]`);
           const head = row && row.querySelector('[data-col=head]').textContent;
           return head === '8' && row.querySelector('[data-col=rate]').textContent;""",
        log,
    )
    assert rate.endswith("/s") and float(rate.removesuffix("/s")) > 0, rate
    if shot := os.environ.get(SCREENSHOT_ENV):
        page.screenshot(path=shot, full_page=True)


# --------------------------------------------------------------------------- browser


def test_message_browser_pages_jumps_and_filters(
    server: ServerProcess,
    api: httpx.Client,
    new_page: Callable[[], Page],
    name: Callable[[str], str],
) -> None:
    t = name("t")
    write(api, t, [{"data": {"n": n}, "tag": "odd" if n % 2 else "even"} for n in range(1, 61)])
    first_ts = api.post(f"/v0/topics/{t}/diff", json={"limit": 1}).json()["records"][0]["$ts"]
    while int(time.time() * 1000) <= first_ts + 1:  # the second batch gets a later $ts
        time.sleep(0.001)
    write(api, t, [{"data": {"n": n}, "tag": "odd" if n % 2 else "even"} for n in range(61, 121)])
    later = api.post(f"/v0/topics/{t}/diff", json={"from_seq": 60, "limit": 1}).json()
    second_ts = later["records"][0]["$ts"]
    assert second_ts > first_ts

    page = open_console(new_page, server.url, f"#/browse/{t}")
    wait_seqs(page, 1, 50)  # page size 50
    assert page.is_disabled("#browse-prev")
    pre = page.inner_text('#browse-records .rec[data-seq="7"] pre.data')
    assert json.loads(pre) == {"n": 7} and "\n" in pre  # pretty-printed JSON
    assert "tag odd" in page.inner_text('#browse-records .rec[data-seq="7"] .rec-head')

    page.click("#browse-next")
    wait_seqs(page, 51, 100)
    page.click("#browse-next")
    wait_seqs(page, 101, 120)
    assert page.is_disabled("#browse-next")  # at the head
    page.click("#browse-prev")
    wait_seqs(page, 51, 100)
    page.click("#browse-first")
    wait_seqs(page, 1, 50)

    page.fill("#browse-seq", "77")
    page.click("#browse-seq-go")
    wait_seqs(page, 77, 120)
    assert page.eval_on_selector(".rec.hit", "e => e.dataset.seq") == "77"

    # Jump to time: the first record at or after the second batch's $ts is seq 61.
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second_ts // 1000))
    page.eval_on_selector(
        "#browse-time", "(e, v) => { e.value = v; }", f"{stamp}.{second_ts % 1000:03d}"
    )
    page.click("#browse-time-go")
    wait_seqs(page, 61, 110)
    assert page.eval_on_selector(".rec.hit", "e => e.dataset.seq") == "61"

    page.fill("#browse-tag", "even")
    wait_js(page, "return document.querySelectorAll('#browse-records .rec').length === 25")
    assert shown_seqs(page) == list(range(62, 111, 2))
    assert "25 of 50 match the tag filter" in page.inner_text("#browse-info")
    page.fill("#browse-tag", "o*")  # a glob: tags starting with "o"
    wait_js(page, "return document.querySelectorAll('#browse-records .rec').length === 25")
    assert shown_seqs(page) == list(range(61, 110, 2))


def test_markup_in_records_renders_as_text(
    server: ServerProcess,
    api: httpx.Client,
    new_page: Callable[[], Page],
    name: Callable[[str], str],
) -> None:
    t = name("xss")
    evil = (
        '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2"><b>bold</b>'
    )
    write(api, t, [{"data": {"html": evil}, "tag": "<i>tag</i>", "node": "<u>node</u>"}])
    page = open_console(new_page, server.url, f"#/browse/{t}")
    wait_seqs(page, 1, 1)
    shown = page.inner_text('#browse-records .rec[data-seq="1"]')
    assert json.dumps(evil) in shown and "tag <i>tag</i>" in shown and "node <u>node</u>" in shown

    page.goto(f"{server.url}/console#/tail/{t}")
    page.select_option("#tail-from", "begin")
    page.click("#tail-start")
    page.wait_for_selector("#tail-log li[data-kind=record]")
    line = page.inner_text("#tail-log li[data-kind=record]")
    tail_text = page.text_content("#tail-log li[data-kind=record]")
    assert json.dumps({"html": evil}, separators=(",", ":")) in line and "<i>tag</i>" in line

    page.evaluate("(h) => { location.hash = h; }", f"#/browse/{enc(t)}")  # same document
    wait_js(page, "return !document.querySelector('#view-browse').hidden")
    assert page.text_content("#tail-log li[data-kind=record]") == tail_text  # the tail is kept
    for where in ("#browse-records", "#tail-log"):
        markup = page.eval_on_selector(
            where, "e => e.querySelectorAll('script, img, b, i, u').length"
        )
        assert markup == 0, where
    assert page.evaluate("() => window.__pwned") is None


# --------------------------------------------------------------------------- live tail


def test_live_tail_shows_a_record_written_after_the_page_opened(
    server: ServerProcess,
    api: httpx.Client,
    new_page: Callable[[], Page],
    name: Callable[[str], str],
) -> None:
    t = name("t")
    write(api, t, [{"data": "old"}])
    page = open_console(new_page, server.url, f"#/tail/{t}")
    assert page.input_value("#tail-topics") == t
    page.click("#tail-start")  # "new records only"
    wait_js(page, "return document.querySelector('#tail-state').textContent.startsWith('live')")

    write(api, t, [{"data": {"written": "after the page opened"}, "tag": "late"}])
    page.wait_for_selector("#tail-log li[data-kind=record]")
    lines = page.eval_on_selector_all("#tail-log li", "els => els.map(e => e.textContent)")
    assert len(lines) == 1, lines  # the old record is not replayed
    assert '{"written":"after the page opened"}' in lines[0] and "#2" in lines[0]
    assert "late" in lines[0] and t in lines[0]

    write(api, t, [{"data": "third"}])
    wait_js(page, "return document.querySelectorAll('#tail-log li[data-kind=record]').length === 2")
    assert '"third"' in page.inner_text("#tail-log li:first-child")  # newest first

    page.click("#tail-stop")
    assert page.inner_text("#tail-state") == "stopped"


def test_live_tail_explains_a_tombstone_and_a_deletion(
    server: ServerProcess,
    api: httpx.Client,
    new_page: Callable[[], Page],
    name: Callable[[str], str],
) -> None:
    t = name("capped")
    assert api.put(f"/v0/topics/{t}", json={"cap_records": 3}).status_code == 201
    write(api, t, [{"data": n} for n in range(1, 11)])  # keeps 8..10
    page = open_console(new_page, server.url, f"#/tail/{t}")
    page.select_option("#tail-from", "begin")
    page.click("#tail-start")
    page.wait_for_selector("#tail-log li[data-kind=tombstone]")
    wait_js(page, "return document.querySelectorAll('#tail-log li[data-kind=record]').length === 3")
    words = page.inner_text("#tail-log li[data-kind=tombstone]")
    assert words.endswith(
        "⚠ Records 1–7 were removed before this reader got to them (the start point is older"
        " than the oldest record kept); the oldest record kept is 8, the head is 10."
    ), words

    assert api.delete(f"/v0/topics/{t}").json()["deleted"] is True
    page.wait_for_selector("#tail-log li[data-kind=deleted]")
    assert "the topic was deleted" in page.inner_text("#tail-log li[data-kind=deleted]")


# --------------------------------------------------------------------------- forms


def test_create_alter_and_delete_a_topic_through_the_forms(
    server: ServerProcess,
    api: httpx.Client,
    new_page: Callable[[], Page],
    name: Callable[[str], str],
) -> None:
    t = name("made")
    page = open_console(new_page, server.url)
    fill_topic_form(page, t, type="queue", durability="fsync", cap_records="100")
    page.click("#topic-submit")
    wait_js(
        page, "return document.querySelector('#topic-form-msg').textContent === a", f"created {t}"
    )
    cfg = api.get(f"/v0/topics/{t}").json()["config"]
    assert (cfg["type"], cfg["durability"], cfg["cap_records"]) == ("queue", "fsync", 100)
    page.wait_for_selector(f'tr[data-topic="{t}"]')

    # alter: only what the form changes; the rest of the stored config stays
    page.click(f'tr[data-topic="{t}"] [data-action=edit]')
    wait_js(page, "return document.querySelector('#topic-form [name=name]').readOnly")
    assert page.input_value("#topic-form [name=cap_records]") == "100"
    page.fill("#topic-form [name=cap_records]", "200")
    page.click("#topic-submit")
    msg = wait_js(
        page,
        "const m = document.querySelector('#topic-form-msg').textContent;"
        "return m.startsWith('altered') && m;",
    )
    assert "cap_records 100 → 200" in msg, msg
    cfg = api.get(f"/v0/topics/{t}").json()["config"]
    assert (cfg["type"], cfg["durability"], cfg["cap_records"]) == ("queue", "fsync", 200)

    # a second create of the same name is refused by the console (a PUT would replace it)
    fill_topic_form(page, t)
    page.click("#topic-submit")
    wait_js(page, "return document.querySelector('#topic-form-msg.error')")
    assert "already exists" in page.inner_text("#topic-form-msg")
    assert api.get(f"/v0/topics/{t}").json()["config"]["cap_records"] == 200

    prompts: list[str] = []

    def accept(dialog: Any) -> None:
        prompts.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.click(f'tr[data-topic="{t}"] [data-action=delete]')
    page.wait_for_selector(f'tr[data-topic="{t}"]', state="detached")
    assert prompts and t in prompts[0]
    assert page.inner_text("#topics-msg") == f"deleted {t}"
    assert api.get(f"/v0/topics/{t}").status_code == 404


# --------------------------------------------------------------------------- auth on


def test_read_only_key_sees_the_list_but_create_is_refused(
    make_server: ServerFactory, new_page: Callable[[], Page]
) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "admin-key,reader-key:read"})
    admin = httpx.Client(
        base_url=srv.url, timeout=10.0, headers={"Authorization": "Bearer admin-key"}
    )
    reader = httpx.Client(
        base_url=srv.url, timeout=10.0, headers={"Authorization": "Bearer reader-key"}
    )
    with admin, reader:
        write(admin, "orders", [{"data": {"id": 1}}])
        refused = reader.put("/v0/topics/made-by-reader", json={})
        assert refused.status_code == 403
        server_message = refused.json()["error"]["message"]

        page = open_console(new_page, srv.url)
        wait_js(page, "return document.querySelector('#topics-msg.error')")
        assert "401 unauthorized: missing or unknown API key" in page.inner_text("#topics-msg")
        assert page.query_selector('tr[data-topic="orders"]') is None

        use_key(page, "reader-key")
        page.wait_for_selector('tr[data-topic="orders"]')
        assert cell(page, "orders", "head") == "1"

        fill_topic_form(page, "made-by-reader")
        page.click("#topic-submit")
        wait_js(page, "return document.querySelector('#topic-form-msg.error')")
        shown = page.inner_text("#topic-form-msg")
        assert shown.startswith("403 forbidden: ") and server_message in shown, shown
        assert admin.get("/v0/topics/made-by-reader").status_code == 404

        # the key survives a reload (sessionStorage) and is not in the URL or a cookie
        page.reload()
        page.wait_for_selector('tr[data-topic="orders"]')
        assert page.evaluate("() => sessionStorage.getItem('seglog.console.key')") == "reader-key"
        assert "reader-key" not in page.url and page.context.cookies() == []


def test_live_tail_with_auth_on_uses_the_key(
    make_server: ServerFactory, new_page: Callable[[], Page]
) -> None:
    srv = make_server(env={"SEGLOG_API_KEYS": "admin-key,reader-key:read"})
    with httpx.Client(
        base_url=srv.url, timeout=10.0, headers={"Authorization": "Bearer admin-key"}
    ) as admin:
        write(admin, "events", [{"data": 1}])
        page = open_console(new_page, srv.url, "#/tail/events")
        page.click("#tail-start")  # no key yet: the watch is refused
        wait_js(page, "return document.querySelector('#tail-msg.error')")
        assert page.inner_text("#tail-msg").startswith("401 unauthorized")

        use_key(page, "reader-key")
        page.click("#tail-start")
        wait_js(page, "return document.querySelector('#tail-state').textContent.startsWith('live')")
        write(admin, "events", [{"data": {"secured": True}}])
        page.wait_for_selector("#tail-log li[data-kind=record]")
        assert '{"secured":true}' in page.inner_text("#tail-log li[data-kind=record]")


# --------------------------------------------------------------------------- server view


def test_server_view_shows_health_readiness_and_metric_charts(
    server: ServerProcess,
    api: httpx.Client,
    new_page: Callable[[], Page],
) -> None:
    page = open_console(new_page, server.url, "#/server")
    wait_js(page, "return document.querySelector('#card-health').textContent.includes('ok')")
    health = api.get("/v0/health").json()
    assert health["version"] in page.inner_text("#card-health")
    wait_js(page, "return document.querySelector('#card-ready').textContent.includes('ready')")
    # Rates need two samples; every chart draws a line once it has two points.
    wait_js(
        page,
        """const lines = document.querySelectorAll('#charts [data-metric] polyline');
           return lines.length === document.querySelectorAll('#charts [data-metric]').length
             && lines.length >= 9;""",
    )
    live = api.get("/v0/metrics", headers={"Accept": "application/json"}).json()["records_live"]
    wait_js(
        page,
        "return document.querySelector('[data-metric=records_live] .value').textContent === a",
        f"{live:,}",
    )
    assert page.get_attribute("#server-dot", "class") == "dot up"
