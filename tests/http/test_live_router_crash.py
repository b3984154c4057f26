"""Black-box: SIGKILL a server while a routed source takes writes (SEMANTICS §8.4,
STORAGE §6 step 9, §7). After the restart every acked source record is in the dest, in
source order, exactly once (the dest has no other writers, so copies made after the last
snapshot are re-derived at the same dest seqs), for an `fsync` and a `disk` source."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.http.conftest import ServerFactory
from tests.http.live import diff, ok

SOURCES = {"src-f": "fsync", "src-d": "disk"}


def _all(c: httpx.Client, topic: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = 0
    while True:
        d = diff(c, topic, from_seq=cursor, limit=1000)
        assert d["tombstone"] is None, d
        out += d["records"]
        cursor = d["next_from_seq"]
        if d["caught_up"]:
            return out


def _check(c: httpx.Client, src: str, dst: str, acked: list[int]) -> None:
    source = [r["data"] for r in _all(c, src)]
    dest = _all(c, dst)
    # every acked write survived, in order, and nothing was fabricated
    assert source[: len(acked)] == acked, (src, len(source), len(acked))
    assert source == list(range(len(source)))
    # the dest holds exactly the source's records, in source order, at dest_base + k
    assert [r["data"] for r in dest] == source, (dst, len(dest), len(source))
    assert [r["$seq"] for r in dest] == list(range(1, len(dest) + 1))


def test_sigkill_while_forwarding_loses_and_reorders_nothing(make_server: ServerFactory) -> None:
    srv = make_server()
    c = httpx.Client(base_url=srv.url, timeout=15)
    for src, cls in SOURCES.items():
        ok(c.put(f"/v0/topics/{src}", json={"durability": cls}), 201)
        ok(c.put(f"/v0/routers/{src}->dst", json={"source": src, "dest": f"dst-{src}"}), 201)
    # some history, then a graceful restart: the snapshot holds routers and copies
    for src in SOURCES:
        ok(c.post(f"/v0/topics/{src}", json={"records": [{"data": i} for i in range(3)]}))
    srv.restart(graceful=True)
    c.close()
    c = httpx.Client(base_url=srv.url, timeout=15)
    for src in SOURCES:
        assert len(_all(c, f"dst-{src}")) == 3
        assert ok(c.get(f"/v0/routers/{src}->dst"))["forwarded_total"] == 3

    # One writer per source (so "acked in order" is exact), continuing after the 3 records.
    stop = threading.Event()
    acked: dict[str, list[int]] = {src: [] for src in SOURCES}
    threads = [
        threading.Thread(target=_writer, args=(srv.url, src, 3, stop, acked[src]), daemon=True)
        for src in SOURCES
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while min(len(a) for a in acked.values()) < 300 and time.monotonic() < deadline:
        time.sleep(0.02)  # load generation only; correctness never waits on time
    srv.kill()
    stop.set()
    for t in threads:
        t.join(10)
    assert min(len(a) for a in acked.values()) > 0
    c.close()

    srv.start()
    with httpx.Client(base_url=srv.url, timeout=15) as c2:
        for src in SOURCES:
            _check(c2, src, f"dst-{src}", list(range(3)) + acked[src])
            total = ok(c2.get(f"/v0/routers/{src}->dst"))["forwarded_total"]
            assert total == len(_all(c2, f"dst-{src}"))


def _writer(url: str, topic: str, start: int, stop: threading.Event, acked: list[int]) -> None:
    with httpx.Client(base_url=url, timeout=5) as c:
        n = start
        while not stop.is_set():
            batch = list(range(n, n + 3))
            try:
                r = c.post(f"/v0/topics/{topic}", json={"records": [{"data": v} for v in batch]})
            except httpx.HTTPError:
                return  # the server is gone
            if r.status_code != 200:
                return
            acked.extend(batch)
            n += 3
