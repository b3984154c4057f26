"""One real server per session for the operations checks: a queue topic and a log topic
written to (so every per-topic family has samples, the queue ones included), then one scrape
of `/v0/metrics` that the docs, dashboard and alert tests compare themselves against."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.http.live import data_records, put_topic, write
from tests.support.server import ServerProcess

_TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.M)
_SAMPLE_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", re.M)


@dataclass(frozen=True, slots=True)
class Scrape:
    text: str
    families: dict[str, str]
    """Family name as written on the wire (`# TYPE` line) → type."""
    series: frozenset[str]
    """Every sample name on the wire (what PromQL selects: `_bucket`, `_sum`, … included)."""
    sample_counts: dict[str, int]
    """Family name (as on the wire) → number of samples."""


def parse_scrape(text: str) -> Scrape:
    """The families of `text` as prometheus_client parses them, keyed by the names the
    server writes. The parser drops a counter's `_total` from the family name (and adds one
    to a counter sample that lacks it, e.g. `topics_uptime_ms`), so wire names come from the
    `# TYPE` lines and sample lines, and the parser's view must agree with them."""
    wire_types = dict(_TYPE_LINE.findall(text))
    series = frozenset(
        m.group(1)
        for line in text.splitlines()
        if line and not line.startswith("#")
        for m in [_SAMPLE_NAME.match(line)]
        if m
    )
    counts: dict[str, int] = {}
    for fam in text_string_to_metric_families(text):
        wire = fam.name if fam.name in wire_types else f"{fam.name}_total"
        assert wire in wire_types, f"parser family {fam.name} has no # TYPE line"
        assert wire_types[wire] == fam.type, (wire, wire_types[wire], fam.type)
        assert wire not in counts, f"family {wire} twice"
        counts[wire] = len(fam.samples)
    assert set(counts) == set(wire_types), set(counts) ^ set(wire_types)
    return Scrape(text, wire_types, series, counts)


@pytest.fixture(scope="session")
def scrape() -> Iterator[Scrape]:
    with (
        ServerProcess() as srv,
        httpx.Client(base_url=srv.url, timeout=30.0) as c,
    ):
        put_topic(c, "ops-jobs", {"type": "queue"})
        write(c, "ops-jobs", data_records(1, 2, 3))
        r = c.post("/v0/topics/ops-jobs/claim", json={"node": "w1", "max": 1})
        assert r.status_code == 200, r.text
        put_topic(c, "ops-log", {"durability": "fsync"})
        write(c, "ops-log", data_records("a", "b"))
        r = c.get("/v0/metrics")
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "text/plain; version=0.0.4"
        yield parse_scrape(r.text)
